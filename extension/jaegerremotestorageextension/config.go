package jaegerremotestorageextension

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// Config is the jaeger_remote_storage extension's configuration.
type Config struct {
	// endpoint is a PostgreSQL URL or keyword/value DSN of the database the
	// postgrescopy exporter writes to, or of a read replica of it, e.g.
	// postgres://jaeger@db:5432/telemetry?sslmode=verify-full. Required. It
	// is opaque: a password inside it never reaches logs or print-config.
	Endpoint configopaque.String `mapstructure:"endpoint"`
	// password, when set, overrides the password in endpoint. Default empty.
	Password configopaque.String `mapstructure:"password"`
	// tls, when present, replaces the URL's sslmode settings with the
	// Collector's TLS client settings (ca_file, cert_file, key_file,
	// server_name_override, min_version...). Default absent.
	TLS configoptional.Optional[configtls.ClientConfig] `mapstructure:"tls"`
	// schema is the PostgreSQL schema that holds the tables, as the
	// exporter's schema. Default "otel"; a plain identifier of at most 63
	// bytes.
	Schema string `mapstructure:"schema"`
	// query_exec_mode chooses how pgx sends queries: cache_statement,
	// cache_describe, describe_exec, exec or simple_protocol. Default empty:
	// the URL's default_query_exec_mode, else pgx's cache_statement. Behind
	// PgBouncer in transaction mode use simple_protocol.
	QueryExecMode string `mapstructure:"query_exec_mode"`
	// max_conns caps the connection pool: the requests read at once. Default
	// 4; at least 1.
	MaxConns int32 `mapstructure:"max_conns"`
	// grpc is the gRPC server Jaeger connects to (endpoint, tls, auth,
	// keepalive, max_recv_msg_size_mib...). Default endpoint localhost:17271.
	GRPC configgrpc.ServerConfig `mapstructure:"grpc"`
	// timeout bounds one request (a trace, a search, a list). Default 30s;
	// 0 leaves only the client's deadline.
	Timeout time.Duration `mapstructure:"timeout"`
	// limits bounds what one request may read and return (see LimitsConfig).
	Limits LimitsConfig `mapstructure:"limits"`
}

// LimitsConfig bounds one request.
type LimitsConfig struct {
	// max_traces caps the traces one search returns, whatever limit the
	// search asks for. Default 1000.
	MaxTraces int `mapstructure:"max_traces"`
	// default_traces is the number of traces a search that asks for none
	// returns. Default 20; at most max_traces.
	DefaultTraces int `mapstructure:"default_traces"`
	// max_trace_ids caps the trace ids one GetTraces request may name; a
	// request naming more is refused. Default 100.
	MaxTraceIDs int `mapstructure:"max_trace_ids"`
	// max_spans_per_trace caps the spans returned for one trace: the
	// earliest. Default 10000.
	MaxSpansPerTrace int `mapstructure:"max_spans_per_trace"`
}

func createDefaultConfig() *Config {
	grpc := configgrpc.NewDefaultServerConfig()
	grpc.NetAddr.Endpoint = "localhost:17271"
	d := traceread.DefaultLimits
	return &Config{
		Schema:   "otel",
		MaxConns: 4,
		GRPC:     grpc,
		Timeout:  30 * time.Second,
		Limits: LimitsConfig{
			MaxTraces: d.MaxTraces, DefaultTraces: d.DefaultTraces,
			MaxTraceIDs: d.MaxTraceIDs, MaxSpansPerTrace: d.MaxSpansPerTrace,
		},
	}
}

// queryExecModes maps query_exec_mode values to pgx's; "" keeps the URL's.
var queryExecModes = map[string]pgx.QueryExecMode{
	"":                0,
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// Validate checks the extension's own rules; the grpc and tls sections
// validate themselves.
func (cfg *Config) Validate() error {
	var errs error
	if cfg.Endpoint == "" {
		errs = errors.Join(errs, errors.New(`"endpoint" is required`))
	} else if _, err := pgxpool.ParseConfig(string(cfg.Endpoint)); err != nil {
		// pgx's error may quote part of a password.
		errs = errors.Join(errs, errors.New(`"endpoint" is not a valid PostgreSQL URL or DSN (percent-encode '@', '/', '%' and spaces in a URL's user name and password, or put the password in "password")`))
	}
	if !schema.ValidIdentifier(cfg.Schema) {
		errs = errors.Join(errs, fmt.Errorf(`"schema" %q is not a plain identifier (letters, digits, _; at most 63 bytes)`, cfg.Schema))
	}
	if _, ok := queryExecModes[cfg.QueryExecMode]; !ok {
		errs = errors.Join(errs, fmt.Errorf(`"query_exec_mode" %q is not one of cache_statement, cache_describe, describe_exec, exec, simple_protocol`, cfg.QueryExecMode))
	}
	if cfg.MaxConns < 1 {
		errs = errors.Join(errs, fmt.Errorf(`"max_conns" must be at least 1, got %d`, cfg.MaxConns))
	}
	if cfg.Timeout < 0 {
		errs = errors.Join(errs, fmt.Errorf(`"timeout" must not be negative, got %s`, cfg.Timeout))
	}
	l := cfg.Limits
	for _, f := range []struct {
		name string
		v    int
	}{{"limits::max_traces", l.MaxTraces}, {"limits::default_traces", l.DefaultTraces},
		{"limits::max_trace_ids", l.MaxTraceIDs}, {"limits::max_spans_per_trace", l.MaxSpansPerTrace}} {
		if f.v < 1 {
			errs = errors.Join(errs, fmt.Errorf(`%q must be at least 1, got %d`, f.name, f.v))
		}
	}
	if l.DefaultTraces > l.MaxTraces {
		errs = errors.Join(errs, fmt.Errorf(`"limits::default_traces" (%d) must not exceed "limits::max_traces" (%d)`, l.DefaultTraces, l.MaxTraces))
	}
	return errs
}

// poolConfig is the pool's configuration: the endpoint parsed by pgx, with
// the password, the TLS settings, the exec mode and max_conns.
func (cfg *Config) poolConfig(ctx context.Context) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(string(cfg.Endpoint))
	if err != nil {
		return nil, errors.New(`"endpoint" is not a valid PostgreSQL URL or DSN`)
	}
	cc := pc.ConnConfig
	if cfg.Password != "" {
		cc.Password = string(cfg.Password)
	}
	if cfg.QueryExecMode != "" {
		cc.DefaultQueryExecMode = queryExecModes[cfg.QueryExecMode]
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "postgrescopy-jaeger"
	}
	if cfg.TLS.HasValue() {
		t, err := cfg.TLS.Get().LoadTLSConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf(`"tls": %w`, err)
		}
		if t.ServerName == "" {
			t.ServerName = cc.Host
		}
		// The tls section decides alone: no plaintext or sslmode fallbacks.
		cc.TLSConfig = t
		cc.Fallbacks = nil
	}
	pc.MaxConns = cfg.MaxConns
	return pc, nil
}
