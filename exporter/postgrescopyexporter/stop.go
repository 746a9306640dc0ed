package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
)

// stopDrain is how long direct writes in flight at a stop may go on before
// they are cancelled: short enough that a stop fits Kubernetes' 30 s grace
// period with room for the queue and the pool, long enough for a healthy
// server to commit the last batches. A PostgreSQL that is failing gets no
// drain at all: its writes cannot succeed before the grace period ends.
const stopDrain = 10 * time.Second

// stopClock bounds a direct-mode stop. The exporterhelper shuts the
// exporter down after its queue has drained, so the signals' exporters start
// the clock before that (stopFirst); the clock is shared by the three
// signals, so that their shutdowns, one after the other, do not add up.
type stopClock struct {
	mu       sync.Mutex
	timer    *time.Timer
	stopping atomic.Bool
}

// begin starts the clock once: cancel is called after wait.
func (s *stopClock) begin(wait time.Duration, cancel context.CancelFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping.Load() {
		return
	}
	s.stopping.Store(true)
	s.timer = time.AfterFunc(wait, cancel)
}

// reset readies the clock for another start.
func (s *stopClock) reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.stopping.Store(false)
}

// beginStop starts the drain of a direct-mode stop (Redis mode leaves its
// entries pending in Redis instead: its flush workers stop in shutdown).
func (c *client) beginStop() {
	if c.cfg.Redis.HasValue() || c.stopWrites == nil || c.sink == nil {
		return
	}
	wait := stopDrain
	if !c.sink.Ready() || c.outage.failing() {
		wait = 0
	}
	c.stop.begin(wait, c.stopWrites)
}

// writeContext is the context of one direct write: cancelled when the
// caller's is, or when a stop's drain ends. A cancelled write is
// retryable, so that the queue keeps it (persistent queue) or its caller is
// told it failed (wait_for_result): never dropped as done.
func (c *client) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if c.writes == nil {
		return ctx, cancel
	}
	release := context.AfterFunc(c.writes, cancel)
	return ctx, func() { release(); cancel() }
}

// stoppedError says that a write ended because the collector is stopping.
func (c *client) stoppedError(err error) error {
	if c.writes == nil || c.writes.Err() == nil {
		return err
	}
	return fmt.Errorf("postgrescopy: the collector is stopping: write cancelled, nothing of it committed: %w", err)
}

// outage follows direct writes that fail for a reason that may pass (a
// PostgreSQL down, full, or restarting): one Warn when the first fails, one
// Info when a write succeeds again. The retry sender's own lines are Info,
// one per attempt, and name no outage.
type outage struct {
	mu       sync.Mutex
	since    time.Time
	attempts int
	down     atomic.Bool
}

func (o *outage) failing() bool { return o.down.Load() }

// failed records a retryable failure; it returns true for the first of an
// outage.
func (o *outage) failed() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts++
	if o.down.Load() {
		return false
	}
	o.down.Store(true)
	o.since = time.Now()
	o.attempts = 1
	return true
}

// succeeded records a commit; it returns the outage it ends, if any.
func (o *outage) succeeded() (ended bool, lasted time.Duration, attempts int) {
	if !o.down.Load() {
		return false, 0, 0
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down.Load() {
		return false, 0, 0
	}
	o.down.Store(false)
	return true, time.Since(o.since), o.attempts
}

// noteWrite logs the start and the end of an outage of direct writes.
func (c *client) noteWrite(err error) {
	if err == nil {
		if ended, lasted, attempts := c.outage.succeeded(); ended {
			c.logger.Info("PostgreSQL writes succeed again", zap.String("target", c.sink.Reached()),
				zap.Duration("outage", lasted.Round(time.Millisecond)), zap.Int("failed_attempts", attempts))
		}
		return
	}
	if pgwrite.Classify(err) != pgwrite.Retryable || c.stop.stopping.Load() {
		return
	}
	if c.outage.failed() {
		c.logger.Warn("PostgreSQL writes are failing; retrying until they succeed, batches are held meanwhile",
			zap.String("target", c.sink.Reached()), zap.Error(err))
	}
}

// exportDroppedMessage is how the exporterhelper's queue logs an export that
// failed for good. With wait_for_result nothing is dropped: the callers get
// the error, nothing of it was acknowledged. With a persistent queue, a stop
// drops nothing either: the queue keeps the request for the next start.
const exportDroppedMessage = "Exporting failed. Dropping data."

// stopLogCore rewrites that line for what it is where nothing was lost.
type stopLogCore struct {
	zapcore.Core
	c *client
}

func (s stopLogCore) With(fields []zapcore.Field) zapcore.Core {
	return stopLogCore{Core: s.Core.With(fields), c: s.c}
}

func (s stopLogCore) Check(ent zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	msg, level := s.rewrite(ent)
	if msg == "" {
		return s.Core.Check(ent, ce)
	}
	ent.Message, ent.Level = msg, level
	if !s.Core.Enabled(level) {
		return ce
	}
	return ce.AddCore(ent, s)
}

// Write writes what Check rewrote (the wrapped core writes the rest), the
// item count named for what it is.
func (s stopLogCore) Write(ent zapcore.Entry, fields []zapcore.Field) error {
	out := make([]zapcore.Field, 0, len(fields))
	for _, f := range fields {
		if f.Key == "dropped_items" {
			f.Key = "items"
		}
		out = append(out, f)
	}
	return s.Core.Write(ent, out)
}

// rewrite returns what the queue's drop line says instead, or "".
func (s stopLogCore) rewrite(ent zapcore.Entry) (string, zapcore.Level) {
	q := s.c.cfg.QueueConfig
	if !strings.HasPrefix(ent.Message, exportDroppedMessage) || !q.HasValue() {
		return "", 0
	}
	switch {
	case q.Get().WaitForResult:
		return "Export failed; not dropped: its senders were answered with the error (nothing of it was acknowledged) and may send it again", zapcore.InfoLevel
	case q.Get().StorageID != nil && s.c.stop.stopping.Load():
		return "Export interrupted by the stop; not dropped: the persistent queue keeps the request and the next start writes it", zapcore.WarnLevel
	}
	return "", 0
}

// helperSettings are the settings the exporterhelper logs with.
func helperSettings(set exporter.Settings, e *pgExporter) exporter.Settings {
	c := e.shared.Unwrap()
	set.Logger = set.Logger.WithOptions(zap.WrapCore(func(core zapcore.Core) zapcore.Core {
		return stopLogCore{Core: core, c: c}
	}))
	return set
}

// stopFirst makes a signal's Shutdown start the stop's drain before the
// exporterhelper drains its queue into writes that could otherwise wait for
// a PostgreSQL that does not answer, past any grace period.
type stopFirst struct {
	e        *pgExporter
	shutdown component.ShutdownFunc
}

func (s stopFirst) Shutdown(ctx context.Context) error {
	if s.e.isStarted() {
		s.e.shared.Unwrap().beginStop()
	}
	return s.shutdown(ctx)
}

type tracesExporter struct {
	exporter.Traces
	stop  stopFirst
	split splitter[ptrace.Traces]
}

func (x tracesExporter) ConsumeTraces(ctx context.Context, d ptrace.Traces) error {
	return x.split.consume(ctx, d, x.Capabilities().MutatesData, x.Traces.ConsumeTraces)
}

func (x tracesExporter) Shutdown(ctx context.Context) error { return x.stop.Shutdown(ctx) }

type metricsExporter struct {
	exporter.Metrics
	stop  stopFirst
	split splitter[pmetric.Metrics]
}

func (x metricsExporter) ConsumeMetrics(ctx context.Context, d pmetric.Metrics) error {
	return x.split.consume(ctx, d, x.Capabilities().MutatesData, x.Metrics.ConsumeMetrics)
}

func (x metricsExporter) Shutdown(ctx context.Context) error { return x.stop.Shutdown(ctx) }

type logsExporter struct {
	exporter.Logs
	stop  stopFirst
	split splitter[plog.Logs]
}

func (x logsExporter) ConsumeLogs(ctx context.Context, d plog.Logs) error {
	return x.split.consume(ctx, d, x.Capabilities().MutatesData, x.Logs.ConsumeLogs)
}

func (x logsExporter) Shutdown(ctx context.Context) error { return x.stop.Shutdown(ctx) }

// mergeCallers is the context of a batch merged from the requests of two
// contexts: done once both are (every caller waiting for the batch has given
// up), and never before. The exporterhelper's own merge gives a merged batch
// a context that is never done, whose retries then outlive every caller: a
// receiver's stop waits for its calls, each waiting for that batch (with
// wait_for_result), and the exporter's stop comes only after the receivers',
// past any grace period.
func mergeCallers(ctx1, ctx2 context.Context) context.Context {
	if ctx1.Done() == nil || ctx2.Done() == nil {
		// A caller that cannot give up (an in-process receiver, a request
		// read back from a persistent queue): the batch goes on until it
		// is written or the exporter stops.
		return context.WithoutCancel(ctx1)
	}
	merged, cancel := context.WithCancel(context.WithoutCancel(ctx1))
	var left atomic.Int32
	left.Store(2)
	gone := func() {
		if left.Add(-1) == 0 {
			cancel()
		}
	}
	context.AfterFunc(ctx1, gone)
	context.AfterFunc(ctx2, gone)
	return merged
}
