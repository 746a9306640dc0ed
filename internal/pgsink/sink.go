package pgsink

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v7"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/pricing"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// startAttempt bounds the first connection attempt made inside Start, so that
// an unreachable server delays the collector's start only briefly.
const startAttempt = 10 * time.Second

// Config is what the sink needs of the exporter's configuration.
type Config struct {
	// Pool is the parsed endpoint, with the password, the query exec mode,
	// application_name and max_conns applied.
	Pool *pgxpool.Config
	// TLS, when set, is the only way to connect: no plaintext or sslmode
	// fallbacks.
	TLS *tls.Config
	// Citus distributes the tables and copies in sequential modify mode.
	Citus bool

	Schema       string
	CreateSchema bool
	Indexes      bool
	WorkMem      string
	// SynchronousCommit, when set, is every write's synchronous_commit
	// (pgwrite.Writer.SetSynchronousCommit).
	SynchronousCommit string
	// Layout is this replica's column layout.
	Layout *tables.Layout

	LedgerRetention     time.Duration
	Partitioning        schema.Partitioning
	MaintenanceInterval time.Duration

	// CostDimensions and CostLateWindow configure the AI spend view
	// (create_schema only); PriceFile, reloaded every PriceReload, the price
	// catalog.
	CostDimensions []pricing.Dimension
	CostLateWindow time.Duration
	PriceFile      string
	PriceReload    time.Duration

	// Writers is how many writes may run at once (the flush workers, or
	// the sending queue's consumers, of every signal): as many connections,
	// up to the pool's size, are opened and warmed once the schema is ready
	// (pgwrite.Writer.Warm), so that the first flushes after a start cost
	// what later ones do.
	Writers int
}

// Recorder receives what the sink measures; the component implements it
// with its own telemetry.
type Recorder interface {
	// Wrote records one write's outcome (pgwrite.Outcome) and duration.
	Wrote(ctx context.Context, outcome string, d time.Duration)
	// Rows counts rows of table written or failed (outcome).
	Rows(ctx context.Context, table, outcome string, n int)
	// Bytes counts the COPY bytes written into table.
	Bytes(ctx context.Context, table string, n int)
	// Rejected counts the rows of table PostgreSQL refused, kept in the
	// rejects table.
	Rejected(ctx context.Context, table string, n int)
	// Lost counts the rows of table committed and acknowledged that the
	// server reached after a failover lacks (failover.go).
	Lost(ctx context.Context, table string, n int)
}

// Sink is the PostgreSQL runtime of one configuration: the pool, the schema
// readiness, the maintenance loops, the layout cache and the writes. It is
// what the flush workers write to (flush.Writer) and what the direct push
// writes through.
type Sink struct {
	cfg    Config
	logger *zap.Logger
	rec    Recorder
	target string // user@host:port/db, never the password
	layout *tables.Layout

	pool   *pgxpool.Pool
	writer *pgwrite.Writer
	ready  atomic.Bool
	// waitErr is the last reason the sink is not ready, for push errors.
	waitErr atomic.Pointer[error]

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// others holds the layouts and writers of stream entries written by
	// replicas with other columns (another promote configuration, another
	// release), by layout descriptor.
	othersMu sync.Mutex
	others   map[string]*otherLayout

	// The server the last new connection reached, the recent commits and
	// the checks of them on another server (failover.go).
	srvMu    sync.Mutex
	server   pgwrite.Server
	recent   commitRing
	checkNow chan struct{}

	maintainWarned atomic.Bool
	// skipped is the reason each partition maintenance could not make was
	// last told, so that it is told once, not at every run.
	skippedMu sync.Mutex
	skipped   map[string]string
	writing   atomic.Int32 // batch writes in flight
}

// New returns the sink of cfg, without I/O.
func New(cfg Config, logger *zap.Logger, rec Recorder) *Sink {
	pc := cfg.Pool
	cc := pc.ConnConfig
	if cfg.TLS != nil {
		if cfg.TLS.ServerName == "" {
			cfg.TLS.ServerName = cc.Host
		}
		// The tls section decides alone: no plaintext or sslmode fallbacks.
		cc.TLSConfig = cfg.TLS
		cc.Fallbacks = nil
	}
	if cfg.Citus {
		if _, ok := cc.RuntimeParams[schema.CitusModifyMode]; !ok {
			// One connection per worker for each COPY, not one per shard:
			// a batch's COPY then reuses the session's cached connections
			// instead of opening a dozen (a 500-row COPY took 1 s, 70 ms in
			// sequential mode; see docs/citus.md).
			cc.RuntimeParams[schema.CitusModifyMode] = "sequential"
		}
	}
	c := &Sink{cfg: cfg, logger: logger, rec: rec, layout: cfg.Layout, checkNow: make(chan struct{}, 1),
		target: fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)}
	after := pc.AfterConnect
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, conn); err != nil {
				return err
			}
		}
		return c.connected(ctx, conn)
	}
	return c
}

// Target names the server in logs: user@host:port/db, never the password.
func (c *Sink) Target() string { return c.target }

// Start connects and prepares the schema. A server that cannot be reached is
// waited for in the background; wrong credentials, a missing database or a
// schema newer than this binary fail the start with the fix in the message.
// A failed Start leaves nothing running.
func (c *Sink) Start(ctx context.Context) error {
	pool, err := pgxpool.NewWithConfig(context.Background(), c.cfg.Pool)
	if err != nil {
		return fmt.Errorf("create pool for %s: %w", c.target, err)
	}
	c.pool = pool
	c.writer = pgwrite.NewLayoutWriter(pool, c.cfg.Schema, c.layout)
	if err := c.setWriter(c.writer); err != nil {
		pool.Close()
		return err // Validate refuses it first
	}

	attemptCtx, cancel := context.WithTimeout(ctx, startAttempt)
	err = c.prepare(attemptCtx)
	cancel()
	if err != nil && pgwrite.Classify(err) == pgwrite.Config {
		pool.Close()
		return fmt.Errorf("%w; not retried: start the collector again once it is fixed", c.Explain(err))
	}
	bg, stop := context.WithCancel(context.Background())
	c.cancel = stop
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
	c.wg.Add(2)
	go c.maintain(bg)
	go c.checkLoop(bg)
	c.watchPrices(bg)
	return nil
}

// Stop cancels the background loops; Wait returns once they did.
func (c *Sink) Stop() {
	if c.cancel != nil {
		c.cancel()
	}
}

// Wait waits for the background loops Stop cancelled.
func (c *Sink) Wait() { c.wg.Wait() }

// Close closes the pool: once every write returned.
func (c *Sink) Close() {
	if c.pool != nil {
		c.pool.Close()
	}
}

// Explain adds the server and, for a known cause, the fix to err.
func (c *Sink) Explain(err error) error {
	if hint := pgwrite.Hint(err); hint != "" {
		return fmt.Errorf("postgrescopy: %s: %w (%s)", c.target, err, hint)
	}
	return fmt.Errorf("postgrescopy: %s: %w", c.target, err)
}

func (c *Sink) setWaiting(err error) { c.waitErr.Store(&err) }

// setWriter applies the configuration to a writer of the sink.
func (c *Sink) setWriter(w *pgwrite.Writer) error {
	if err := w.SetWorkMem(c.cfg.WorkMem); err != nil {
		return err
	}
	if err := w.SetSynchronousCommit(c.cfg.SynchronousCommit); err != nil {
		return err
	}
	w.OnCommit(c.commit)
	return nil
}

// waitReady retries prepare with backoff until it succeeds or shutdown, and
// logs only when the reason changes.
func (c *Sink) waitReady(ctx context.Context) {
	defer c.wg.Done()
	retry := &backoff.ExponentialBackOff{InitialInterval: time.Second, Multiplier: 2, MaxInterval: 30 * time.Second}
	var last string
	for sleep(ctx, retry.NextBackOff()) {
		attemptCtx, cancel := context.WithTimeout(ctx, startAttempt)
		err := c.prepare(attemptCtx)
		cancel()
		if err == nil {
			c.logger.Info("PostgreSQL is reachable; writing", zap.String("target", c.Reached()))
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
					zap.String("target", c.target), zap.Error(c.Explain(err)))
			} else {
				c.logger.Warn("still waiting for PostgreSQL", zap.String("target", c.target), zap.Error(err))
			}
		}
	}
}

// sleep waits d or until ctx is done, and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// prepare migrates (create_schema) or checks the schema, then marks the
// client ready.
func (c *Sink) prepare(ctx context.Context) error {
	if err := c.prepareSchema(ctx); err != nil {
		return err
	}
	if err := c.prepareAISpend(ctx); err != nil {
		return err
	}
	if !c.ready.Swap(true) {
		c.logReplication(ctx)
	}
	// Partitions ahead of now exist before the first batch; a failure here is
	// not fatal (the default partitions take every row) and is logged.
	c.maintainPartitions(ctx)
	c.warm(ctx)
	return nil
}

// warm opens and warms the connections the writes will use at once
// (Config.Writers, up to the pool's size), all together: each Acquire
// while the others are held opens a connection of its own. A connection
// that fails to warm is written through anyway; the reason is logged at
// debug level. Not on Citus: a COPY there opens connections to every
// worker, which the first write does as well.
func (c *Sink) warm(ctx context.Context) {
	n := min(c.cfg.Writers, int(c.pool.Config().MaxConns))
	if n <= 0 || c.cfg.Citus {
		return
	}
	var wg sync.WaitGroup
	held := make(chan *pgxpool.Conn, n)
	for range n {
		wg.Go(func() {
			conn, err := c.pool.Acquire(ctx)
			if err != nil {
				c.logger.Debug("a connection was not warmed", zap.Error(err))
				return
			}
			if err := c.writer.Warm(ctx, conn.Conn()); err != nil {
				c.logger.Debug("a connection was not warmed", zap.Error(err))
			}
			held <- conn
		})
	}
	wg.Wait()
	close(held)
	for conn := range held {
		conn.Release()
	}
}

// prepareSchema migrates or checks the schema on one connection, released
// before prepare's next steps take theirs from the pool: holding it while
// they wait would deadlock a pool of max_conns: 1.
func (c *Sink) prepareSchema(ctx context.Context) error {
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
func (c *Sink) migrate(ctx context.Context, conn *pgx.Conn) error {
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
	if c.cfg.Citus {
		return schema.Distribute(ctx, conn, c.cfg.Schema)
	}
	return nil
}

// checkSchema is create_schema: false: every table and column must exist and
// be writable, at exactly this binary's schema version.
func (c *Sink) checkSchema(ctx context.Context, conn *pgx.Conn) error {
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
func (c *Sink) maintain(ctx context.Context) {
	defer c.wg.Done()
	every := min(c.cfg.MaintenanceInterval, ledgerPruneEvery)
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
		if time.Since(lastPartitions) >= c.cfg.MaintenanceInterval {
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
// is told once; its rows then land in the default partitions. So is a
// partition that cannot be made, once per partition and reason.
func (c *Sink) maintainPartitions(ctx context.Context) {
	actions, err := schema.Maintain(ctx, c.pool, c.cfg.Schema, c.cfg.Partitioning)
	if err != nil {
		if ctx.Err() == nil && !c.maintainWarned.Swap(true) {
			c.logger.Warn("partition maintenance failed; rows outside existing partitions go to the default partitions",
				zap.Error(c.Explain(err)))
		}
		return
	}
	c.maintainWarned.Store(false)
	c.skippedMu.Lock()
	defer c.skippedMu.Unlock()
	for _, a := range actions {
		switch a.Action {
		case "skipped":
			if told, ok := c.skipped[a.Partition]; ok && told == a.Detail {
				continue
			}
			if c.skipped == nil || len(c.skipped) >= maxSkippedTold {
				c.skipped = map[string]string{}
			}
			c.skipped[a.Partition] = a.Detail
			c.logger.Warn("partition not created; rows of its range go to the default partition, maintenance tries again at every run",
				zap.String("partition", a.Partition), zap.String("reason", a.Detail))
		case "created":
			delete(c.skipped, a.Partition)
			fallthrough
		default:
			c.logger.Info("partition "+a.Action, zap.String("partition", a.Partition), zap.String("detail", a.Detail))
		}
	}
}

// maxSkippedTold bounds the partitions whose skip is remembered (a new one
// each interval while the layout of partitions conflicts); past it they
// are told again.
const maxSkippedTold = 1000

// errNotReady says why a batch cannot be written yet.
func (c *Sink) errNotReady() error {
	reason := errors.New("not started")
	if p := c.waitErr.Load(); p != nil {
		reason = *p
	}
	return fmt.Errorf("waiting for PostgreSQL at %s: %w", c.target, reason)
}

// writeBatch writes b (and l into the ledger, when set) in one transaction,
// with the writer of b's layout, and records the outcome.
func (c *Sink) writeBatch(ctx context.Context, b *rows.Batch, l *pgwrite.Ledger) error {
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
func (c *Sink) writeEntries(ctx context.Context, s *entry.Entries, l *pgwrite.Ledger) error {
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
func (c *Sink) write(ctx context.Context, set rowSet, do func(*pgwrite.Writer) ([]pgwrite.TableResult, error)) error {
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
	c.rec.Wrote(ctx, outcome, time.Since(begin))
	if err != nil {
		if outcome != "duplicate" {
			for i, t := range tables.Tables {
				if n := set.Rows(i); n > 0 {
					c.rec.Rows(ctx, t.Name, "failed", n)
				}
			}
		}
		return err
	}
	for _, r := range res {
		c.rec.Rows(ctx, r.Table, "written", r.Rows)
		c.rec.Bytes(ctx, r.Table, r.Bytes)
	}
	if ce := c.logger.Check(zap.DebugLevel, "batch written"); ce != nil {
		// The sink is shared by every signal: the line names its tables.
		names := make([]string, 0, len(res))
		var parts []string // where routing copied a table's rows straight into a partition
		for _, r := range res {
			// A table split by partition has a result per COPY.
			if r.Rows+r.Rejected > 0 && !slices.Contains(names, r.Table) {
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
func (c *Sink) otherLayout(desc []byte) (*tables.Layout, error) {
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
	if err := c.setWriter(ow); err != nil {
		return nil, err
	}
	c.others[string(desc)] = &otherLayout{layout: l, writer: ow}
	c.logger.Info("writing stream entries of another column layout (a replica with another promote configuration or release)",
		zap.Int("layouts", len(c.others)+1))
	return l, nil
}

// writerFor returns the writer of a layout otherLayout returned.
func (c *Sink) writerFor(l *tables.Layout) (*pgwrite.Writer, error) {
	c.othersMu.Lock()
	defer c.othersMu.Unlock()
	if o, ok := c.others[string(l.Descriptor())]; ok && o.layout == l {
		return o.writer, nil
	}
	return nil, errors.New("postgrescopy: batch of an unknown layout")
}

// Ready reports whether the schema is ready for writes.
func (c *Sink) Ready() bool { return c.ready.Load() }

// InFlight is the number of writes in flight.
func (c *Sink) InFlight() int { return int(c.writing.Load()) }

// Layout is this replica's column layout.
func (c *Sink) Layout() *tables.Layout { return c.layout }

// OtherLayout returns the layout an entry descriptor describes, parsed once,
// with a writer for it.
func (c *Sink) OtherLayout(desc []byte) (*tables.Layout, error) { return c.otherLayout(desc) }

// Committed returns which of keys the ledger of stream holds.
func (c *Sink) Committed(ctx context.Context, stream string, keys []string) (map[string]bool, error) {
	return c.writer.Committed(ctx, stream, keys)
}

// WriteEntries streams entries into COPY with l in one transaction, and
// records the outcome.
func (c *Sink) WriteEntries(ctx context.Context, s *entry.Entries, l *pgwrite.Ledger) error {
	return c.writeEntries(ctx, s, l)
}

// WriteBatch writes b (and l into the ledger, when set) in one transaction,
// isolating refused rows, and records the outcome.
func (c *Sink) WriteBatch(ctx context.Context, b *rows.Batch, l *pgwrite.Ledger) error {
	return c.writeBatch(ctx, b, l)
}

// Ping checks a connection of the pool (for tests: an error once Close ran).
func (c *Sink) Ping(ctx context.Context) error { return c.pool.Ping(ctx) }
