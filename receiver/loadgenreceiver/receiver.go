package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receiverhelper"
	"go.uber.org/zap"
)

// progressInterval spaces the Info progress lines.
const progressInterval = 10 * time.Second

// errStop ends a worker: shut down, or duration reached.
var errStop = errors.New("loadgen: stop")

// run is one loadgen receiver. The Collector creates a receiver per signal;
// all three share one run (keyed by config, like core's otlpreceiver), so
// one workload feeds traces, metrics and logs with one rate limit and one
// Stats. The first Start starts it and the first Shutdown stops it for every
// signal: the Collector shuts all receivers down together.
type run struct {
	cfg     *Config
	logger  *zap.Logger
	obs     *receiverhelper.ObsReport
	stats   *Stats
	release func() // forgets the run in its factory

	mu      sync.Mutex
	traces  consumer.Traces
	metrics consumer.Metrics
	logs    consumer.Logs
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	limiter *limiter

	errMu   sync.Mutex
	lastErr string
}

var (
	_ receiver.Traces  = (*run)(nil)
	_ receiver.Metrics = (*run)(nil)
	_ receiver.Logs    = (*run)(nil)
)

func newRun(set receiver.Settings, cfg *Config, stats *Stats, release func()) (*run, error) {
	obs, err := receiverhelper.NewObsReport(receiverhelper.ObsReportSettings{
		ReceiverID:             set.ID,
		Transport:              "loadgen",
		ReceiverCreateSettings: set,
	})
	if err != nil {
		return nil, err
	}
	if stats == nil {
		stats = NewStats()
	}
	return &run{cfg: cfg, logger: set.Logger, obs: obs, stats: stats, release: release}, nil
}

// Stats returns the run's counters; a bench can type-assert a created
// receiver to interface{ Stats() *Stats }.
func (g *run) Stats() *Stats { return g.stats }

// Start starts generating on the first call; later calls do nothing.
// Consumers must all be attached before (the Collector creates every
// receiver before starting any).
func (g *run) Start(context.Context, component.Host) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.started || g.stopped {
		return nil
	}
	g.started = true
	// The Start context ends when Start returns; generation needs its own.
	ctx, cancel := context.WithCancel(context.Background())
	g.cancel = cancel
	if g.cfg.Rate > 0 {
		g.limiter = &limiter{perItem: time.Duration(float64(time.Second) / g.cfg.Rate)}
	}
	on := g.signalsOn()
	g.wg.Add(1)
	go g.generate(ctx, on)
	return nil
}

// Shutdown stops generation and waits for it, within ctx. It is safe without
// Start and safe to call again.
func (g *run) Shutdown(ctx context.Context) error {
	g.mu.Lock()
	g.stopped = true
	cancel := g.cancel
	g.mu.Unlock()
	g.release()
	if cancel == nil {
		g.stats.finish() // never started: nothing will be generated
		return nil
	}
	cancel()
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signalsOn decides which signals to generate: those with a pipeline, and
// listed in signals when it is set. Called with mu held.
func (g *run) signalsOn() [3]bool {
	has := [3]bool{g.traces != nil, g.metrics != nil, g.logs != nil}
	var on [3]bool
	for i, name := range []string{signalTraces, signalMetrics, signalLogs} {
		on[i] = has[i] && g.cfg.wants(name)
		if !has[i] && len(g.cfg.Signals) > 0 && g.cfg.wants(name) {
			g.logger.Warn("signals lists a signal whose pipeline does not use this receiver; it is skipped", zap.String("signal", name))
		}
	}
	return on
}

func (g *run) generate(ctx context.Context, on [3]bool) {
	defer g.wg.Done()
	start := time.Now()
	g.stats.begin()
	var deadline time.Time
	if g.cfg.Duration > 0 {
		deadline = start.Add(g.cfg.Duration)
	}
	spans, points, logs := g.cfg.perUser()
	users := int64(g.cfg.Users)
	g.logger.Info("Load generation started",
		zap.Int("users", g.cfg.Users),
		zap.Int("events_per_user", g.cfg.EventsPerUser),
		zap.Bool("traces", on[0]), zap.Bool("metrics", on[1]), zap.Bool("logs", on[2]),
		zap.Int64("planned_spans", users*int64(spans)),
		zap.Int64("planned_data_points", users*int64(points)),
		zap.Int64("planned_log_records", users*int64(logs)),
		zap.Uint64("seed", g.cfg.Seed),
		zap.Float64("rate", g.cfg.Rate),
		zap.Duration("duration", g.cfg.Duration),
	)

	var workers sync.WaitGroup
	for w := range min(g.cfg.Concurrency, g.cfg.Users) {
		gen, err := NewWorkerGenerator(*g.cfg, start, w)
		if err != nil { // the Collector validated the config; a direct caller may not have
			g.logger.Error("Load generation cannot start", zap.Error(err))
			break
		}
		workers.Go(func() { g.work(ctx, gen, on, deadline) })
	}
	finished := make(chan struct{})
	go func() {
		workers.Wait()
		close(finished)
	}()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-finished:
			waiting = false
		case <-tick.C:
			s := g.stats.Snapshot()
			g.logger.Info("Load generation progress", append(snapshotFields(s),
				zap.Float64("percent", 100*float64(s.Items())/float64(users*int64(g.cfg.EventsPerUser))))...)
		}
	}
	g.stats.finish()
	g.logger.Info("Load generation finished", snapshotFields(g.stats.Snapshot())...)
}

func snapshotFields(s Snapshot) []zap.Field {
	secs := math.Max(s.Elapsed.Seconds(), 1e-9)
	return []zap.Field{
		zap.Int64("traces", s.Traces),
		zap.Int64("spans", s.Spans),
		zap.Int64("data_points", s.DataPoints),
		zap.Int64("log_records", s.LogRecords),
		zap.Int64("refused", s.Refused),
		zap.Int64("bytes", s.Bytes),
		zap.Duration("elapsed", s.Elapsed),
		zap.Float64("items_per_second", math.Round(float64(s.Items())/secs)),
		zap.Float64("mib_per_second", math.Round(float64(s.Bytes)/secs/(1<<20)*10)/10),
	}
}

// work sends one worker's users. It always sends the signal furthest behind
// in proportion, so traces, metrics and logs flow together.
func (g *run) work(ctx context.Context, gen *Generator, on [3]bool, deadline time.Time) {
	var sent [3]int64
	total := [3]int64{gen.traces.total, gen.metrics.total, gen.logs.total}
	for {
		next, best := -1, math.Inf(1)
		for i := range sent {
			if on[i] && sent[i] < total[i] {
				if f := float64(sent[i]) / float64(total[i]); f < best {
					next, best = i, f
				}
			}
		}
		if next < 0 || ctx.Err() != nil || (!deadline.IsZero() && !time.Now().Before(deadline)) {
			return
		}
		var n int
		var err error
		switch next {
		case 0:
			n, err = g.sendTraces(ctx, gen.traces, deadline)
		case 1:
			n, err = g.sendMetrics(ctx, gen.metrics, deadline)
		case 2:
			n, err = g.sendLogs(ctx, gen.logs, deadline)
		}
		if err != nil {
			return
		}
		if n == 0 {
			total[next] = sent[next] // cannot happen: totals match the cursors
		}
		sent[next] += int64(n)
	}
}

var (
	tracesSizer  ptrace.ProtoMarshaler
	metricsSizer pmetric.ProtoMarshaler
	logsSizer    plog.ProtoMarshaler
)

func (g *run) sendTraces(ctx context.Context, c *tracesCursor, deadline time.Time) (int, error) {
	before := c.traces
	td, n := c.next()
	if n == 0 {
		return 0, nil
	}
	if err := g.limiter.wait(ctx, n, deadline); err != nil {
		return 0, err
	}
	size := tracesSizer.TracesSize(td) // before Consume, which may take the data over
	octx := g.obs.StartTracesOp(ctx)
	err := g.traces.ConsumeTraces(octx, td)
	g.obs.EndTracesOp(octx, "loadgen", n, err)
	g.stats.Traces.Add(c.traces - before)
	g.stats.Spans.Add(int64(n))
	g.account(ctx, n, size, err)
	return n, nil
}

func (g *run) sendMetrics(ctx context.Context, c *metricsCursor, deadline time.Time) (int, error) {
	md, n := c.next()
	if n == 0 {
		return 0, nil
	}
	if err := g.limiter.wait(ctx, n, deadline); err != nil {
		return 0, err
	}
	size := metricsSizer.MetricsSize(md)
	octx := g.obs.StartMetricsOp(ctx)
	err := g.metrics.ConsumeMetrics(octx, md)
	g.obs.EndMetricsOp(octx, "loadgen", n, err)
	g.stats.DataPoints.Add(int64(n))
	g.account(ctx, n, size, err)
	return n, nil
}

func (g *run) sendLogs(ctx context.Context, c *logsCursor, deadline time.Time) (int, error) {
	ld, n := c.next()
	if n == 0 {
		return 0, nil
	}
	if err := g.limiter.wait(ctx, n, deadline); err != nil {
		return 0, err
	}
	size := logsSizer.LogsSize(ld)
	octx := g.obs.StartLogsOp(ctx)
	err := g.logs.ConsumeLogs(octx, ld)
	g.obs.EndLogsOp(octx, "loadgen", n, err)
	g.stats.LogRecords.Add(int64(n))
	g.account(ctx, n, size, err)
	return n, nil
}

// refusedBackoff is the pause after a refused batch, so a memory limiter
// that refuses data is not hammered.
const refusedBackoff = 100 * time.Millisecond

// account counts a sent batch. A refused batch is dropped, not resent: the
// pipeline may already have changed it. The error is logged when it
// changes, not for every batch.
func (g *run) account(ctx context.Context, n, size int, err error) {
	g.stats.Batches.Add(1)
	g.stats.Bytes.Add(int64(size))
	if err == nil {
		return
	}
	g.stats.Refused.Add(int64(n))
	g.errMu.Lock()
	changed := err.Error() != g.lastErr
	g.lastErr = err.Error()
	g.errMu.Unlock()
	if changed {
		g.logger.Warn("Pipeline refused a generated batch; it is dropped (counted in Stats.Refused)", zap.Error(err))
	}
	if !consumererror.IsPermanent(err) {
		sleep(ctx, refusedBackoff)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// limiter spaces batches so items per second stay at rate over all
// workers. Each batch reserves its items' time slot; the first goes at once.
type limiter struct {
	perItem time.Duration
	mu      sync.Mutex
	next    time.Time
}

// wait blocks until the batch's slot. It returns errStop when ctx ends or
// the slot falls after the deadline. A nil limiter never waits.
func (l *limiter) wait(ctx context.Context, n int, deadline time.Time) error {
	if l == nil {
		return ctx.Err()
	}
	l.mu.Lock()
	now := time.Now()
	if l.next.Before(now) {
		l.next = now
	}
	at := l.next
	l.next = at.Add(time.Duration(n) * l.perItem)
	l.mu.Unlock()
	if !deadline.IsZero() && !at.Before(deadline) {
		return errStop
	}
	if d := time.Until(at); d > 0 {
		sleep(ctx, d)
	}
	if ctx.Err() != nil {
		return errStop
	}
	return nil
}
