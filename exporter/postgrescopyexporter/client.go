package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/flush"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// startAttempt bounds the first connection attempt made inside Start, so that
// an unreachable server delays the collector's start only briefly.
const startAttempt = 10 * time.Second

// client owns what the traces, metrics and logs exporters of one
// configuration share: the pool, the schema readiness and the telemetry.
type client struct {
	cfg    *Config
	logger *zap.Logger
	tel    *metadata.TelemetryBuilder
	target string // user@host:port/db, never the password
	layout *tables.Layout

	pool   *pgxpool.Pool
	writer *pgwrite.Writer
	ready  atomic.Bool
	// waitErr is the last reason the client is not ready, for push errors.
	waitErr atomic.Pointer[error]

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// writes is the context of the flush workers' writes: cancelled only
	// when Shutdown's context ends, so that a write in flight at shutdown
	// finishes within the Collector's deadline and no later.
	writes     context.Context
	stopWrites context.CancelFunc

	redis *redisSide // nil without a redis section

	// others holds the layouts and writers of stream entries written by
	// replicas with other columns (another promote configuration, another
	// release), by layout descriptor.
	othersMu sync.Mutex
	others   map[string]*otherLayout

	maintainWarned atomic.Bool
	writing        atomic.Int32 // batch writes in flight

	stop   stopClock // a direct-mode stop's drain (stop.go)
	outage outage    // direct writes failing, for the logs (stop.go)
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

func (c *client) poolConfig(ctx context.Context) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(string(c.cfg.Endpoint))
	if err != nil {
		// pgx's error may quote part of a password; checkEndpoint says why
		// without quoting anything.
		if err := checkEndpoint(string(c.cfg.Endpoint)); err != nil {
			return nil, err
		}
		return nil, errors.New(`"endpoint" is not a valid PostgreSQL URL or DSN`)
	}
	cc := pc.ConnConfig
	if c.cfg.Password != "" {
		cc.Password = string(c.cfg.Password)
	}
	if c.cfg.TLS.HasValue() {
		tlsCfg, err := c.cfg.TLS.Get().LoadTLSConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf(`"tls": %w`, err)
		}
		if tlsCfg != nil && tlsCfg.ServerName == "" {
			tlsCfg.ServerName = cc.Host
		}
		// The tls section decides alone: no plaintext or sslmode fallbacks.
		cc.TLSConfig = tlsCfg
		cc.Fallbacks = nil
	}
	if c.cfg.QueryExecMode != "" {
		cc.DefaultQueryExecMode = queryExecModes[c.cfg.QueryExecMode]
	}
	if _, ok := cc.RuntimeParams["application_name"]; !ok {
		cc.RuntimeParams["application_name"] = "postgrescopy"
	}
	if c.cfg.Distribution == distributionCitus {
		if _, ok := cc.RuntimeParams[schema.CitusModifyMode]; !ok {
			// One connection per worker for each COPY, not one per shard:
			// a batch's COPY then reuses the session's cached connections
			// instead of opening a dozen (a 500-row COPY took 1 s, 70 ms in
			// sequential mode; see docs/citus.md).
			cc.RuntimeParams[schema.CitusModifyMode] = "sequential"
		}
	}
	pc.MaxConns = c.cfg.MaxConns
	if pc.MaxConns == 0 {
		pc.MaxConns = defaultMaxConns(c.cfg.QueueConfig)
	}
	c.target = fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
	return pc, nil
}

// start connects and prepares the schema. A server that cannot be reached is
// waited for in the background; wrong credentials, a missing database or a
// schema newer than this binary fail the start with the fix in the message.
func (c *client) start(ctx context.Context) error {
	c.stop.reset()
	pc, err := c.poolConfig(ctx)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return fmt.Errorf("create pool for %s: %w", c.target, err)
	}
	c.pool = pool
	c.writer = pgwrite.NewLayoutWriter(pool, c.cfg.Schema, c.layout)
	if err := c.writer.SetWorkMem(c.cfg.WorkMem); err != nil {
		pool.Close()
		return err // Validate refuses it first
	}

	attemptCtx, cancel := context.WithTimeout(ctx, startAttempt)
	err = c.prepare(attemptCtx)
	cancel()
	if err != nil && pgwrite.Classify(err) == pgwrite.Config {
		pool.Close()
		return fmt.Errorf("%w; not retried: start the collector again once it is fixed", c.explain(err))
	}
	bg, stop := context.WithCancel(context.Background())
	c.cancel = stop
	c.writes, c.stopWrites = context.WithCancel(context.Background())
	if err != nil {
		c.setWaiting(err)
		var step *schema.StepError
		if errors.As(err, &step) {
			// Reached, and refused for now (a lock timeout, a deadlock).
			c.logger.Warn("PostgreSQL refused a schema step for now; retrying it in the background, batches are held meanwhile",
				zap.String("target", c.target), zap.Error(err))
		} else {
			c.logger.Warn("PostgreSQL is not reachable yet; waiting for it in the background, batches are held meanwhile",
				zap.String("target", c.target), zap.Error(err))
		}
		c.wg.Add(1)
		go c.waitReady(bg)
	}
	c.wg.Add(1)
	go c.maintain(bg)
	c.watchPrices(bg)
	if c.cfg.Redis.HasValue() {
		if err := c.startRedis(ctx); err != nil {
			stop()
			c.stopWrites()
			c.wg.Wait()
			pool.Close()
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

func (c *client) explain(err error) error {
	if hint := pgwrite.Hint(err); hint != "" {
		return fmt.Errorf("postgrescopy: %s: %w (%s)", c.target, err, hint)
	}
	return fmt.Errorf("postgrescopy: %s: %w", c.target, err)
}

func (c *client) setWaiting(err error) { c.waitErr.Store(&err) }

// waitReady retries prepare with backoff until it succeeds or shutdown, and
// logs only when the reason changes.
func (c *client) waitReady(ctx context.Context) {
	defer c.wg.Done()
	retry := flush.Backoff(time.Second, 30*time.Second)
	var last string
	for flush.Sleep(ctx, retry.NextBackOff()) {
		attemptCtx, cancel := context.WithTimeout(ctx, startAttempt)
		err := c.prepare(attemptCtx)
		cancel()
		if err == nil {
			c.logger.Info("PostgreSQL is reachable; writing", zap.String("target", c.target))
			return
		}
		if ctx.Err() != nil {
			return
		}
		c.setWaiting(err)
		if msg := err.Error(); msg != last {
			last = msg
			if pgwrite.Classify(err) == pgwrite.Config {
				c.logger.Error("PostgreSQL refuses this exporter; fix the configuration, retrying meanwhile",
					zap.String("target", c.target), zap.Error(c.explain(err)))
			} else {
				c.logger.Warn("still waiting for PostgreSQL", zap.String("target", c.target), zap.Error(err))
			}
		}
	}
}

// prepare migrates (create_schema) or checks the schema, then marks the
// client ready.
func (c *client) prepare(ctx context.Context) error {
	if err := c.prepareSchema(ctx); err != nil {
		return err
	}
	if err := c.prepareAISpend(ctx); err != nil {
		return err
	}
	c.ready.Store(true)
	// Partitions ahead of now exist before the first batch; a failure here is
	// not fatal (the default partitions take every row) and is logged.
	c.maintainPartitions(ctx)
	return nil
}

// prepareSchema migrates or checks the schema on one connection, released
// before prepare's next steps take theirs from the pool: holding it while
// they wait would deadlock a pool of max_conns: 1.
func (c *client) prepareSchema(ctx context.Context) error {
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if c.cfg.CreateSchema {
		return c.migrate(ctx, conn.Conn())
	}
	return c.checkSchema(ctx, conn.Conn())
}

// migrate brings the schema to this binary's version and sets the index set.
func (c *client) migrate(ctx context.Context, conn *pgx.Conn) error {
	res, err := schema.Migrate(ctx, conn, c.cfg.Schema)
	if err != nil {
		return err
	}
	if res.From != res.To {
		c.logger.Info("schema migrated", zap.String("schema", c.cfg.Schema),
			zap.Int("from_version", res.From), zap.Int("to_version", res.To), zap.Bool("lz4", res.LZ4))
	}
	if err := schema.SetIndexes(ctx, conn, c.cfg.Schema, c.cfg.Indexes); err != nil {
		return err
	}
	if err := schema.AddColumns(ctx, conn, c.cfg.Schema, schema.PromotedColumns(c.layout)); err != nil {
		return err
	}
	if c.cfg.Distribution == distributionCitus {
		return schema.Distribute(ctx, conn, c.cfg.Schema)
	}
	return nil
}

// checkSchema is create_schema: false: every table and column must exist and
// be writable, at exactly this binary's schema version.
func (c *client) checkSchema(ctx context.Context, conn *pgx.Conn) error {
	missing, err := schema.Missing(ctx, conn, c.cfg.Schema, tableColumns(c.layout))
	if err != nil {
		return err
	}
	promoted := schema.PromotedColumns(c.layout)
	if len(missing) > 0 {
		hint := "apply the DDL of internal/schema/sql (docs/schema.md) or set create_schema: true"
		if len(promoted) > 0 {
			// The shipped DDL does not know this configuration's columns.
			hint += "; the promoted columns are added by: " + schema.AddColumnsSQL(c.cfg.Schema, promoted)
		}
		return fmt.Errorf("%w in schema %q: %v (create_schema is false: %s)", schema.ErrMissing, c.cfg.Schema, missing, hint)
	}
	wrong, err := schema.WrongTypes(ctx, conn, c.cfg.Schema, promoted)
	if err != nil {
		return err
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%w: %s", schema.ErrColumnType, strings.Join(wrong, ", "))
	}
	v, err := schema.Version(ctx, conn, c.cfg.Schema)
	switch {
	case err != nil:
		return err
	case v > schema.Latest():
		return fmt.Errorf("%w: %q is at version %d, this binary knows up to %d; upgrade the collector", schema.ErrNewerSchema, c.cfg.Schema, v, schema.Latest())
	case v < schema.Latest():
		return fmt.Errorf("%w: %q is at version %d, this binary needs %d: run it once with create_schema: true (as the schema owner)", schema.ErrMissing, c.cfg.Schema, v, schema.Latest())
	}
	return nil
}

func tableColumns(l *tables.Layout) map[string][]string {
	out := make(map[string][]string, len(tables.Tables)+2)
	for i := range tables.Tables {
		t := l.Table(i)
		out[t.Store] = t.Columns
	}
	out[pgwrite.RejectsTable] = pgwrite.RejectsColumns
	out[pgwrite.QuarantineTable] = pgwrite.QuarantineColumns
	return out
}

// ledgerPruneEvery is how often old ledger rows are deleted. Every replica
// prunes; the DELETE is idempotent and cheap on the committed_at index.
const ledgerPruneEvery = 10 * time.Minute

// maintain keeps partitions ahead of now and prunes the ledger, each on its
// own period, until shutdown.
func (c *client) maintain(ctx context.Context) {
	defer c.wg.Done()
	every := min(c.cfg.Partitioning.MaintenanceInterval, ledgerPruneEvery)
	tick := time.NewTicker(every)
	defer tick.Stop()
	lastPartitions, lastPrune := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if !c.ready.Load() {
			continue
		}
		if time.Since(lastPartitions) >= c.cfg.Partitioning.MaintenanceInterval {
			lastPartitions = time.Now()
			c.maintainPartitions(ctx)
		}
		if time.Since(lastPrune) >= ledgerPruneEvery {
			lastPrune = time.Now()
			if n, err := c.writer.PruneLedger(ctx, c.cfg.LedgerRetention); err != nil {
				if ctx.Err() == nil {
					c.logger.Warn("ledger prune failed", zap.Error(err))
				}
			} else if n > 0 {
				c.logger.Debug("ledger pruned", zap.Int64("rows", n))
			}
		}
	}
}

// maintainPartitions makes and drops partitions, logging what changed. A role
// without EXECUTE on the function (create_schema: false without the grant)
// is told once; its rows then land in the default partitions.
func (c *client) maintainPartitions(ctx context.Context) {
	actions, err := schema.Maintain(ctx, c.pool, c.cfg.Schema, c.cfg.Partitioning.layout())
	if err != nil {
		if ctx.Err() == nil && !c.maintainWarned.Swap(true) {
			c.logger.Warn("partition maintenance failed; rows outside existing partitions go to the default partitions",
				zap.Error(c.explain(err)))
		}
		return
	}
	c.maintainWarned.Store(false)
	for _, a := range actions {
		switch a.Action {
		case "skipped":
			c.logger.Debug("partition not created", zap.String("partition", a.Partition), zap.String("reason", a.Detail))
		default:
			c.logger.Info("partition "+a.Action, zap.String("partition", a.Partition), zap.String("detail", a.Detail))
		}
	}
}

// errNotReady says why a batch cannot be written yet.
func (c *client) errNotReady() error {
	reason := errors.New("not started")
	if p := c.waitErr.Load(); p != nil {
		reason = *p
	}
	return fmt.Errorf("waiting for PostgreSQL at %s: %w", c.target, reason)
}

// writeBatch writes b (and l into the ledger, when set) in one transaction,
// with the writer of b's layout, and records the outcome.
func (c *client) writeBatch(ctx context.Context, b *rows.Batch, l *pgwrite.Ledger) error {
	err := c.write(ctx, b, func(w *pgwrite.Writer) ([]pgwrite.TableResult, error) {
		if l != nil {
			return w.WriteLedgered(ctx, b, l)
		}
		return w.Write(ctx, b)
	})
	if err == nil {
		c.reportRejects(ctx, b)
	}
	return err
}

// writeEntries writes stream entries straight into COPY (pgwrite.WriteEntries)
// and records the outcome.
func (c *client) writeEntries(ctx context.Context, s *entry.Entries, l *pgwrite.Ledger) error {
	return c.write(ctx, s, func(w *pgwrite.Writer) ([]pgwrite.TableResult, error) {
		return w.WriteEntries(ctx, s, l)
	})
}

// rowSet is what a write holds, a Batch or Entries, as telemetry sees it.
type rowSet interface {
	Layout() *tables.Layout
	Rows(i int) int
	TotalRows() int
}

// write runs do with the writer of set's layout and records its outcome:
// duration, batches, rows and bytes per table, and a debug line per commit.
func (c *client) write(ctx context.Context, set rowSet, do func(*pgwrite.Writer) ([]pgwrite.TableResult, error)) error {
	if !c.ready.Load() {
		return c.errNotReady()
	}
	begin := time.Now()
	c.writing.Add(1)
	defer c.writing.Add(-1)
	w := c.writer
	if set.Layout() != c.layout {
		var err error
		if w, err = c.writerFor(set.Layout()); err != nil {
			return err
		}
	}
	res, err := do(w)
	outcome := pgwrite.Outcome(err)
	c.tel.PostgrescopyCopyDuration.Record(ctx, time.Since(begin).Seconds(),
		metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", outcome))))
	c.tel.PostgrescopyBatches.Add(ctx, 1, metric.WithAttributeSet(attribute.NewSet(attribute.String("outcome", outcome))))
	if err != nil {
		if outcome != "duplicate" {
			for i, t := range tables.Tables {
				if n := set.Rows(i); n > 0 {
					c.tel.PostgrescopyRows.Add(ctx, int64(n), metric.WithAttributes(
						attribute.String("table", t.Name), attribute.String("outcome", "failed")))
				}
			}
		}
		return err
	}
	for _, r := range res {
		c.tel.PostgrescopyRows.Add(ctx, int64(r.Rows), metric.WithAttributes(
			attribute.String("table", r.Table), attribute.String("outcome", "written")))
		c.tel.PostgrescopyBytes.Add(ctx, int64(r.Bytes), metric.WithAttributes(attribute.String("table", r.Table)))
	}
	if ce := c.logger.Check(zap.DebugLevel, "batch written"); ce != nil {
		// The client is shared by every signal: the line names its tables.
		names := make([]string, 0, len(res))
		var parts []string // where routing copied a table's rows straight into a partition
		for _, r := range res {
			if r.Rows+r.Rejected > 0 {
				names = append(names, r.Table)
			}
			if r.Partition != "" {
				parts = append(parts, r.Partition)
			}
		}
		// rows counts the context dictionary's rows the batch carries too;
		// signal_rows only the spans, data points and log records.
		fields := []zap.Field{zap.Int("rows", set.TotalRows()), zap.Int("signal_rows", set.TotalRows()-set.Rows(tables.IdxContexts)),
			zap.Strings("tables", names), zap.Duration("duration", time.Since(begin))}
		if len(parts) > 0 {
			fields = append(fields, zap.Strings("partitions", parts))
		}
		ce.Write(fields...)
	}
	return nil
}

// otherLayout is the layout of entries whose columns are not this replica's,
// with a writer for it.
type otherLayout struct {
	layout *tables.Layout
	writer *pgwrite.Writer
}

// otherLayout returns the layout an entry descriptor describes, parsed once.
func (c *client) otherLayout(desc []byte) (*tables.Layout, error) {
	c.othersMu.Lock()
	defer c.othersMu.Unlock()
	if o, ok := c.others[string(desc)]; ok {
		return o.layout, nil
	}
	l, err := tables.ParseLayout(desc)
	if err != nil {
		return nil, err
	}
	if c.others == nil {
		c.others = map[string]*otherLayout{}
	}
	ow := pgwrite.NewLayoutWriter(c.pool, c.cfg.Schema, l)
	ow.ShareContexts(c.writer)
	if err := ow.SetWorkMem(c.cfg.WorkMem); err != nil {
		return nil, err
	}
	c.others[string(desc)] = &otherLayout{layout: l, writer: ow}
	c.logger.Info("writing stream entries of another column layout (a replica with another promote configuration or release)",
		zap.Int("layouts", len(c.others)+1))
	return l, nil
}

// writerFor returns the writer of a layout otherLayout returned.
func (c *client) writerFor(l *tables.Layout) (*pgwrite.Writer, error) {
	c.othersMu.Lock()
	defer c.othersMu.Unlock()
	if o, ok := c.others[string(l.Descriptor())]; ok && o.layout == l {
		return o.writer, nil
	}
	return nil, errors.New("postgrescopy: batch of an unknown layout")
}

// shutdown stops the background loops and the flush workers, lets writes in
// flight finish until ctx ends, and closes the clients. When ctx ends first
// it cancels the writes and returns at once: a goroutine slow to notice (or
// one that ignores cancellation) closes the clients after it returns, never
// holding Shutdown past its deadline.
func (c *client) shutdown(ctx context.Context) error {
	if c.cancel != nil {
		c.cancel()
	}
	if c.redis != nil {
		c.redis.rt.Stop()
	}
	done := make(chan struct{})
	go func() {
		c.wg.Wait()
		if c.redis != nil {
			<-c.redis.rt.Done()
		}
		close(done)
	}()
	select {
	case <-done:
		c.cancelWrites()
		c.closeClients()
		return nil
	case <-ctx.Done():
	}
	// A cancelled write returns at once (pgx closes its connection).
	c.cancelWrites()
	go func() {
		<-done
		c.closeClients()
	}()
	return fmt.Errorf("postgrescopy: shutdown: writes in flight cancelled: %w", ctx.Err())
}

func (c *client) cancelWrites() {
	if c.stopWrites != nil {
		c.stopWrites()
	}
}

// closeClients closes the Redis client and the pool, once every goroutine
// using them returned.
func (c *client) closeClients() {
	if c.redis != nil {
		c.redis.unregisterGauges()
		_ = c.redis.rt.Close()
	}
	if c.pool != nil {
		c.pool.Close()
	}
}

// flushWriter is the client as the flush workers see it.
type flushWriter struct{ c *client }

func (c *client) flushWriter() flushWriter { return flushWriter{c} }

// ledger is the ledger the failover audit reads.
func (c *client) ledger() coord.Ledger { return c.writer }

func (w flushWriter) Ready() bool            { return w.c.ready.Load() }
func (w flushWriter) InFlight() int          { return int(w.c.writing.Load()) }
func (w flushWriter) Layout() *tables.Layout { return w.c.layout }
func (w flushWriter) OtherLayout(desc []byte) (*tables.Layout, error) {
	return w.c.otherLayout(desc)
}

func (w flushWriter) Committed(ctx context.Context, stream string, keys []string) (map[string]bool, error) {
	return w.c.writer.Committed(ctx, stream, keys)
}

func (w flushWriter) WriteEntries(ctx context.Context, s *entry.Entries, l *pgwrite.Ledger) error {
	return w.c.writeEntries(ctx, s, l)
}

func (w flushWriter) WriteBatch(ctx context.Context, b *rows.Batch, l *pgwrite.Ledger) error {
	return w.c.writeBatch(ctx, b, l)
}
