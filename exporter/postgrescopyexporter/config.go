package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configretry"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter/exporterhelper"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// Config is the postgrescopy exporter's configuration.
type Config struct {
	// timeout bounds one batch's write (every COPY and the commit). Default 30s.
	TimeoutConfig exporterhelper.TimeoutConfig `mapstructure:",squash"`
	// sending_queue is the Collector's queue and batcher. Default: on, 32 MiB
	// (protobuf bytes) per signal, batches of 2,000 to 5,000 items or 20ms,
	// 2 consumers; a request larger than queue_size is cut into pieces that
	// fit; batch sizes left unset shrink to a smaller queue_size in the same
	// sizer. Off when redis is set and sending_queue is not (Redis is the
	// queue).
	QueueConfig configoptional.Optional[exporterhelper.QueueBatchConfig] `mapstructure:"sending_queue"`
	// retry_on_failure retries retryable failures with backoff. Default on,
	// 5s initial and 30s max interval, max_elapsed_time 0: a retryable
	// failure is retried until it succeeds, never dropped.
	RetryConfig configretry.BackOffConfig `mapstructure:"retry_on_failure"`

	// endpoint is a PostgreSQL URL or keyword/value DSN, e.g.
	// postgres://otel@db:5432/telemetry?sslmode=verify-full. Required. It is
	// opaque: a password inside it never reaches logs or print-config.
	Endpoint configopaque.String `mapstructure:"endpoint"`
	// password, when set, overrides the password in endpoint. Default empty.
	Password configopaque.String `mapstructure:"password"`
	// tls, when present, replaces the URL's sslmode settings with the
	// Collector's TLS client settings (ca_file, cert_file, key_file,
	// insecure_skip_verify, server_name_override, min_version...). Default absent.
	TLS configoptional.Optional[configtls.ClientConfig] `mapstructure:"tls"`
	// schema is the PostgreSQL schema that holds the tables. Default "otel";
	// a plain identifier of at most 63 bytes.
	Schema string `mapstructure:"schema"`
	// create_schema creates and migrates the schema on start. Default true;
	// false lets a role that may only write run the exporter.
	CreateSchema bool `mapstructure:"create_schema"`
	// query_exec_mode chooses how pgx sends queries: cache_statement,
	// cache_describe, describe_exec, exec or simple_protocol. Default empty:
	// the URL's default_query_exec_mode, else pgx's cache_statement. Behind
	// PgBouncer in transaction mode use simple_protocol (no prepared
	// statements outliving a transaction).
	QueryExecMode string `mapstructure:"query_exec_mode"`
	// max_conns caps the connection pool shared by the traces, metrics and
	// logs pipelines of this exporter. Default: sending_queue's num_consumers
	// × 3 signals, at least 4 (6 with the default queue), computed from the
	// queue the configuration ends up with; 0 computes it at start too. Any
	// size from 1 works (no stage holds a connection while it waits for
	// another); writers beyond it wait their turn, at a cost in throughput.
	MaxConns int32 `mapstructure:"max_conns"`
	// work_mem is the PostgreSQL work_mem of the exporter's write
	// transactions (SET LOCAL, so nothing outlives them: safe behind
	// PgBouncer). The AI spend capture trigger keeps a flush's spans in a
	// transition table that spills to a temporary file past it; what a
	// transaction uses is what its flush holds (at most max_bytes), not this
	// figure. Default 64MB; "" keeps the server's (or the role's) setting.
	WorkMem string `mapstructure:"work_mem"`
	// synchronous_commit is the PostgreSQL synchronous_commit of the
	// exporter's write transactions (SET LOCAL): with synchronous standbys
	// (synchronous_standby_names on the server), on or remote_apply makes a
	// commit, and so an acknowledgement, wait until a standby has flushed
	// it, and a failover to that standby loses nothing acknowledged; one of
	// remote_apply, on, remote_write, local, off. Default "": the server's
	// (or the role's) setting (see docs/delivery.md).
	SynchronousCommit string `mapstructure:"synchronous_commit"`
	// distribution is "" (one PostgreSQL) or "citus": at start, after the
	// migrations, the tables are distributed on the Citus coordinator named by
	// endpoint (spans by trace_id; logs, colocated with them, and metrics by
	// a shard_key column written in this mode only; see docs/citus.md).
	// Default "".
	Distribution string `mapstructure:"distribution"`
	// indexes keeps the index set that serves queries/ and the Jaeger
	// extension (recent errors, trace lookup, parent/child, a service's
	// spans over time, logs of a trace, metric series). Default true;
	// false drops it (faster ingest, slower queries). Applied only with
	// create_schema: true.
	Indexes bool `mapstructure:"indexes"`
	// partitioning lays out the daily (by default) time partitions, made
	// ahead of time, and their retention. See PartitioningConfig.
	Partitioning PartitioningConfig `mapstructure:"partitioning"`
	// ledger_retention is how long the ledger remembers committed batches (a
	// direct request's key, a Redis entry's id) to recognize a retry or
	// a redelivery. Default 24h; at least 1m, and at least 10 × redis::claim_after.
	LedgerRetention time.Duration `mapstructure:"ledger_retention"`
	// redis, when present, coordinates batching across replicas through Redis
	// streams (see RedisConfig). Default absent: direct writes.
	Redis configoptional.Optional[RedisConfig] `mapstructure:"redis"`
	// promote maps attribute keys to typed columns of spans and logs (see
	// PromoteConfig), added at start with create_schema: true. Default empty.
	Promote []PromoteConfig `mapstructure:"promote"`
	// promote_preset adds a predefined set of promoted columns: "genai" (the
	// default: gen_ai_provider_name, gen_ai_operation_name,
	// gen_ai_request_model, gen_ai_response_model, gen_ai_input_tokens,
	// gen_ai_output_tokens, gen_ai_cost_usd, gen_ai_cache_read_input_tokens,
	// gen_ai_cache_creation_input_tokens, gen_ai_reasoning_output_tokens,
	// gen_ai_conversation_id, gen_ai_agent_name on spans) or "none". A promote
	// entry of the same column name replaces the preset's.
	PromotePreset string `mapstructure:"promote_preset"`
	// limits bounds the size of one value and one row; larger ones are cut
	// with a marker, never dropped (see LimitsConfig).
	Limits LimitsConfig `mapstructure:"limits"`
	// pricing names the price file for GenAI calls (see PricingConfig).
	// Default none: nothing is priced.
	Pricing PricingConfig `mapstructure:"pricing"`
	// cost_attribution groups AI spend by team, project... (see
	// CostAttributionConfig). Default no dimension, late_window 6h.
	CostAttribution CostAttributionConfig `mapstructure:"cost_attribution"`
}

// Unmarshal applies the defaults that depend on what the user wrote: with a
// redis section and no sending_queue, Redis is the queue and the sending queue
// is off (an in-memory queue in front would acknowledge before Redis holds the
// request); batch sizes the user did not set fit under a smaller queue_size;
// a persistent queue (storage) acknowledges once it holds the request unless
// the user asked for wait_for_result, which the Collector refuses next to
// storage: the default of an in-memory queue, acknowledging once committed,
// does not make the first persistent queue a user writes fail to start.
func (cfg *Config) Unmarshal(conf *confmap.Conf) error {
	if err := conf.Unmarshal(cfg); err != nil {
		return err
	}
	if cfg.Redis.HasValue() && !conf.IsSet("sending_queue") {
		cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	}
	if cfg.QueueConfig.HasValue() && cfg.QueueConfig.Get().StorageID != nil && !conf.IsSet("sending_queue::wait_for_result") {
		cfg.QueueConfig.Get().WaitForResult = false
	}
	if cfg.QueueConfig.HasValue() {
		fitBatchToQueue(cfg.QueueConfig.Get(), conf.IsSet("sending_queue::batch::min_size"), conf.IsSet("sending_queue::batch::max_size"))
	}
	if !conf.IsSet("max_conns") {
		cfg.MaxConns = defaultMaxConns(cfg.QueueConfig)
	}
	return nil
}

// defaultMaxConns is max_conns's default for a sending queue: a connection
// for each consumer of each of the three signals, at least 4.
func defaultMaxConns(q configoptional.Optional[exporterhelper.QueueBatchConfig]) int32 {
	n := int32(4)
	if q.HasValue() {
		n = max(n, int32(q.Get().NumConsumers)*3)
	}
	return n
}

// fitBatchToQueue lowers the batch sizes the user did not set when the queue
// (in the same sizer) is smaller: min_size to half the queue, so a filling
// batch leaves room for the requests behind it, and max_size to the queue.
// Sizes the user set are kept, and Validate refuses them if they cannot fit.
func fitBatchToQueue(q *exporterhelper.QueueBatchConfig, minSet, maxSet bool) {
	if !q.Batch.HasValue() || q.Batch.Get().Sizer != q.Sizer {
		return
	}
	b := q.Batch.Get()
	if !maxSet && b.MaxSize > q.QueueSize {
		b.MaxSize = q.QueueSize
	}
	if !minSet && b.MinSize > q.QueueSize/2 {
		b.MinSize = q.QueueSize / 2
	}
	if !minSet && b.MaxSize > 0 && b.MinSize > b.MaxSize {
		b.MinSize = b.MaxSize
	}
}

// Validate checks the exporter's own keys; nested sections validate themselves.
func (cfg *Config) Validate() error {
	var errs error
	if cfg.Endpoint == "" {
		errs = errors.Join(errs, errors.New(`"endpoint" is required: a PostgreSQL URL such as postgres://user@host:5432/db`))
	} else if err := checkEndpoint(string(cfg.Endpoint)); err != nil {
		errs = errors.Join(errs, err)
	}
	if !schema.ValidIdentifier(cfg.Schema) {
		errs = errors.Join(errs, fmt.Errorf(`"schema" %q is not a valid identifier: use letters, digits and _, not starting with a digit, at most 63 bytes`, cfg.Schema))
	}
	if cfg.Distribution != "" && cfg.Distribution != distributionCitus {
		errs = errors.Join(errs, fmt.Errorf(`"distribution" must be empty or "citus", got %q`, cfg.Distribution))
	}
	if _, ok := queryExecModes[cfg.QueryExecMode]; !ok {
		errs = errors.Join(errs, fmt.Errorf(`"query_exec_mode" %q is not one of cache_statement, cache_describe, describe_exec, exec, simple_protocol`, cfg.QueryExecMode))
	}
	if cfg.LedgerRetention < time.Minute {
		errs = errors.Join(errs, fmt.Errorf(`"ledger_retention" must be at least 1m, got %s`, cfg.LedgerRetention))
	}
	if cfg.Redis.HasValue() && cfg.LedgerRetention < 10*cfg.Redis.Get().ClaimAfter {
		errs = errors.Join(errs, fmt.Errorf(`"ledger_retention" (%s) must be at least 10 × redis::claim_after (%s)`, cfg.LedgerRetention, 10*cfg.Redis.Get().ClaimAfter))
	}
	if cfg.Redis.HasValue() && cfg.QueueConfig.HasValue() && !cfg.QueueConfig.Get().WaitForResult {
		// An in-memory queue acknowledges a request before Redis holds it,
		// and a crash would lose what the client was told was received.
		errs = errors.Join(errs, errors.New(`with "redis", the sending queue must not acknowledge early: set "sending_queue::enabled: false" (Redis is the queue) or "sending_queue::wait_for_result: true"`))
	}
	if _, err := cfg.layout(); err != nil {
		errs = errors.Join(errs, err)
	}
	if !pgwrite.ValidWorkMem(cfg.WorkMem) {
		errs = errors.Join(errs, fmt.Errorf(`"work_mem" %q is not a PostgreSQL memory size: a number and one of B, kB, MB, GB, TB (such as 64MB), or "" for the server's`, cfg.WorkMem))
	}
	if v := cfg.SynchronousCommit; v != "" && !slices.Contains(pgwrite.SynchronousCommits, v) {
		errs = errors.Join(errs, fmt.Errorf(`"synchronous_commit" %q is not one of %s, or "" for the server's`, v, strings.Join(pgwrite.SynchronousCommits, ", ")))
	}
	if q := cfg.QueueConfig; q.HasValue() && q.Get().Sizer == exporterhelper.RequestSizerTypeBytes && q.Get().QueueSize > 0 && q.Get().QueueSize < minQueueBytes {
		errs = errors.Join(errs, fmt.Errorf(`"sending_queue::queue_size" is %d bytes (sizer: bytes, the default): a bytes-sized queue needs at least %d (1 MiB); for a queue counted in items set "sending_queue::sizer: items"`, q.Get().QueueSize, minQueueBytes))
	}
	if cfg.MaxConns < 0 {
		errs = errors.Join(errs, fmt.Errorf(`"max_conns" must be 0 (automatic) or positive, got %d`, cfg.MaxConns))
	}
	return errs
}

// connStringInError matches the connection string pgconn quotes in its parse
// errors. pgconn masks the password, but not all of it when the password holds
// a raw '@', so the string is dropped altogether.
var connStringInError = regexp.MustCompile("cannot parse `[^`]*`")

func withoutConnString(err error) string {
	return connStringInError.ReplaceAllString(err.Error(), "cannot parse endpoint")
}

// checkEndpoint parses endpoint with pgx's parser and refuses what it cannot
// read unambiguously. No message quotes any part of endpoint: a password
// that the parser misplaced (a raw '@' ends the user information early, a
// raw '/' ends it before it began) would sit in the part quoted.
func checkEndpoint(endpoint string) error {
	if rest, ok := cutURLScheme(endpoint, "postgres://", "postgresql://"); ok {
		// libpq's rule: the first '@' before the first '/' ends the user
		// information.
		authority, path, _ := strings.Cut(rest, "/")
		if err := checkUserinfo(`"endpoint" is not a valid PostgreSQL URL`, authority, path, pgUserinfoByte); err != nil {
			return err
		}
	}
	_, err := pgxpool.ParseConfig(endpoint)
	if err == nil {
		return nil
	}
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// The parser's reason quotes the text it stopped at, which may be
		// part of a password; the fix is said instead.
		switch {
		case strings.Contains(pe.Error(), "`: failed to parse as URL"):
			return errors.New(`"endpoint" is not a valid PostgreSQL URL: percent-encode '@', '/', '%' and spaces in the user name, password and database name (%40, %2F, %25, %20), or put the password in "password"`)
		case strings.Contains(pe.Error(), "`: failed to parse as keyword/value"):
			return errors.New(`"endpoint" is not a valid PostgreSQL keyword/value DSN: write each setting as key=value, quoting a value that holds spaces or quotes (password='a b\'c', with \' and \\ inside), or put the password in "password"`)
		}
	}
	// The structure was read; the reason is about another setting (port,
	// sslmode, timeouts), never about the password.
	return fmt.Errorf(`"endpoint" is not a valid PostgreSQL URL or DSN: %s`, withoutConnString(err))
}

// cutURLScheme returns what follows the first of schemes that s starts with.
func cutURLScheme(s string, schemes ...string) (string, bool) {
	for _, scheme := range schemes {
		if rest, ok := strings.CutPrefix(s, scheme); ok {
			return rest, true
		}
	}
	return "", false
}

// checkUserinfo refuses a URL whose user information cannot be told apart
// from its host unambiguously: authority is what precedes the path, after the
// text that follows. valid says which bytes may stand unencoded in the user
// name and password. what starts each message; nothing of the URL is quoted.
func checkUserinfo(what, authority, after string, valid func(byte) bool) error {
	switch n := strings.Count(authority, "@"); {
	case n > 1:
		return fmt.Errorf(`%s: its user name or password holds a raw '@': percent-encode it as %%40`, what)
	case n == 0 && strings.Contains(after, "@"):
		return fmt.Errorf(`%s: it has an '@' after its host: a '/', '?' or '#' in the user name or password must be percent-encoded (%%2F, %%3F, %%23), and an '@' as %%40`, what)
	case n == 0:
		return nil
	}
	userinfo, _, _ := strings.Cut(authority, "@")
	for i := 0; i < len(userinfo); i++ {
		c := userinfo[i]
		switch {
		case c == '%':
			if i+2 >= len(userinfo) || !isHex(userinfo[i+1]) || !isHex(userinfo[i+2]) {
				return fmt.Errorf(`%s: its user name or password holds a '%%' that starts no percent-encoding: write it as %%25`, what)
			}
		case c == ' ':
			return fmt.Errorf(`%s: its user name or password holds a space: percent-encode it as %%20`, what)
		case !valid(c):
			return fmt.Errorf(`%s: its user name or password holds a character that must be percent-encoded (e.g. '"' as %%22)`, what)
		}
	}
	return nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// pgUserinfoByte: libpq takes any byte but '%' (an escape) and NUL literally.
func pgUserinfoByte(c byte) bool { return c != 0 }

// defaultRetryConfig is the Collector's backoff without its 300s budget: a
// retryable failure (PostgreSQL or Redis unreachable) is retried until it
// succeeds, so an acknowledged request is never dropped by an outage.
func defaultRetryConfig() configretry.BackOffConfig {
	rc := configretry.NewDefaultBackOffConfig()
	rc.MaxElapsedTime = 0
	return rc
}

const distributionCitus = "citus"

// queryExecModes maps query_exec_mode values to pgx's; "" keeps the URL's.
var queryExecModes = map[string]pgx.QueryExecMode{
	"":                0,
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}
