package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
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
// Stats. The first signal's Start starts it and the last one's Shutdown stops
// it (see factory.go: the signals share it through sharedcomponent).
type run struct {
	cfg    *Config
	logger *zap.Logger
	obs    *receiverhelper.ObsReport
	stats  *Stats

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

	// epoch is the start the timestamps are relative to; zero means the
	// moment generation starts. Tests fix it to compare runs.
	epoch time.Time
}

var (
	_ receiver.Traces  = (*run)(nil)
	_ receiver.Metrics = (*run)(nil)
	_ receiver.Logs    = (*run)(nil)
)

func newRun(set receiver.Settings, cfg *Config, stats *Stats) (*run, error) {
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
	return &run{cfg: cfg, logger: set.Logger, obs: obs, stats: stats}, nil
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
	start := g.epoch
	if start.IsZero() {
		start = time.Now()
	}
	gens := make([]*Generator, min(g.cfg.Concurrency, g.cfg.Users))
	for w := range gens {
		gen, err := NewWorkerGenerator(*g.cfg, start, w)
		if err != nil { // the Collector validated the config; a direct caller may not have
			g.logger.Error("Load generation cannot start", zap.Error(err))
			g.stats.finish()
			return
		}
		gens[w] = gen
	}
	if g.cfg.WarmupUsers > 0 {
		if !g.warmUp(ctx, start, on) {
			g.stats.finish()
			return
		}
	}
	var prepared [][]batch
	if g.cfg.Pregenerate {
		began := time.Now()
		prepared = prepare(ctx, gens, on)
		if ctx.Err() != nil {
			g.stats.finish()
			return
		}
		var items, batches int64
		for _, bs := range prepared {
			batches += int64(len(bs))
			for _, b := range bs {
				items += int64(b.n)
			}
		}
		g.logger.Info("Load generation prepared every batch in memory",
			zap.Int64("items", items), zap.Int64("batches", batches), zap.Duration("took", time.Since(began)))
	}

	g.stats.begin()
	var deadline time.Time
	if g.cfg.Duration > 0 {
		deadline = time.Now().Add(g.cfg.Duration)
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
		zap.Bool("pregenerate", g.cfg.Pregenerate),
	)

	var workers sync.WaitGroup
	for w, gen := range gens {
		next := newSchedule(gen, on).next
		if prepared != nil {
			next = replay(prepared[w])
		}
		workers.Go(func() { g.work(ctx, g.stats, next, deadline) })
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

// warmUp sends warmup_users users' events of seed + 1 through the pipeline,
// counted apart, then waits warmup_pause. It reports false when the run was
// stopped or the warm-up could not be generated.
func (g *run) warmUp(ctx context.Context, start time.Time, on [3]bool) bool {
	cfg := *g.cfg
	cfg.Users, cfg.Seed = g.cfg.WarmupUsers, g.cfg.Seed+1
	began := time.Now()
	var st Stats
	var workers sync.WaitGroup
	for w := range min(cfg.Concurrency, cfg.Users) {
		gen, err := NewWorkerGenerator(cfg, start, w)
		if err != nil {
			g.logger.Error("Load generation cannot warm up", zap.Error(err))
			return false
		}
		next := newSchedule(gen, on).next
		workers.Go(func() { g.work(ctx, &st, next, time.Time{}) })
	}
	workers.Wait()
	snap := st.Snapshot()
	g.logger.Info("Load generation warmed up", zap.Int("users", cfg.Users), zap.Int64("items", snap.Items()),
		zap.Int64("dropped", snap.Dropped), zap.Duration("took", time.Since(began)), zap.Duration("pause", g.cfg.WarmupPause))
	sleep(ctx, g.cfg.WarmupPause)
	return ctx.Err() == nil
}

func snapshotFields(s Snapshot) []zap.Field {
	secs := math.Max(s.Elapsed.Seconds(), 1e-9)
	return []zap.Field{
		zap.Int64("traces", s.Traces),
		zap.Int64("spans", s.Spans),
		zap.Int64("data_points", s.DataPoints),
		zap.Int64("log_records", s.LogRecords),
		zap.Int64("refused", s.Refused),
		zap.Int64("retries", s.Retries),
		zap.Int64("dropped", s.Dropped),
		zap.Int64("bytes", s.Bytes),
		zap.Duration("elapsed", s.Elapsed),
		zap.Float64("items_per_second", math.Round(float64(s.Items())/secs)),
		zap.Float64("mib_per_second", math.Round(float64(s.Bytes)/secs/(1<<20)*10)/10),
	}
}

// batch is one ConsumeTraces, ConsumeMetrics or ConsumeLogs call.
type batch struct {
	signal int   // 0 traces, 1 metrics, 2 logs
	n      int   // spans, data points or log records
	traces int64 // traces begun in it, for Stats
	size   int   // OTLP size, taken before Consume, which may take the data over
	td     ptrace.Traces
	md     pmetric.Metrics
	ld     plog.Logs
}

var (
	tracesSizer  ptrace.ProtoMarshaler
	metricsSizer pmetric.ProtoMarshaler
	logsSizer    plog.ProtoMarshaler
)

// schedule generates one worker's batches in sending order. It always
// picks the signal furthest behind in proportion, so traces, metrics and
// logs flow together; the order depends only on the totals, so streaming
// and pregenerate send the same sequence.
type schedule struct {
	gen         *Generator
	on          [3]bool
	sent, total [3]int64
}

func newSchedule(gen *Generator, on [3]bool) *schedule {
	return &schedule{gen: gen, on: on, total: [3]int64{gen.traces.total, gen.metrics.total, gen.logs.total}}
}

// next generates the next batch; false when the worker's users are done.
func (s *schedule) next() (batch, bool) {
	for {
		next, best := -1, math.Inf(1)
		for i := range s.sent {
			if s.on[i] && s.sent[i] < s.total[i] {
				if f := float64(s.sent[i]) / float64(s.total[i]); f < best {
					next, best = i, f
				}
			}
		}
		if next < 0 {
			return batch{}, false
		}
		b := batch{signal: next}
		switch next {
		case 0:
			c := s.gen.traces
			before := c.traces
			b.td, b.n = c.next()
			b.traces = c.traces - before
			b.size = tracesSizer.TracesSize(b.td)
		case 1:
			b.md, b.n = s.gen.metrics.next()
			b.size = metricsSizer.MetricsSize(b.md)
		case 2:
			b.ld, b.n = s.gen.logs.next()
			b.size = logsSizer.LogsSize(b.ld)
		}
		if b.n == 0 {
			s.total[next] = s.sent[next] // cannot happen: totals match the cursors
			continue
		}
		s.sent[next] += int64(b.n)
		return b, true
	}
}

// prepare generates every worker's batches, one goroutine per worker as
// when streaming. It stops early, returning partial lists, when ctx ends.
func prepare(ctx context.Context, gens []*Generator, on [3]bool) [][]batch {
	out := make([][]batch, len(gens))
	var wg sync.WaitGroup
	for w, gen := range gens {
		wg.Go(func() {
			s := newSchedule(gen, on)
			for ctx.Err() == nil {
				b, ok := s.next()
				if !ok {
					return
				}
				out[w] = append(out[w], b)
			}
		})
	}
	wg.Wait()
	return out
}

// replay hands out prepared batches in order, dropping each from the list
// so that it can be collected once sent.
func replay(bs []batch) func() (batch, bool) {
	i := 0
	return func() (batch, bool) {
		if i == len(bs) {
			return batch{}, false
		}
		b := bs[i]
		bs[i] = batch{}
		i++
		return b, true
	}
}

// work sends one worker's batches until they run out, ctx ends or the
// deadline passes.
func (g *run) work(ctx context.Context, st *Stats, next func() (batch, bool), deadline time.Time) {
	for ctx.Err() == nil && (deadline.IsZero() || time.Now().Before(deadline)) {
		b, ok := next()
		if !ok || g.send(ctx, st, b, deadline) != nil {
			return
		}
	}
}

// send waits for the batch's rate slot and hands it to its pipeline,
// resending it after a retryable refusal as an OTel SDK resends a request
// (retry_on_failure). The batch is marked read-only first, so a mutating
// consumer gets a copy (the fanout clones read-only data for it) and what
// is resent is what was generated.
func (g *run) send(ctx context.Context, st *Stats, b batch, deadline time.Time) error {
	if err := g.limiter.wait(ctx, b.n, deadline); err != nil {
		return err
	}
	switch b.signal {
	case 0:
		b.td.MarkReadOnly()
		st.Traces.Add(b.traces)
		st.Spans.Add(int64(b.n))
	case 1:
		b.md.MarkReadOnly()
		st.DataPoints.Add(int64(b.n))
	case 2:
		b.ld.MarkReadOnly()
		st.LogRecords.Add(int64(b.n))
	}
	st.Batches.Add(1)
	st.Bytes.Add(int64(b.size))
	rc := g.cfg.RetryOnFailure
	var (
		began   time.Time
		wait    = rc.InitialInterval
		retried bool
	)
	for {
		err := g.consume(ctx, b)
		if err == nil {
			if retried {
				st.RetriedOK.Add(int64(b.n))
			}
			return nil
		}
		st.Refused.Add(int64(b.n))
		give := !rc.Enabled || consumererror.IsPermanent(err) || ctx.Err() != nil
		if !give && began.IsZero() {
			began = time.Now()
		}
		if !give && rc.MaxElapsedTime > 0 && time.Since(began)+wait > rc.MaxElapsedTime {
			give = true
		}
		g.noteRefusal(err, give)
		if give {
			st.Dropped.Add(int64(b.n))
			if !consumererror.IsPermanent(err) {
				sleep(ctx, refusedBackoff)
			}
			return nil
		}
		sleep(ctx, jitter(wait, rc.RandomizationFactor))
		if ctx.Err() != nil {
			st.Dropped.Add(int64(b.n))
			return errStop
		}
		st.Retries.Add(1)
		retried = true
		wait = min(time.Duration(float64(wait)*max(rc.Multiplier, 1)), rc.MaxInterval)
	}
}

// consume is one ConsumeX call with its self-telemetry.
func (g *run) consume(ctx context.Context, b batch) error {
	var err error
	switch b.signal {
	case 0:
		octx := g.obs.StartTracesOp(ctx)
		err = g.traces.ConsumeTraces(octx, b.td)
		g.obs.EndTracesOp(octx, "loadgen", b.n, err)
	case 1:
		octx := g.obs.StartMetricsOp(ctx)
		err = g.metrics.ConsumeMetrics(octx, b.md)
		g.obs.EndMetricsOp(octx, "loadgen", b.n, err)
	case 2:
		octx := g.obs.StartLogsOp(ctx)
		err = g.logs.ConsumeLogs(octx, b.ld)
		g.obs.EndLogsOp(octx, "loadgen", b.n, err)
	}
	return err
}

// jitter spreads d by ±factor, as the SDKs' exponential backoff does.
func jitter(d time.Duration, factor float64) time.Duration {
	if factor <= 0 {
		return d
	}
	return time.Duration(float64(d) * (1 - factor + 2*factor*rand.Float64()))
}

// refusedBackoff is the pause after a batch is given up on, so a memory
// limiter that keeps refusing is not hammered.
const refusedBackoff = 100 * time.Millisecond

// noteRefusal logs a refusal when its error changes, not for every batch.
func (g *run) noteRefusal(err error, dropped bool) {
	msg := err.Error()
	if dropped {
		msg = "dropped: " + msg
	}
	g.errMu.Lock()
	changed := msg != g.lastErr
	g.lastErr = msg
	g.errMu.Unlock()
	if !changed {
		return
	}
	if dropped {
		g.logger.Warn("Pipeline refused a generated batch; it is dropped (counted in Stats.Dropped)", zap.Error(err))
		return
	}
	g.logger.Info("Pipeline refused a generated batch; resending it with backoff (counted in Stats.Retries)", zap.Error(err))
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
