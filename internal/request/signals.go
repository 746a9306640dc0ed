package request

import (
	"context"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	pdatareq "go.opentelemetry.io/collector/pdata/xpdata/request"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

var (
	tracesSizer  ptrace.ProtoMarshaler
	metricsSizer pmetric.ProtoMarshaler
	logsSizer    plog.ProtoMarshaler
)

var Traces = &Codec[ptrace.Traces]{
	signal:  "traces",
	items:   ptrace.Traces.SpanCount,
	bytes:   tracesSizer.TracesSize,
	ends:    tracesEnds,
	split:   splitTraces,
	marshal: pdatareq.MarshalTraces,
	unmarshal: func(b []byte) (context.Context, ptrace.Traces, error) {
		return pdatareq.UnmarshalTraces(b)
	},
	add: (*rows.Batch).AddTraces,
}

var Metrics = &Codec[pmetric.Metrics]{
	signal:  "metrics",
	items:   pmetric.Metrics.DataPointCount,
	bytes:   metricsSizer.MetricsSize,
	ends:    metricsEnds,
	split:   splitMetrics,
	marshal: pdatareq.MarshalMetrics,
	unmarshal: func(b []byte) (context.Context, pmetric.Metrics, error) {
		return pdatareq.UnmarshalMetrics(b)
	},
	add: (*rows.Batch).AddMetrics,
}

var Logs = &Codec[plog.Logs]{
	signal:  "logs",
	items:   plog.Logs.LogRecordCount,
	bytes:   logsSizer.LogsSize,
	ends:    logsEnds,
	split:   splitLogs,
	marshal: pdatareq.MarshalLogs,
	unmarshal: func(b []byte) (context.Context, plog.Logs, error) {
		return pdatareq.UnmarshalLogs(b)
	},
	add: (*rows.Batch).AddLogs,
}

// A container's header size is its size less its children's (with their
// framing); the cutter needs it only when counting bytes.

func tracesEnds(td ptrace.Traces, c *cutter) {
	for _, rs := range td.ResourceSpans().All() {
		if c.bytes {
			h := tracesSizer.ResourceSpansSize(rs)
			for _, ss := range rs.ScopeSpans().All() {
				h -= deltaSize(tracesSizer.ScopeSpansSize(ss))
			}
			c.open(0, h)
		} else {
			c.open(0, 0)
		}
		for _, ss := range rs.ScopeSpans().All() {
			if c.bytes {
				h := tracesSizer.ScopeSpansSize(ss)
				for _, s := range ss.Spans().All() {
					h -= deltaSize(tracesSizer.SpanSize(s))
				}
				c.open(1, h)
			} else {
				c.open(1, 0)
			}
			for _, s := range ss.Spans().All() {
				if c.bytes {
					c.leaf(tracesSizer.SpanSize(s))
				} else {
					c.leaf(0)
				}
			}
		}
	}
}

func splitTraces(td ptrace.Traces, ends []int) []ptrace.Traces {
	out := make([]ptrace.Traces, len(ends))
	for i := range out {
		out[i] = ptrace.NewTraces()
	}
	k, idx := 0, 0
	for _, rs := range td.ResourceSpans().All() {
		var dRS ptrace.ResourceSpans
		inRS := -1 // the chunk dRS belongs to
		for _, ss := range rs.ScopeSpans().All() {
			var dSS ptrace.ScopeSpans
			inSS := -1
			for _, s := range ss.Spans().All() {
				for idx >= ends[k] {
					k++
				}
				if inRS != k {
					dRS = out[k].ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(dRS.Resource())
					dRS.SetSchemaUrl(rs.SchemaUrl())
					inRS, inSS = k, -1
				}
				if inSS != k {
					dSS = dRS.ScopeSpans().AppendEmpty()
					ss.Scope().CopyTo(dSS.Scope())
					dSS.SetSchemaUrl(ss.SchemaUrl())
					inSS = k
				}
				s.MoveTo(dSS.Spans().AppendEmpty())
				idx++
			}
		}
	}
	return out
}

func logsEnds(ld plog.Logs, c *cutter) {
	for _, rl := range ld.ResourceLogs().All() {
		if c.bytes {
			h := logsSizer.ResourceLogsSize(rl)
			for _, sl := range rl.ScopeLogs().All() {
				h -= deltaSize(logsSizer.ScopeLogsSize(sl))
			}
			c.open(0, h)
		} else {
			c.open(0, 0)
		}
		for _, sl := range rl.ScopeLogs().All() {
			if c.bytes {
				h := logsSizer.ScopeLogsSize(sl)
				for _, l := range sl.LogRecords().All() {
					h -= deltaSize(logsSizer.LogRecordSize(l))
				}
				c.open(1, h)
			} else {
				c.open(1, 0)
			}
			for _, l := range sl.LogRecords().All() {
				if c.bytes {
					c.leaf(logsSizer.LogRecordSize(l))
				} else {
					c.leaf(0)
				}
			}
		}
	}
}

func splitLogs(ld plog.Logs, ends []int) []plog.Logs {
	out := make([]plog.Logs, len(ends))
	for i := range out {
		out[i] = plog.NewLogs()
	}
	k, idx := 0, 0
	for _, rl := range ld.ResourceLogs().All() {
		var dRL plog.ResourceLogs
		inRL := -1
		for _, sl := range rl.ScopeLogs().All() {
			var dSL plog.ScopeLogs
			inSL := -1
			for _, l := range sl.LogRecords().All() {
				for idx >= ends[k] {
					k++
				}
				if inRL != k {
					dRL = out[k].ResourceLogs().AppendEmpty()
					rl.Resource().CopyTo(dRL.Resource())
					dRL.SetSchemaUrl(rl.SchemaUrl())
					inRL, inSL = k, -1
				}
				if inSL != k {
					dSL = dRL.ScopeLogs().AppendEmpty()
					sl.Scope().CopyTo(dSL.Scope())
					dSL.SetSchemaUrl(sl.SchemaUrl())
					inSL = k
				}
				l.MoveTo(dSL.LogRecords().AppendEmpty())
				idx++
			}
		}
	}
	return out
}

// points is a metric's data points, whatever its type.
type points struct {
	n    int
	size func(i int) int
	// moveTo moves point i into dst, a metric of the same type.
	moveTo func(i int, dst pmetric.Metric)
}

func metricPoints(m pmetric.Metric) points {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dps := m.Gauge().DataPoints()
		return points{dps.Len(), func(i int) int { return metricsSizer.NumberDataPointSize(dps.At(i)) },
			func(i int, dst pmetric.Metric) { dps.At(i).MoveTo(dst.Gauge().DataPoints().AppendEmpty()) }}
	case pmetric.MetricTypeSum:
		dps := m.Sum().DataPoints()
		return points{dps.Len(), func(i int) int { return metricsSizer.NumberDataPointSize(dps.At(i)) },
			func(i int, dst pmetric.Metric) { dps.At(i).MoveTo(dst.Sum().DataPoints().AppendEmpty()) }}
	case pmetric.MetricTypeHistogram:
		dps := m.Histogram().DataPoints()
		return points{dps.Len(), func(i int) int { return metricsSizer.HistogramDataPointSize(dps.At(i)) },
			func(i int, dst pmetric.Metric) { dps.At(i).MoveTo(dst.Histogram().DataPoints().AppendEmpty()) }}
	case pmetric.MetricTypeExponentialHistogram:
		dps := m.ExponentialHistogram().DataPoints()
		return points{dps.Len(), func(i int) int { return metricsSizer.ExponentialHistogramDataPointSize(dps.At(i)) },
			func(i int, dst pmetric.Metric) {
				dps.At(i).MoveTo(dst.ExponentialHistogram().DataPoints().AppendEmpty())
			}}
	case pmetric.MetricTypeSummary:
		dps := m.Summary().DataPoints()
		return points{dps.Len(), func(i int) int { return metricsSizer.SummaryDataPointSize(dps.At(i)) },
			func(i int, dst pmetric.Metric) { dps.At(i).MoveTo(dst.Summary().DataPoints().AppendEmpty()) }}
	}
	return points{}
}

// emptyLike makes dst a metric like m without data points.
func emptyLike(m, dst pmetric.Metric) {
	dst.SetName(m.Name())
	dst.SetDescription(m.Description())
	dst.SetUnit(m.Unit())
	m.Metadata().CopyTo(dst.Metadata())
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		dst.SetEmptyGauge()
	case pmetric.MetricTypeSum:
		s := dst.SetEmptySum()
		s.SetAggregationTemporality(m.Sum().AggregationTemporality())
		s.SetIsMonotonic(m.Sum().IsMonotonic())
	case pmetric.MetricTypeHistogram:
		dst.SetEmptyHistogram().SetAggregationTemporality(m.Histogram().AggregationTemporality())
	case pmetric.MetricTypeExponentialHistogram:
		dst.SetEmptyExponentialHistogram().SetAggregationTemporality(m.ExponentialHistogram().AggregationTemporality())
	case pmetric.MetricTypeSummary:
		dst.SetEmptySummary()
	}
}

func metricsEnds(md pmetric.Metrics, c *cutter) {
	for _, rm := range md.ResourceMetrics().All() {
		if c.bytes {
			h := metricsSizer.ResourceMetricsSize(rm)
			for _, sm := range rm.ScopeMetrics().All() {
				h -= deltaSize(metricsSizer.ScopeMetricsSize(sm))
			}
			c.open(0, h)
		} else {
			c.open(0, 0)
		}
		for _, sm := range rm.ScopeMetrics().All() {
			if c.bytes {
				h := metricsSizer.ScopeMetricsSize(sm)
				for _, m := range sm.Metrics().All() {
					h -= deltaSize(metricsSizer.MetricSize(m))
				}
				c.open(1, h)
			} else {
				c.open(1, 0)
			}
			for _, m := range sm.Metrics().All() {
				pts := metricPoints(m)
				if c.bytes {
					// The metric's own fields and its data message's framing.
					h := metricsSizer.MetricSize(m)
					for i := range pts.n {
						h -= deltaSize(pts.size(i))
					}
					c.open(2, h)
				} else {
					c.open(2, 0)
				}
				for i := range pts.n {
					if c.bytes {
						c.leaf(pts.size(i))
					} else {
						c.leaf(0)
					}
				}
			}
		}
	}
}

func splitMetrics(md pmetric.Metrics, ends []int) []pmetric.Metrics {
	out := make([]pmetric.Metrics, len(ends))
	for i := range out {
		out[i] = pmetric.NewMetrics()
	}
	k, idx := 0, 0
	for _, rm := range md.ResourceMetrics().All() {
		var dRM pmetric.ResourceMetrics
		inRM := -1
		for _, sm := range rm.ScopeMetrics().All() {
			var dSM pmetric.ScopeMetrics
			inSM := -1
			for _, m := range sm.Metrics().All() {
				var dM pmetric.Metric
				inM := -1
				pts := metricPoints(m)
				for i := range pts.n {
					for idx >= ends[k] {
						k++
					}
					if inRM != k {
						dRM = out[k].ResourceMetrics().AppendEmpty()
						rm.Resource().CopyTo(dRM.Resource())
						dRM.SetSchemaUrl(rm.SchemaUrl())
						inRM, inSM = k, -1
					}
					if inSM != k {
						dSM = dRM.ScopeMetrics().AppendEmpty()
						sm.Scope().CopyTo(dSM.Scope())
						dSM.SetSchemaUrl(sm.SchemaUrl())
						inSM, inM = k, -1
					}
					if inM != k {
						dM = dSM.Metrics().AppendEmpty()
						emptyLike(m, dM)
						inM = k
					}
					pts.moveTo(i, dM)
					idx++
				}
			}
		}
	}
	return out
}
