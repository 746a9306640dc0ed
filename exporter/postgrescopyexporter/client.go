package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/pgsink"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// client is what the traces, metrics and logs exporters of one
// configuration share: the PostgreSQL sink, the Redis side when configured,
// the telemetry, and the context of the writes.
type client struct {
	cfg    *Config
	logger *zap.Logger
	tel    *metadata.TelemetryBuilder
	layout *tables.Layout

	sink  *pgsink.Sink
	redis *redisSide // nil without a redis section

	// writes is the context of the flush workers' and the direct pushes'
	// writes: cancelled only when Shutdown's context ends (or a direct-mode
	// stop's drain does), so that a write in flight at shutdown finishes
	// within the Collector's deadline and no later.
	writes     context.Context
	stopWrites context.CancelFunc

	stop   stopClock // a direct-mode stop's drain (stop.go)
	outage outage    // direct writes failing, for the logs (stop.go)

	// wrapWorker, nil but in tests, wraps each flush worker's loop.
	wrapWorker func(run func(context.Context)) func(context.Context)
}

func newClient(cfg *Config, set component.TelemetrySettings) (*client, error) {
	tel, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	layout, err := cfg.layout()
	if err != nil {
		return nil, err
	}
	return &client{cfg: cfg, logger: set.Logger, tel: tel, layout: layout}, nil
}

// sinkConfig is the PostgreSQL sink's configuration: the endpoint parsed by
// pgx with the password, the query exec mode and max_conns, and the tls
// section loaded.
func (cfg *Config) sinkConfig(ctx context.Context, layout *tables.Layout) (pgsink.Config, error) {
	pc, err := pgxpool.ParseConfig(string(cfg.Endpoint))
	if err != nil {
		// pgx's error may quote part of a password; checkEndpoint says why
		// without quoting anything.
		if err := checkEndpoint(string(cfg.Endpoint)); err != nil {
			return pgsink.Config{}, err
		}
		return pgsink.Config{}, errors.New(`"endpoint" is not a valid PostgreSQL URL or DSN`)
	}
	cc := pc.ConnConfig
	if cfg.Password != "" {
		cc.Password = string(cfg.Password)
	}
	sc := pgsink.Config{
		Pool: pc, Citus: cfg.Distribution == distributionCitus,
		Schema: cfg.Schema, CreateSchema: cfg.CreateSchema, Indexes: cfg.Indexes, WorkMem: cfg.WorkMem, Layout: layout,
		LedgerRetention: cfg.LedgerRetention, Partitioning: cfg.Partitioning.layout(), MaintenanceInterval: cfg.Partitioning.MaintenanceInterval,
		CostLateWindow: cfg.CostAttribution.LateWindow, PriceFile: cfg.Pricing.File, PriceReload: cfg.Pricing.ReloadInterval,
		SynchronousCommit: cfg.SynchronousCommit,
	}
	if cfg.CreateSchema {
		if sc.CostDimensions, err = cfg.CostAttribution.dimensions(); err != nil {
			return pgsink.Config{}, err // Validate refuses it first
		}
	}
	if cfg.TLS.HasValue() {
		if sc.TLS, err = cfg.TLS.Get().LoadTLSConfig(ctx); err != nil {
			return pgsink.Config{}, fmt.Errorf(`"tls": %w`, err)
		}
	}
	if cfg.QueryExecMode != "" {
		cc.DefaultQueryExecMode = queryExecModes[cfg.QueryExecMode]
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "postgrescopy"
	}
	pc.MaxConns = cfg.MaxConns
	if pc.MaxConns == 0 {
		pc.MaxConns = defaultMaxConns(cfg.QueueConfig)
	}
	sc.Writers = cfg.writers()
	return sc, nil
}

// writers is how many writes may run at once: the flush workers of the
// three signals with Redis, the sending queue's consumers of each signal
// without; one a signal without a queue, where the callers decide.
func (cfg *Config) writers() int {
	switch {
	case cfg.Redis.HasValue():
		rc := cfg.Redis.Get()
		return len(signalNames) * rc.Workers * rc.Shards
	case cfg.QueueConfig.HasValue():
		return len(signalNames) * cfg.QueueConfig.Get().NumConsumers
	default:
		return len(signalNames)
	}
}

// start starts the sink, then the Redis side. A server that cannot be
// reached is waited for in the background (pgsink.Sink.Start).
func (c *client) start(ctx context.Context) error {
	c.stop.reset()
	sc, err := c.cfg.sinkConfig(ctx, c.layout)
	if err != nil {
		return err
	}
	sink := pgsink.New(sc, c.logger, sinkRecorder{c.tel})
	if err := sink.Start(ctx); err != nil {
		return err
	}
	c.sink, c.redis = sink, nil
	c.writes, c.stopWrites = context.WithCancel(context.Background())
	if c.cfg.Redis.HasValue() {
		if err := c.startRedis(ctx); err != nil {
			sink.Stop()
			c.stopWrites()
			sink.Wait()
			sink.Close()
			c.sink = nil
			return err
		}
	} else {
		c.logDelivery()
	}
	return nil
}

// logDelivery says at start what a stop or a crash risks in direct mode,
// as docs/delivery.md does.
func (c *client) logDelivery() {
	q := c.cfg.QueueConfig
	switch {
	case !q.HasValue():
		c.logger.Info("direct mode without sending_queue: a request is acknowledged once its rows are committed; a stop or a crash loses nothing acknowledged")
	case q.Get().WaitForResult:
		c.logger.Info("direct mode: a request is acknowledged once its rows are committed (sending_queue::wait_for_result); a stop or a crash loses nothing acknowledged")
	case q.Get().StorageID != nil:
		c.logger.Info("direct mode: a request is acknowledged once the persistent queue holds it (sending_queue::storage); a stop or a crash loses nothing acknowledged, the next start writes what the queue kept")
	default:
		c.logger.Warn("direct mode with an in-memory sending_queue and wait_for_result: false: requests acknowledged and not yet committed are lost when the collector stops or dies, all of them in a stop during a PostgreSQL outage; " +
			"set sending_queue::wait_for_result: true, or sending_queue::storage to a file_storage extension")
	}
}

// shutdown stops the background loops and the flush workers, lets writes in
// flight finish until ctx ends, and closes the clients. When ctx ends first
// it cancels the writes and returns at once: a goroutine slow to notice (or
// one that ignores cancellation) closes the clients after it returns, never
// holding Shutdown past its deadline.
func (c *client) shutdown(ctx context.Context) error {
	if c.sink == nil {
		return nil // never started, or its start failed: nothing runs
	}
	c.sink.Stop()
	if c.redis != nil {
		c.redis.rt.Stop()
	}
	done := make(chan struct{})
	go func() {
		c.sink.Wait()
		if c.redis != nil {
			<-c.redis.rt.Done()
		}
		close(done)
	}()
	select {
	case <-done:
		c.stopWrites()
		c.closeClients()
		return nil
	case <-ctx.Done():
	}
	// A cancelled write returns at once (pgx closes its connection).
	c.stopWrites()
	go func() {
		<-done
		c.closeClients()
	}()
	return fmt.Errorf("postgrescopy: shutdown: writes in flight cancelled: %w", ctx.Err())
}

// closeClients closes the Redis client and the pool, once every goroutine
// using them returned.
func (c *client) closeClients() {
	if c.redis != nil {
		c.redis.unregisterGauges()
		_ = c.redis.rt.Close()
	}
	c.sink.Close()
}

// sinkRecorder records the sink's measurements in the exporter's telemetry.
type sinkRecorder struct{ tel *metadata.TelemetryBuilder }

func (r sinkRecorder) Wrote(ctx context.Context, outcome string, d time.Duration) {
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", outcome)))
	r.tel.PostgrescopyCopyDuration.Record(ctx, d.Seconds(), attrs)
	r.tel.PostgrescopyBatches.Add(ctx, 1, attrs)
}

func (r sinkRecorder) Rows(ctx context.Context, table, outcome string, n int) {
	r.tel.PostgrescopyRows.Add(ctx, int64(n), metric.WithAttributes(
		attribute.String("table", table), attribute.String("outcome", outcome)))
}

func (r sinkRecorder) Bytes(ctx context.Context, table string, n int) {
	r.tel.PostgrescopyBytes.Add(ctx, int64(n), metric.WithAttributes(attribute.String("table", table)))
}

func (r sinkRecorder) Rejected(ctx context.Context, table string, n int) {
	r.tel.PostgrescopyRejectedRows.Add(ctx, int64(n), metric.WithAttributes(attribute.String("table", table)))
}

func (r sinkRecorder) Lost(ctx context.Context, table string, n int) {
	r.tel.PostgrescopyFailoverLostRows.Add(ctx, int64(n), metric.WithAttributes(attribute.String("table", table)))
}
