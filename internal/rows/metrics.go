package rows

import (
	"strconv"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// AddMetrics appends one row per data point, into the table of its point type.
func (b *Batch) AddMetrics(md pmetric.Metrics) {
	c := &b.ctx
	for _, rm := range md.ResourceMetrics().All() {
		c.setResource(rm.Resource(), rm.SchemaUrl())
		for _, sm := range rm.ScopeMetrics().All() {
			c.setScope(sm.Scope(), sm.SchemaUrl())
			for _, m := range sm.Metrics().All() {
				b.addMetric(m)
			}
		}
	}
}

func (b *Batch) addMetric(m pmetric.Metric) {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		for _, dp := range m.Gauge().DataPoints().All() {
			b.addRow(tables.IdxGauge, func() {
				e := b.metricHead(tables.IdxGauge, m, dp.Timestamp(), dp.StartTimestamp(), dp.Attributes(), dp.Exemplars(), uint32(dp.Flags()))
				numberValue(e, dp)
				b.metricTail(e, tables.IdxGauge)
			})
		}
	case pmetric.MetricTypeSum:
		sum := m.Sum()
		for _, dp := range sum.DataPoints().All() {
			b.addRow(tables.IdxSum, func() {
				e := b.metricHead(tables.IdxSum, m, dp.Timestamp(), dp.StartTimestamp(), dp.Attributes(), dp.Exemplars(), uint32(dp.Flags()))
				numberValue(e, dp)
				e.Bool(sum.IsMonotonic())
				enumText(e, sum.AggregationTemporality().String(), int32(sum.AggregationTemporality()))
				b.metricTail(e, tables.IdxSum)
			})
		}
	case pmetric.MetricTypeHistogram:
		h := m.Histogram()
		for _, dp := range h.DataPoints().All() {
			b.addRow(tables.IdxHistogram, func() {
				e := b.metricHead(tables.IdxHistogram, m, dp.Timestamp(), dp.StartTimestamp(), dp.Attributes(), dp.Exemplars(), uint32(dp.Flags()))
				e.Int64(int64(dp.Count()))
				optFloat(e, dp.HasSum(), dp.Sum())
				optFloat(e, dp.HasMin(), dp.Min())
				optFloat(e, dp.HasMax(), dp.Max())
				bc, eb := dp.BucketCounts(), dp.ExplicitBounds()
				e.Int64Array(bc.Len(), func(i int) int64 { return int64(bc.At(i)) })
				e.Float64Array(eb.Len(), eb.At)
				enumText(e, h.AggregationTemporality().String(), int32(h.AggregationTemporality()))
				b.metricTail(e, tables.IdxHistogram)
			})
		}
	case pmetric.MetricTypeExponentialHistogram:
		h := m.ExponentialHistogram()
		for _, dp := range h.DataPoints().All() {
			b.addRow(tables.IdxExpHistogram, func() {
				e := b.metricHead(tables.IdxExpHistogram, m, dp.Timestamp(), dp.StartTimestamp(), dp.Attributes(), dp.Exemplars(), uint32(dp.Flags()))
				e.Int64(int64(dp.Count()))
				optFloat(e, dp.HasSum(), dp.Sum())
				optFloat(e, dp.HasMin(), dp.Min())
				optFloat(e, dp.HasMax(), dp.Max())
				e.Int32(dp.Scale())
				e.Int64(int64(dp.ZeroCount()))
				e.Float64(dp.ZeroThreshold())
				pos, neg := dp.Positive(), dp.Negative()
				pc, nc := pos.BucketCounts(), neg.BucketCounts()
				e.Int32(pos.Offset())
				e.Int64Array(pc.Len(), func(i int) int64 { return int64(pc.At(i)) })
				e.Int32(neg.Offset())
				e.Int64Array(nc.Len(), func(i int) int64 { return int64(nc.At(i)) })
				enumText(e, h.AggregationTemporality().String(), int32(h.AggregationTemporality()))
				b.metricTail(e, tables.IdxExpHistogram)
			})
		}
	case pmetric.MetricTypeSummary:
		for _, dp := range m.Summary().DataPoints().All() {
			b.addRow(tables.IdxSummary, func() {
				e := b.metricHead(tables.IdxSummary, m, dp.Timestamp(), dp.StartTimestamp(), dp.Attributes(), pmetric.NewExemplarSlice(), uint32(dp.Flags()))
				e.Int64(int64(dp.Count()))
				e.Float64(dp.Sum())
				qv := dp.QuantileValues()
				e.Float64Array(qv.Len(), func(i int) float64 { return qv.At(i).Quantile() })
				e.Float64Array(qv.Len(), func(i int) float64 { return qv.At(i).Value() })
				b.metricTail(e, tables.IdxSummary)
			})
		}
	}
}

// metricHead begins a row of table idx and writes metricColumns.
func (b *Batch) metricHead(idx int, m pmetric.Metric, ts, start pcommon.Timestamp, attrs pcommon.Map, ex pmetric.ExemplarSlice, flags uint32) *pgcopy.Encoder {
	e := b.begin(idx)
	timestamp(e, ts)
	optionalTimestamp(e, start)
	b.seriesFrom = len(e.LastRow())
	e.TextOrNull(b.ctx.service)
	e.Text(m.Name())
	e.TextOrNull(m.Description())
	e.TextOrNull(m.Unit())
	b.ctx.jsonMap(e, m.Metadata())
	b.ctx.jsonMap(e, attrs)
	b.seriesTo = len(e.LastRow())
	b.ctx.exemplars(e, ex)
	e.Int32(int32(flags))
	return e
}

// metricTail ends a row of metric table i: contextColumns, then its shard
// key.
func (b *Batch) metricTail(e *pgcopy.Encoder, i int) {
	b.writeContext(e, b.ctx.resJSON)
	b.writeSeriesKey(e, i)
}

func numberValue(e *pgcopy.Encoder, dp pmetric.NumberDataPoint) {
	switch dp.ValueType() {
	case pmetric.NumberDataPointValueTypeInt:
		e.Float64(float64(dp.IntValue()))
		e.Int64(dp.IntValue())
	case pmetric.NumberDataPointValueTypeDouble:
		e.Float64(dp.DoubleValue())
		e.Null()
	default:
		e.Null()
		e.Null()
	}
}

func optFloat(e *pgcopy.Encoder, ok bool, v float64) {
	if ok {
		e.Float64(v)
	} else {
		e.Null()
	}
}

func (c *context) exemplars(e *pgcopy.Encoder, ex pmetric.ExemplarSlice) {
	if ex.Len() == 0 {
		e.Null()
		return
	}
	pos := e.BeginJSONB()
	e.AppendBuf(func(d []byte) []byte {
		d = append(d, '[')
		for i, x := range ex.All() {
			if i > 0 {
				d = append(d, ',')
			}
			d = append(d, `{"time_unix_nano":`...)
			d = strconv.AppendUint(d, uint64(x.Timestamp()), 10)
			switch x.ValueType() {
			case pmetric.ExemplarValueTypeInt:
				d = append(d, `,"as_int":`...)
				d = strconv.AppendInt(d, x.IntValue(), 10)
			case pmetric.ExemplarValueTypeDouble:
				d = append(d, `,"as_double":`...)
				d = jsonb.AppendFloat(d, x.DoubleValue())
			}
			tid, sid := x.TraceID(), x.SpanID()
			if !tid.IsEmpty() {
				d = append(d, `,"trace_id":`...)
				d = appendHexID(d, tid[:])
			}
			if !sid.IsEmpty() {
				d = append(d, `,"span_id":`...)
				d = appendHexID(d, sid[:])
			}
			d = append(d, `,"filtered_attributes":`...)
			d = c.json.AppendMap(d, x.FilteredAttributes())
			d = append(d, '}')
		}
		return append(d, ']')
	})
	e.End(pos)
}
