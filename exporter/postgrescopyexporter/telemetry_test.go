package postgrescopyexporter

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/flush"
)

// injectingCore stands for the Collector's zap core, which adds the
// component's attributes to every entry and takes them out on request.
type injectingCore struct {
	zapcore.Core
	base  zapcore.Core
	attrs []zap.Field
}

func newInjectingCore(base zapcore.Core, attrs ...zap.Field) injectingCore {
	return injectingCore{Core: base.With(attrs), base: base, attrs: attrs}
}

func (c injectingCore) DropInjectedAttributes(drop ...string) zapcore.Core {
	var kept []zap.Field
	for _, f := range c.attrs {
		if !slices.Contains(drop, f.Key) {
			kept = append(kept, f)
		}
	}
	return newInjectingCore(c.base, kept...)
}

type injectingMeterProvider struct {
	metric.MeterProvider
	dropped *[]string
}

func (p injectingMeterProvider) DropInjectedAttributes(drop ...string) metric.MeterProvider {
	*p.dropped = append(*p.dropped, drop...)
	return p
}

func TestSharedClientTelemetryHasNoSignal(t *testing.T) {
	obs, logs := observer.New(zapcore.DebugLevel)
	var dropped []string
	set := componenttest.NewNopTelemetrySettings()
	set.Logger = zap.New(newInjectingCore(obs,
		zap.String("otelcol.component.id", "postgrescopy"), zap.String(signalKey, "traces")))
	set.MeterProvider = injectingMeterProvider{MeterProvider: noop.NewMeterProvider(), dropped: &dropped}

	cfg := defaultConfig()
	s, err := acquireClient(cfg, set)
	require.NoError(t, err)
	defer func() { _ = s.Shutdown(context.Background()) }()

	s.Unwrap().logger.Info("batch written")
	set.Logger.Info("a line of the traces exporter itself")
	entries := logs.AllUntimed()
	require.Len(t, entries, 2)
	shared, own := entries[0].ContextMap(), entries[1].ContextMap()
	assert.NotContains(t, shared, signalKey, "the shared client writes for every signal")
	assert.Equal(t, "postgrescopy", shared["otelcol.component.id"])
	assert.Equal(t, "traces", own[signalKey], "the exporter's own settings keep their signal")
	assert.Equal(t, []string{signalKey}, dropped)
}

func TestWithoutSignalKeepsPlainProviders(t *testing.T) {
	obs, logs := observer.New(zapcore.InfoLevel)
	set := componenttest.NewNopTelemetrySettings()
	set.Logger = zap.New(obs).With(zap.String("kept", "yes"))
	mp := set.MeterProvider
	got := withoutSignal(set)
	got.Logger.Info("x")
	require.Equal(t, 1, logs.Len())
	assert.Equal(t, "yes", logs.All()[0].ContextMap()["kept"])
	assert.Equal(t, mp, got.MeterProvider)
}

// TestAdmissionWaitingGauge: through the gauges the Redis side registers at
// start, a batch held back by an older batch's write is counted while it
// waits and no longer once it goes in; after shutdown's unregistering the
// gauge reports nothing.
func TestAdmissionWaitingGauge(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	tb, err := metadata.NewTelemetryBuilder(tel.NewTelemetrySettings())
	require.NoError(t, err)
	cl, err := coord.NewClient(coord.Options{Node: &redis.Options{Addr: "127.0.0.1:1"}}, 1) // never dialled
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	rt := coord.NewRuntime(cl, coord.Config{Signals: signalNames}, zap.NewNop(), lossRecorder{tb}, nil, nil)
	rs := &redisSide{rt: rt, admission: flush.NewAdmission(admissionBound, admissionStale)}
	require.NoError(t, rs.registerGauges(tb))
	// waiting is the gauge's one point, -1 without one.
	waiting := func() int64 {
		m, err := tel.GetMetric("otelcol_postgrescopy_admission_waiting")
		if err != nil {
			return -1
		}
		points := m.Data.(metricdata.Gauge[int64]).DataPoints
		if len(points) != 1 {
			return -1
		}
		return points[0].Value
	}
	assert.Equal(t, int64(0), waiting())

	ctx := context.Background()
	now := time.Now()
	leaveOld, err := rs.admission.Enter(ctx, now.Add(-2*admissionBound))
	require.NoError(t, err)
	entered := make(chan func())
	go func() {
		leave, err := rs.admission.Enter(ctx, now)
		assert.NoError(t, err)
		entered <- leave
	}()
	require.Eventually(t, func() bool { return waiting() == 1 }, admissionStale/2, 10*time.Millisecond,
		"the younger batch waits for the older one's write")
	leaveOld()
	leave := <-entered
	assert.Equal(t, int64(0), waiting(), "in flight, no longer waiting")
	leave()

	rs.unregisterGauges()
	assert.Equal(t, int64(-1), waiting())
}
