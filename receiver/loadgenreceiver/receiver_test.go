package loadgenreceiver

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver/internal/metadata"
)

type sinks struct {
	traces  *consumertest.TracesSink
	metrics *consumertest.MetricsSink
	logs    *consumertest.LogsSink
}

// startAll creates the receiver for the given signals with one config, as
// the Collector does, and starts them. nil consumers leave a signal out.
func startAll(t *testing.T, f receiver.Factory, cfg *Config, set receiver.Settings, tc consumer.Traces, mc consumer.Metrics, lc consumer.Logs) []component.Component {
	t.Helper()
	ctx := context.Background()
	var comps []component.Component
	if tc != nil {
		r, err := f.CreateTraces(ctx, set, cfg, tc)
		require.NoError(t, err)
		comps = append(comps, r)
	}
	if mc != nil {
		r, err := f.CreateMetrics(ctx, set, cfg, mc)
		require.NoError(t, err)
		comps = append(comps, r)
	}
	if lc != nil {
		r, err := f.CreateLogs(ctx, set, cfg, lc)
		require.NoError(t, err)
		comps = append(comps, r)
	}
	for _, c := range comps {
		require.NoError(t, c.Start(ctx, componenttest.NewNopHost()))
	}
	return comps
}

func shutdownAll(t *testing.T, comps []component.Component) {
	t.Helper()
	for _, c := range comps {
		require.NoError(t, c.Shutdown(context.Background()))
	}
}

func waitDone(t *testing.T, s *Stats, within time.Duration) {
	t.Helper()
	select {
	case <-s.Done():
	case <-time.After(within):
		t.Fatalf("generation did not finish within %s: %+v", within, s.Snapshot())
	}
}

func TestReceiverGeneratesEveryItem(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()

	stats := NewStats()
	var hook Snapshot
	stats.OnDone = func(s Snapshot) { hook = s }
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.Concurrency = 3, 2
	s := sinks{new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)}
	comps := startAll(t, f, cfg, set, s.traces, s.metrics, s.logs)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)

	// Exactly users × events_per_user, split 855 / 475 / 570 per user.
	assert.Equal(t, 3*855, s.traces.SpanCount())
	assert.Equal(t, 3*475, s.metrics.DataPointCount())
	assert.Equal(t, 3*570, s.logs.LogRecordCount())
	assert.Equal(t, 3*1900, s.traces.SpanCount()+s.metrics.DataPointCount()+s.logs.LogRecordCount())

	snap := stats.Snapshot()
	assert.True(t, snap.Finished)
	assert.Equal(t, int64(3*1900), snap.Items())
	assert.Equal(t, int64(s.traces.SpanCount()), snap.Spans)
	assert.InDelta(t, 300, snap.Traces, 45)
	assert.Zero(t, snap.Refused)
	assert.Positive(t, snap.Bytes)
	assert.Equal(t, int64(len(s.traces.AllTraces())+len(s.metrics.AllMetrics())+len(s.logs.AllLogs())), snap.Batches)
	assert.Equal(t, snap, hook)

	// Self-telemetry through receiverhelper's ObsReport.
	for name, want := range map[string]int{
		"otelcol_receiver_accepted_spans":         s.traces.SpanCount(),
		"otelcol_receiver_accepted_metric_points": s.metrics.DataPointCount(),
		"otelcol_receiver_accepted_log_records":   s.logs.LogRecordCount(),
	} {
		m, err := tel.GetMetric(name)
		require.NoError(t, err, name)
		sum := m.Data.(metricdata.Sum[int64])
		var got int64
		for _, dp := range sum.DataPoints {
			got += dp.Value
			transport, _ := dp.Attributes.Value("transport")
			assert.Equal(t, "loadgen", transport.AsString())
		}
		assert.Equal(t, int64(want), got, name)
	}
}

func TestSignalsKeyChoosesSignals(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.Signals = 2, []string{"metrics"}
	s := sinks{new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)}
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), s.traces, s.metrics, s.logs)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)
	assert.Zero(t, s.traces.SpanCount())
	assert.Equal(t, 2*475, s.metrics.DataPointCount())
	assert.Zero(t, s.logs.LogRecordCount())
}

func TestSignalsInferredFromPipelines(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users = 2
	logs := new(consumertest.LogsSink)
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), nil, nil, logs)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)
	assert.Equal(t, 2*570, logs.LogRecordCount())
	assert.Zero(t, stats.Snapshot().Spans)
}

func TestShutdownWithoutStart(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	r, err := f.CreateTraces(context.Background(), receivertest.NewNopSettings(metadata.Type), f.CreateDefaultConfig(), consumertest.NewNop())
	require.NoError(t, err)
	require.NoError(t, r.Shutdown(context.Background()))
	require.NoError(t, r.Shutdown(context.Background()))
	assert.True(t, stats.Finished(), "a bench waiting on Done must not hang")
	// Start after Shutdown does not bring it back.
	require.NoError(t, r.Start(context.Background(), componenttest.NewNopHost()))
	require.NoError(t, r.Shutdown(context.Background()))
}

// The Collector shuts each signal's receiver down in turn: generation stops
// with the last, as the exporter's shared client does, not with the first.
func TestGenerationStopsWithTheLastShutdown(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.Concurrency = 1_000_000, 2
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), consumertest.NewNop(), consumertest.NewNop(), consumertest.NewNop())
	require.Eventually(t, func() bool { return stats.Spans.Load() > 1000 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, comps[0].Shutdown(context.Background()))
	require.NoError(t, comps[1].Shutdown(context.Background()))
	assert.False(t, stats.Finished(), "a signal still runs")
	before := stats.Snapshot().Items()
	require.Eventually(t, func() bool { return stats.Snapshot().Items() > before }, 5*time.Second, 5*time.Millisecond,
		"generation goes on until the last Shutdown")
	require.NoError(t, comps[2].Shutdown(context.Background()))
	assert.True(t, stats.Finished())
}

func TestShutdownDuringGenerationIsPrompt(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.Concurrency = 1_000_000, 2
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), consumertest.NewNop(), consumertest.NewNop(), consumertest.NewNop())
	require.Eventually(t, func() bool { return stats.Spans.Load() > 1000 }, 10*time.Second, 5*time.Millisecond)

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, c := range comps {
		require.NoError(t, c.Shutdown(ctx))
	}
	assert.Less(t, time.Since(began), 2*time.Second)
	assert.True(t, stats.Finished())
	after := stats.Snapshot().Items()
	time.Sleep(50 * time.Millisecond)
	assert.Equal(t, after, stats.Snapshot().Items(), "nothing is sent after Shutdown")
	assert.Less(t, after, int64(cfg.Users*cfg.EventsPerUser))
	shutdownAll(t, comps) // a second Shutdown is a no-op
}

func TestRateAndDurationRoughlyHonoured(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.Rate, cfg.Duration, cfg.BatchSize, cfg.Concurrency = 1000, 2000, time.Second, 100, 2
	s := sinks{new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)}
	began := time.Now()
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), s.traces, s.metrics, s.logs)
	waitDone(t, stats, 10*time.Second)
	elapsed := time.Since(began)
	shutdownAll(t, comps)

	items := s.traces.SpanCount() + s.metrics.DataPointCount() + s.logs.LogRecordCount()
	t.Logf("rate 2000/s for 1s: %d items (%d spans, %d points, %d logs) in %s", items,
		s.traces.SpanCount(), s.metrics.DataPointCount(), s.logs.LogRecordCount(), elapsed)
	assert.GreaterOrEqual(t, items, 1500)
	assert.LessOrEqual(t, items, 2600)
	assert.Less(t, elapsed, 3*time.Second)
	// All three signals flow together, not one after the other.
	assert.Positive(t, s.metrics.DataPointCount())
	assert.Positive(t, s.logs.LogRecordCount())
}

func TestRefusedBatchesAreCounted(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users = 1
	refuse := consumertest.NewErr(consumererror.NewPermanent(errors.New("no room")))
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), refuse, refuse, refuse)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)
	snap := stats.Snapshot()
	assert.Equal(t, int64(1900), snap.Items())
	assert.Equal(t, int64(1900), snap.Refused)
	assert.Equal(t, int64(1900), snap.Dropped, "a permanent error is not retried")
	assert.Zero(t, snap.Retries)
}

func TestFactory(t *testing.T) {
	f := NewFactory()
	assert.Equal(t, metadata.Type, f.Type())
	assert.Equal(t, component.StabilityLevelDevelopment, f.TracesStability())
	assert.Equal(t, component.StabilityLevelDevelopment, f.MetricsStability())
	assert.Equal(t, component.StabilityLevelDevelopment, f.LogsStability())

	set := receivertest.NewNopSettings(metadata.Type)
	ctx := context.Background()
	cfg := f.CreateDefaultConfig()
	tr, err := f.CreateTraces(ctx, set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	lr, err := f.CreateLogs(ctx, set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	runOf := func(r component.Component) *Stats { return r.(interface{ Stats() *Stats }).Stats() }
	assert.Same(t, runOf(tr), runOf(lr), "one config, one shared run")
	other, err := f.CreateLogs(ctx, set, f.CreateDefaultConfig(), consumertest.NewNop())
	require.NoError(t, err)

	require.NoError(t, tr.Shutdown(ctx))
	require.NoError(t, lr.Shutdown(ctx))
	again, err := f.CreateTraces(ctx, set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	assert.NotSame(t, tr.(sharer).Unwrap(), again.(sharer).Unwrap(), "a shut-down run is not reused")
	assert.NotSame(t, tr.(sharer).Unwrap(), other.(sharer).Unwrap(), "another config, another run")
	require.NoError(t, again.Shutdown(ctx))
	require.NoError(t, other.Shutdown(ctx))

	st, ok := tr.(interface{ Stats() *Stats })
	require.True(t, ok)
	assert.NotNil(t, st.Stats())
}

// recorder keeps every batch the receiver hands over as its signal and the
// SHA-256 of its OTLP bytes (readable when a comparison fails), in arrival
// order.
type recorder struct {
	mu  sync.Mutex
	got []string
}

func (r *recorder) add(signal string, b []byte, err error) error {
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.got = append(r.got, fmt.Sprintf("%s %x", signal, sha256.Sum256(b)))
	r.mu.Unlock()
	return nil
}

// runRecorded runs the receiver on every signal with timestamps from
// testStart and returns what it sent, and its log.
func runRecorded(t *testing.T, cfg Config) ([]string, *observer.ObservedLogs) {
	t.Helper()
	rec := &recorder{}
	tc, err := consumer.NewTraces(func(_ context.Context, td ptrace.Traces) error {
		b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		return rec.add("traces", b, err)
	})
	require.NoError(t, err)
	mc, err := consumer.NewMetrics(func(_ context.Context, md pmetric.Metrics) error {
		b, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
		return rec.add("metrics", b, err)
	})
	require.NoError(t, err)
	lc, err := consumer.NewLogs(func(_ context.Context, ld plog.Logs) error {
		b, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		return rec.add("logs", b, err)
	})
	require.NoError(t, err)

	stats := NewStats()
	f := NewFactoryWithStats(stats)
	set := receivertest.NewNopSettings(metadata.Type)
	core, logs := observer.New(zap.InfoLevel)
	set.Logger = zap.New(core)
	ctx := context.Background()
	tr, err := f.CreateTraces(ctx, set, &cfg, tc)
	require.NoError(t, err)
	mr, err := f.CreateMetrics(ctx, set, &cfg, mc)
	require.NoError(t, err)
	lr, err := f.CreateLogs(ctx, set, &cfg, lc)
	require.NoError(t, err)
	tr.(sharer).Unwrap().epoch = testStart // the same timestamps in both runs
	comps := []component.Component{tr, mr, lr}
	for _, c := range comps {
		require.NoError(t, c.Start(ctx, componenttest.NewNopHost()))
	}
	waitDone(t, stats, 30*time.Second)
	shutdownAll(t, comps)
	require.Equal(t, int64(cfg.Users*cfg.EventsPerUser), stats.Snapshot().Items())
	return rec.got, logs
}

// pregenerate must change when batches are made, never what is sent: the
// same OTLP bytes, batch for batch, in the same order for one worker (the
// order across workers depends on scheduling, so several are compared as a
// multiset).
func TestPregenerateSendsTheStreamedBatches(t *testing.T) {
	for _, concurrency := range []int{1, 3} {
		cfg := testConfig(5)
		cfg.Concurrency, cfg.BatchSize = concurrency, 97
		streamed, _ := runRecorded(t, cfg)
		cfg.Pregenerate = true
		pregenerated, logs := runRecorded(t, cfg)
		require.NotEmpty(t, streamed)
		if concurrency > 1 {
			slices.Sort(streamed)
			slices.Sort(pregenerated)
		}
		assert.Equal(t, streamed, pregenerated, "concurrency %d", concurrency)

		// The preparation is logged, with its size, before generation starts.
		i := loggedBeforeStart(t, logs, "Load generation prepared every batch in memory")
		assert.Equal(t, int64(5*1900), logs.All()[i].ContextMap()["items"])
		assert.Equal(t, int64(len(pregenerated)), logs.All()[i].ContextMap()["batches"])
	}
}

// loggedBeforeStart returns the index in logs of the entry with message msg,
// after checking it is there and comes before "Load generation started".
func loggedBeforeStart(t *testing.T, logs *observer.ObservedLogs, msg string) int {
	t.Helper()
	var msgs []string
	for _, e := range logs.All() {
		msgs = append(msgs, e.Message)
	}
	i := slices.Index(msgs, msg)
	require.GreaterOrEqual(t, i, 0, "%v", msgs)
	assert.Less(t, i, slices.Index(msgs, "Load generation started"))
	return i
}

// A warm-up sends warmup_users users of the next seed, all of it before
// generation starts, and is left out of the counts: what follows is what the
// run sends without one.
func TestWarmUpSendsTheNextSeedFirstAndApart(t *testing.T) {
	cfg := testConfig(3)
	cfg.BatchSize = 97
	plain, _ := runRecorded(t, cfg)
	warm := testConfig(2)
	warm.BatchSize, warm.Seed = 97, cfg.Seed+1
	warmOnly, _ := runRecorded(t, warm)

	cfg.WarmupUsers, cfg.WarmupPause = 2, 50*time.Millisecond
	got, logs := runRecorded(t, cfg) // checks the counts hold the 3 users only
	require.NotEmpty(t, warmOnly)
	assert.Equal(t, append(slices.Clone(warmOnly), plain...), got)

	i := loggedBeforeStart(t, logs, "Load generation warmed up")
	assert.Equal(t, int64(2*1900), logs.All()[i].ContextMap()["items"])
	assert.Equal(t, int64(0), logs.All()[i].ContextMap()["dropped"])
}

func TestShutdownDuringWarmUpPauseIsPrompt(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.WarmupUsers, cfg.WarmupPause = 1, 1, time.Hour
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), consumertest.NewNop(), consumertest.NewNop(), consumertest.NewNop())
	time.Sleep(200 * time.Millisecond)
	began := time.Now()
	shutdownAll(t, comps)
	assert.Less(t, time.Since(began), 2*time.Second)
	assert.True(t, stats.Finished())
	assert.Zero(t, stats.Snapshot().Items(), "the warm-up is not counted, and nothing is generated after a stop")
}

func TestShutdownDuringPregenerateIsPrompt(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users, cfg.Concurrency, cfg.Pregenerate = 1_000_000, 2, true
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), consumertest.NewNop(), consumertest.NewNop(), consumertest.NewNop())
	time.Sleep(100 * time.Millisecond)
	began := time.Now()
	shutdownAll(t, comps)
	assert.Less(t, time.Since(began), 2*time.Second)
	assert.True(t, stats.Finished())
	assert.Zero(t, stats.Snapshot().Items(), "nothing is sent before preparation ends")
}

// flaky refuses its first n calls with a retryable error, as an exporter
// whose queue is full does, then stores what it is given.
type flaky[T any] struct {
	mu      sync.Mutex
	refuse  int
	calls   int
	refused int
	store   func(T)
}

func (f *flaky[T]) consume(_ context.Context, v T) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if f.refused < f.refuse {
		f.refused++
		return errors.New("sending queue is full")
	}
	f.store(v)
	return nil
}

// A retryable refusal (an exporter's full queue) is resent with backoff, as
// an OTel SDK resends: every item arrives, nothing is dropped.
func TestRetryableRefusalIsResent(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users = 2
	cfg.RetryOnFailure.InitialInterval = time.Millisecond
	cfg.RetryOnFailure.MaxInterval = 5 * time.Millisecond
	s := sinks{new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)}
	tc := &flaky[ptrace.Traces]{refuse: 3, store: func(td ptrace.Traces) { _ = s.traces.ConsumeTraces(context.Background(), td) }}
	mc := &flaky[pmetric.Metrics]{refuse: 2, store: func(md pmetric.Metrics) { _ = s.metrics.ConsumeMetrics(context.Background(), md) }}
	lc := &flaky[plog.Logs]{refuse: 4, store: func(ld plog.Logs) { _ = s.logs.ConsumeLogs(context.Background(), ld) }}
	tcons, err := consumer.NewTraces(tc.consume)
	require.NoError(t, err)
	mcons, err := consumer.NewMetrics(mc.consume)
	require.NoError(t, err)
	lcons, err := consumer.NewLogs(lc.consume)
	require.NoError(t, err)
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), tcons, mcons, lcons)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)

	assert.Equal(t, 2*855, s.traces.SpanCount())
	assert.Equal(t, 2*475, s.metrics.DataPointCount())
	assert.Equal(t, 2*570, s.logs.LogRecordCount())
	snap := stats.Snapshot()
	assert.Equal(t, int64(2*1900), snap.Items(), "each item counted once, resent or not")
	assert.Positive(t, snap.Refused)
	checkRetries(t, snap, 3+2+4)
}
