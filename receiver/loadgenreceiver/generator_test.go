package loadgenreceiver

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var testStart = time.Date(2025, 11, 3, 12, 0, 0, 0, time.UTC)

func testConfig(users int) Config {
	cfg := *createDefaultConfig().(*Config)
	cfg.Users = users
	return cfg
}

// drain returns every batch of every signal, marshalled, in order.
func drain(t *testing.T, g *Generator) (traces, metrics, logs [][]byte) {
	t.Helper()
	for td, ok := g.NextTraces(); ok; td, ok = g.NextTraces() {
		b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
		require.NoError(t, err)
		traces = append(traces, b)
	}
	for md, ok := g.NextMetrics(); ok; md, ok = g.NextMetrics() {
		b, err := (&pmetric.ProtoMarshaler{}).MarshalMetrics(md)
		require.NoError(t, err)
		metrics = append(metrics, b)
	}
	for ld, ok := g.NextLogs(); ok; ld, ok = g.NextLogs() {
		b, err := (&plog.ProtoMarshaler{}).MarshalLogs(ld)
		require.NoError(t, err)
		logs = append(logs, b)
	}
	return traces, metrics, logs
}

func TestGeneratorDeterministic(t *testing.T) {
	cfg := testConfig(3)
	g1, err := NewWorkerGenerator(cfg, testStart, 0)
	require.NoError(t, err)
	g2, err := NewWorkerGenerator(cfg, testStart, 0)
	require.NoError(t, err)
	t1, m1, l1 := drain(t, g1)
	t2, m2, l2 := drain(t, g2)
	require.NotEmpty(t, t1)
	assert.Equal(t, t1, t2, "traces differ for the same seed")
	assert.Equal(t, m1, m2, "metrics differ for the same seed")
	assert.Equal(t, l1, l2, "logs differ for the same seed")

	cfg.Seed = 2
	g3, err := NewWorkerGenerator(cfg, testStart, 0)
	require.NoError(t, err)
	t3, m3, l3 := drain(t, g3)
	assert.NotEqual(t, t1[0], t3[0])
	assert.NotEqual(t, m1[0], m3[0])
	assert.NotEqual(t, l1[0], l3[0])
}

// The rows do not depend on how they are batched or which worker makes them.
func TestGeneratorIndependentOfBatchingAndWorkers(t *testing.T) {
	cfg := testConfig(4)
	one, err := NewWorkerGenerator(cfg, testStart, 0)
	require.NoError(t, err)
	want := spanDigests(t, one)

	cfg.BatchSize, cfg.Concurrency = 37, 3
	got := map[pcommon.SpanID]string{}
	for w := range cfg.Concurrency {
		g, err := NewWorkerGenerator(cfg, testStart, w)
		require.NoError(t, err)
		for id, d := range spanDigests(t, g) {
			got[id] = d
		}
	}
	assert.Equal(t, want, got)
}

// spanDigests maps each span id to its marshalled span.
func spanDigests(t *testing.T, g *Generator) map[pcommon.SpanID]string {
	out := map[pcommon.SpanID]string{}
	for td, ok := g.NextTraces(); ok; td, ok = g.NextTraces() {
		forEachSpan(td, func(_ pcommon.Resource, sp ptrace.Span) {
			one := ptrace.NewTraces()
			sp.CopyTo(one.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty())
			b, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(one)
			require.NoError(t, err)
			out[sp.SpanID()] = string(b)
		})
	}
	return out
}

func forEachSpan(td ptrace.Traces, f func(pcommon.Resource, ptrace.Span)) {
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				f(rs.Resource(), sp)
			}
		}
	}
}

// TestGeneratorWorkload checks the article's shape on the default mix.
func TestGeneratorWorkload(t *testing.T) {
	const users = 20
	cfg := testConfig(users)
	g, err := NewWorkerGenerator(cfg, testStart, 0)
	require.NoError(t, err)
	spansWant, pointsWant, logsWant := g.Totals()
	assert.Equal(t, int64(users*855), spansWant)
	assert.Equal(t, int64(users*475), pointsWant)
	assert.Equal(t, int64(users*570), logsWant)

	type spanInfo struct {
		parent pcommon.SpanID
		err    bool
	}
	traces := map[pcommon.TraceID]map[pcommon.SpanID]spanInfo{}
	var spans, errSpans, bytes, batches int
	genAI := 0
	for td, ok := g.NextTraces(); ok; td, ok = g.NextTraces() {
		batches++
		require.LessOrEqual(t, td.SpanCount(), cfg.BatchSize)
		bytes += (&ptrace.ProtoMarshaler{}).TracesSize(td)
		forEachSpan(td, func(res pcommon.Resource, sp ptrace.Span) {
			spans++
			_, ok := res.Attributes().Get("service.name")
			require.True(t, ok)
			tr := traces[sp.TraceID()]
			if tr == nil {
				tr = map[pcommon.SpanID]spanInfo{}
				traces[sp.TraceID()] = tr
			}
			require.NotContains(t, tr, sp.SpanID(), "duplicate span id")
			isErr := sp.Status().Code() == ptrace.StatusCodeError
			tr[sp.SpanID()] = spanInfo{parent: sp.ParentSpanID(), err: isErr}
			require.GreaterOrEqual(t, sp.EndTimestamp(), sp.StartTimestamp())
			for _, k := range []string{"user.id", "session.id", "team", "project", "cost_center"} {
				_, ok := sp.Attributes().Get(k)
				require.True(t, ok, k)
			}
			if isErr {
				errSpans++
				if sp.Events().Len() > 0 {
					assert.Equal(t, "exception", sp.Events().At(0).Name())
				}
			}
			if op, ok := sp.Attributes().Get("gen_ai.operation.name"); ok && op.Str() == "chat" && sp.Kind() == ptrace.SpanKindClient {
				genAI++
				for _, k := range []string{"gen_ai.provider.name", "gen_ai.request.model", "gen_ai.usage.input_tokens", "server.address", "url.full", "http.request.method", "gen_ai.input.messages"} {
					_, ok := sp.Attributes().Get(k)
					require.True(t, ok, k)
				}
				if !isErr {
					cost, ok := sp.Attributes().Get("gen_ai.usage.cost")
					require.True(t, ok)
					require.Equal(t, pcommon.ValueTypeDouble, cost.Type())
					assert.Positive(t, cost.Double())
				}
			}
		})
	}
	assert.Equal(t, int(spansWant), spans)
	assert.Positive(t, genAI)

	// Valid trees of 5 to 12 spans, about 100 traces per user.
	for id, tr := range traces {
		require.GreaterOrEqual(t, len(tr), minSpansPerTrace, "trace %s", id)
		require.LessOrEqual(t, len(tr), maxSpansPerTrace, "trace %s", id)
		roots := 0
		for _, s := range tr {
			if s.parent.IsEmpty() {
				roots++
				continue
			}
			require.Contains(t, tr, s.parent, "trace %s: parent missing", id)
		}
		require.Equal(t, 1, roots, "trace %s", id)
	}
	perUser := float64(len(traces)) / users
	assert.InDelta(t, 100, perUser, 15, "traces per user")

	avg := float64(bytes) / float64(spans)
	t.Logf("%d spans in %d traces (%.1f per user), %d batches, average %.0f bytes/span (OTLP protobuf), error spans %.2f%%",
		spans, len(traces), perUser, batches, avg, 100*float64(errSpans)/float64(spans))
	assert.InDelta(t, 3250, avg, 1250, "average span size should be about 3 KB (2-4.5 KB)")
	errRate := float64(errSpans) / float64(spans)
	assert.GreaterOrEqual(t, errRate, 0.02)
	assert.LessOrEqual(t, errRate, 0.05)

	// Metrics: the exact count, all five point types, double values.
	types := map[pmetric.MetricType]int{}
	points := 0
	for md, ok := g.NextMetrics(); ok; md, ok = g.NextMetrics() {
		points += md.DataPointCount()
		for _, rm := range md.ResourceMetrics().All() {
			for _, sm := range rm.ScopeMetrics().All() {
				for _, m := range sm.Metrics().All() {
					types[m.Type()]++
					switch m.Type() {
					case pmetric.MetricTypeSum:
						assert.True(t, m.Sum().IsMonotonic())
						for _, dp := range m.Sum().DataPoints().All() {
							assert.Equal(t, pmetric.NumberDataPointValueTypeDouble, dp.ValueType())
						}
					case pmetric.MetricTypeGauge:
						for _, dp := range m.Gauge().DataPoints().All() {
							assert.Equal(t, pmetric.NumberDataPointValueTypeDouble, dp.ValueType())
						}
					case pmetric.MetricTypeHistogram:
						for _, dp := range m.Histogram().DataPoints().All() {
							var n uint64
							for _, c := range dp.BucketCounts().AsRaw() {
								n += c
							}
							assert.Equal(t, dp.Count(), n)
						}
					case pmetric.MetricTypeExponentialHistogram:
						for _, dp := range m.ExponentialHistogram().DataPoints().All() {
							var n uint64
							for _, c := range dp.Positive().BucketCounts().AsRaw() {
								n += c
							}
							assert.Equal(t, dp.Count(), n)
						}
					}
				}
			}
		}
	}
	assert.Equal(t, int(pointsWant), points)
	for _, typ := range []pmetric.MetricType{pmetric.MetricTypeGauge, pmetric.MetricTypeSum, pmetric.MetricTypeHistogram, pmetric.MetricTypeExponentialHistogram, pmetric.MetricTypeSummary} {
		assert.Positive(t, types[typ], typ.String())
	}

	// Logs: the exact count, a severity mix, ids of existing spans.
	severities := map[plog.SeverityNumber]int{}
	records := 0
	for ld, ok := g.NextLogs(); ok; ld, ok = g.NextLogs() {
		records += ld.LogRecordCount()
		for _, rl := range ld.ResourceLogs().All() {
			for _, sl := range rl.ScopeLogs().All() {
				for _, lr := range sl.LogRecords().All() {
					severities[lr.SeverityNumber()]++
					require.NotEmpty(t, lr.Body().Str())
					tr, ok := traces[lr.TraceID()]
					require.True(t, ok, "log trace id has no spans")
					require.Contains(t, tr, lr.SpanID(), "log span id is not a span of its trace")
				}
			}
		}
	}
	assert.Equal(t, int(logsWant), records)
	t.Logf("log severities: %v", severities)
	for _, sev := range []plog.SeverityNumber{plog.SeverityNumberDebug, plog.SeverityNumberInfo, plog.SeverityNumberWarn, plog.SeverityNumberError} {
		assert.Positive(t, severities[sev], sev.String())
	}
	assert.Greater(t, severities[plog.SeverityNumberInfo], records/2, "mostly Info")
}

func TestNewGeneratorValidates(t *testing.T) {
	cfg := testConfig(0)
	_, err := NewGenerator(cfg)
	require.Error(t, err)
}

// A user with the smallest span share still gets whole traces.
func TestTraceSizesAddUp(t *testing.T) {
	for spans := minSpansPerTrace; spans < 60; spans++ {
		w := &workload{seed: 7, spansPerUser: spans}
		var p userPlan
		for u := range 20 {
			w.planUser(newRNG(), &p, u)
			sum := 0
			for _, n := range p.traceSizes {
				require.GreaterOrEqual(t, n, minSpansPerTrace)
				require.LessOrEqual(t, n, maxSpansPerTrace)
				sum += n
			}
			require.Equal(t, spans, sum)
		}
	}
}
