package postgrescopyexporter

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// histogramsToPdata converts the SDK's int64 histograms to pdata, as its
// OTLP exporter would.
func histogramsToPdata(rm metricdata.ResourceMetrics) pmetric.Metrics {
	md := pmetric.NewMetrics()
	r := md.ResourceMetrics().AppendEmpty()
	for _, kv := range rm.Resource.Attributes() {
		r.Resource().Attributes().PutStr(string(kv.Key), kv.Value.Emit())
	}
	for _, sm := range rm.ScopeMetrics {
		s := r.ScopeMetrics().AppendEmpty()
		s.Scope().SetName(sm.Scope.Name)
		for _, m := range sm.Metrics {
			h, ok := m.Data.(metricdata.Histogram[int64])
			if !ok {
				continue
			}
			pm := s.Metrics().AppendEmpty()
			pm.SetName(m.Name)
			pm.SetUnit(m.Unit)
			ph := pm.SetEmptyHistogram()
			if h.Temporality == metricdata.DeltaTemporality {
				ph.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
			} else {
				ph.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			}
			for _, dp := range h.DataPoints {
				p := ph.DataPoints().AppendEmpty()
				p.SetStartTimestamp(pcommon.NewTimestampFromTime(dp.StartTime))
				p.SetTimestamp(pcommon.NewTimestampFromTime(dp.Time))
				p.SetCount(dp.Count)
				p.SetSum(float64(dp.Sum))
				p.ExplicitBounds().FromRaw(dp.Bounds)
				p.BucketCounts().FromRaw(dp.BucketCounts)
				for _, kv := range dp.Attributes.ToSlice() {
					p.Attributes().PutStr(string(kv.Key), kv.Value.Emit())
				}
			}
		}
	}
	return md
}

// TestAISpendTokenMetrics: gen_ai.client.token.usage histograms from the
// SDK (cumulative, as it exports by default) land in ai_tokens as the
// tokens recorded, each export counting only its rise, apart from the
// span-derived counts.
func TestAISpendTokenMetrics(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	me, err := NewFactory().CreateMetrics(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, me.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, me.Shutdown(context.Background())) })

	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { require.NoError(t, mp.Shutdown(context.Background())) })
	usage, err := mp.Meter("genai-test").Int64Histogram("gen_ai.client.token.usage", metric.WithUnit("{token}"))
	require.NoError(t, err)
	attrs := func(typ attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributes(semconv.GenAIOperationNameChat, semconv.GenAIProviderNameOpenAI,
			semconv.GenAIRequestModel("gpt-4o"), semconv.GenAIResponseModel("gpt-4o"), typ)
	}
	export := func() {
		var rm metricdata.ResourceMetrics
		require.NoError(t, reader.Collect(ctx, &rm))
		require.NoError(t, me.ConsumeMetrics(ctx, histogramsToPdata(rm)))
	}
	usage.Record(ctx, 100, attrs(semconv.GenAITokenTypeInput))
	usage.Record(ctx, 200, attrs(semconv.GenAITokenTypeInput))
	usage.Record(ctx, 50, attrs(semconv.GenAITokenTypeOutput))
	export()
	usage.Record(ctx, 300, attrs(semconv.GenAITokenTypeInput))
	export() // cumulative: input 600 so far, output still 50

	pool := pgtest.Pool(t)
	s := pgx.Identifier{schemaName}.Sanitize()
	// Roll up the open hour by hand: the maintenance waits for it to close.
	hour := time.Now().UTC().Truncate(time.Hour)
	_, err = pool.Exec(ctx, `SELECT `+s+`.postgrescopy_ai_rollup($1, $2)`, hour, hour.Add(time.Hour))
	require.NoError(t, err)
	got := map[string]float64{}
	rows, err := pool.Query(ctx, `SELECT token_type, tokens FROM `+s+`.ai_tokens WHERE source = 'metrics' AND model = 'gpt-4o' AND provider = 'openai'`)
	require.NoError(t, err)
	for rows.Next() {
		var typ string
		var n float64
		require.NoError(t, rows.Scan(&typ, &n))
		got[typ] += n
	}
	require.NoError(t, rows.Err())
	assert.Equal(t, map[string]float64{"input": 600, "output": 50}, got)
	var spanRows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+s+`.ai_tokens WHERE source = 'spans'`).Scan(&spanRows))
	assert.Zero(t, spanRows, "no span was sent: the metrics are not counted as spans")
}
