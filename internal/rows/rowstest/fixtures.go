// Package rowstest holds the pdata fixtures the row, entry and writer tests
// share: every signal, every point type and attribute value type, with the
// awkward cases of each (NUL, invalid UTF-8, escapes, sign bits, absent ids).
package rowstest

import (
	"fmt"
	"math"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

const base = pcommon.Timestamp(1_700_000_000_123_456_789) // non-zero sub-microsecond rest

// clock hands out strictly increasing times with changing sub-microsecond
// parts, so rows can be read back in fixture order by time.
type clock struct{ n uint64 }

func (c *clock) next() pcommon.Timestamp {
	c.n++
	return base + pcommon.Timestamp(c.n*1_000_003_017)
}

var (
	traceA  = pcommon.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}
	traceB  = pcommon.TraceID{0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff}
	spanA   = pcommon.SpanID{0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}
	spanB   = pcommon.SpanID{0xde, 0xad, 0xbe, 0xef, 0xfe, 0xed, 0xfa, 0xce} // sign bit set: a negative bigint
	spanC   = pcommon.SpanID{0, 0, 0, 0, 0, 0, 0, 1}
	bigU32  = uint32(0xfffffff0) // bit-for-bit in a signed integer column
	dirty   = "nul\x00 and bad \xff\xfe utf-8"
	escapes = "quote\" backslash\\ nl\n cr\r tab\t ctl\x01\x1f del\x7f é 🙂 \u2028 \ufffd </script>"
)

// putAllTypes fills m with every attribute value type, nested, and the
// awkward cases of each.
func putAllTypes(m pcommon.Map, salt string) {
	m.PutStr("str", "value-"+salt)
	m.PutStr("str.empty", "")
	m.PutStr("str.escapes", escapes)
	m.PutStr("str.dirty", dirty)
	m.PutStr("str.json", `{"looks":"like json"}`)
	m.PutStr("str.number", "42")
	m.PutStr("nul\x00key \xff", "dirty key")
	m.PutStr("", "empty key")
	// Top-level long strings of span and log attributes are stored apart
	// (tables.LongString): one at the bound, past it, and past it dirty.
	m.PutStr("str.long.256", strings.Repeat("a", 256))
	m.PutStr("str.long.257", strings.Repeat("b", 257))
	m.PutStr("str.long.dirty\x00 \xff", strings.Repeat(escapes+dirty, 6))
	m.PutInt("int", 42)
	m.PutInt("int.neg", -7)
	m.PutInt("int.zero", 0)
	m.PutInt("int.max", math.MaxInt64)
	m.PutInt("int.min", math.MinInt64)
	m.PutDouble("double", 3.25)
	m.PutDouble("double.integral", 3.0)
	m.PutDouble("double.zero", 0)
	m.PutDouble("double.neg", -2.5)
	m.PutDouble("double.million", 3e6)
	m.PutDouble("double.big", 1.2345678901234568e+17)
	m.PutDouble("double.max", math.MaxFloat64)
	m.PutDouble("double.tiny", 1e-7)
	m.PutDouble("double.smallest", math.SmallestNonzeroFloat64)
	m.PutDouble("double.third", 1.0/3)
	m.PutDouble("double.nan", math.NaN())
	m.PutDouble("double.inf", math.Inf(1))
	m.PutDouble("double.neginf", math.Inf(-1))
	m.PutBool("bool.true", true)
	m.PutBool("bool.false", false)
	m.PutEmptyBytes("bytes").FromRaw([]byte{0, 1, 2, 0xfe, 0xff, 'a'})
	m.PutEmptyBytes("bytes.empty")
	m.PutEmpty("empty")
	m.PutEmptyMap("map.empty")
	m.PutEmptySlice("slice.empty")

	inner := m.PutEmptyMap("map")
	inner.PutStr("k", salt)
	inner.PutDouble("d", 1.0)
	inner.PutInt("i", -1)
	deeper := inner.PutEmptyMap("deeper")
	deeper.PutBool("b", true)
	deeper.PutEmpty("e")
	list := deeper.PutEmptySlice("list")
	list.AppendEmpty().SetStr("x")
	list.AppendEmpty().SetDouble(2.0)

	s := m.PutEmptySlice("slice")
	s.AppendEmpty().SetStr("a")
	s.AppendEmpty().SetInt(1)
	s.AppendEmpty().SetDouble(1.0)
	s.AppendEmpty().SetDouble(-4e21)
	s.AppendEmpty().SetBool(false)
	s.AppendEmpty() // empty
	s.AppendEmpty().SetEmptyBytes().FromRaw([]byte("raw"))
	s.AppendEmpty().SetStr(dirty)
	inS := s.AppendEmpty().SetEmptySlice()
	inS.AppendEmpty().SetInt(2)
	inS.AppendEmpty().SetEmptySlice()
	mInS := s.AppendEmpty().SetEmptyMap()
	mInS.PutEmptyBytes("b").FromRaw([]byte{0xff})
	mInS.PutDouble("nan", math.NaN())
}

func setResource(r pcommon.Resource, service string, dropped uint32) {
	r.Attributes().PutStr("service.name", service)
	r.Attributes().PutStr("host.name", "host-"+service)
	putAllTypes(r.Attributes(), "resource-"+service)
	r.SetDroppedAttributesCount(dropped)
}

func setScope(s pcommon.InstrumentationScope, name string) {
	s.SetName(name)
	s.SetVersion("v1.2.3-" + name)
	s.Attributes().PutStr("scope.attr", name)
	s.Attributes().PutDouble("scope.double", 2.0)
	s.Attributes().PutEmptyBytes("scope.bytes").FromRaw([]byte{9})
	s.SetDroppedAttributesCount(bigU32)
}

func Traces() ptrace.Traces {
	var c clock
	td := ptrace.NewTraces()

	rs := td.ResourceSpans().AppendEmpty()
	setResource(rs.Resource(), "checkout", 3)
	rs.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
	ss := rs.ScopeSpans().AppendEmpty()
	setScope(ss.Scope(), "io.example.http")
	ss.SetSchemaUrl("https://opentelemetry.io/schemas/1.24.0")

	sp := ss.Spans().AppendEmpty()
	sp.SetTraceID(traceA)
	sp.SetSpanID(spanB)
	sp.SetParentSpanID(spanA)
	sp.TraceState().FromRaw("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE")
	sp.SetFlags(0x80000301)
	sp.SetName("GET /api/checkout")
	sp.SetKind(ptrace.SpanKindServer)
	start := c.next()
	sp.SetStartTimestamp(start)
	sp.SetEndTimestamp(start + 1_234_567_891)
	putAllTypes(sp.Attributes(), "span")
	sp.SetDroppedAttributesCount(bigU32)
	sp.SetDroppedEventsCount(6)
	sp.SetDroppedLinksCount(7)
	sp.Status().SetCode(ptrace.StatusCodeError)
	sp.Status().SetMessage("boom: " + escapes)
	for i := range 2 {
		ev := sp.Events().AppendEmpty()
		ev.SetTimestamp(start + pcommon.Timestamp(1000*i+1))
		ev.SetName(fmt.Sprintf("event-%d %s", i, escapes))
		putAllTypes(ev.Attributes(), "event")
		ev.SetDroppedAttributesCount(uint32(8 + i))
	}
	for i, id := range []pcommon.TraceID{traceB, traceA} {
		l := sp.Links().AppendEmpty()
		l.SetTraceID(id)
		l.SetSpanID(spanC)
		l.TraceState().FromRaw(fmt.Sprintf("k%d=v%d", i, i))
		l.SetFlags(0x80000101)
		putAllTypes(l.Attributes(), "link")
		l.SetDroppedAttributesCount(uint32(10 + i))
	}

	// A minimal span: absent ids, default kind and status, no events or links.
	sp2 := ss.Spans().AppendEmpty()
	sp2.SetTraceID(traceB)
	sp2.SetName("name with " + dirty)
	sp2.SetKind(ptrace.SpanKindInternal)
	start2 := c.next()
	sp2.SetStartTimestamp(start2)
	sp2.SetEndTimestamp(start2 + 1)

	// A second scope, with nothing set, under the same resource.
	ss2 := rs.ScopeSpans().AppendEmpty()
	sp3 := ss2.Spans().AppendEmpty()
	sp3.SetTraceID(traceA)
	sp3.SetSpanID(spanA)
	sp3.SetName("client call")
	sp3.SetKind(ptrace.SpanKindClient)
	start3 := c.next()
	sp3.SetStartTimestamp(start3)
	sp3.SetEndTimestamp(start3 + 999)
	sp3.Status().SetCode(ptrace.StatusCodeOk)

	// A second resource, without service.name, with the other kinds.
	rs2 := td.ResourceSpans().AppendEmpty()
	rs2.Resource().Attributes().PutInt("pid", 1234)
	for _, k := range []ptrace.SpanKind{ptrace.SpanKindProducer, ptrace.SpanKindConsumer, ptrace.SpanKindUnspecified} {
		sp := rs2.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetName(k.String())
		sp.SetKind(k)
		start := c.next()
		sp.SetStartTimestamp(start)
		sp.SetEndTimestamp(start + 5)
		rs2.ScopeSpans().At(rs2.ScopeSpans().Len() - 1).Scope().SetName("scope-" + k.String())
	}
	return td
}

func Logs() plog.Logs {
	var c clock
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	setResource(rl.Resource(), "billing", 11)
	rl.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
	sl := rl.ScopeLogs().AppendEmpty()
	setScope(sl.Scope(), "io.example.logger")
	sl.SetSchemaUrl("https://opentelemetry.io/schemas/1.25.0")

	full := func(body func(pcommon.Value)) plog.LogRecord {
		l := sl.LogRecords().AppendEmpty()
		l.SetTimestamp(c.next())
		l.SetObservedTimestamp(l.Timestamp() + 777)
		l.SetTraceID(traceA)
		l.SetSpanID(spanB)
		l.SetFlags(plog.LogRecordFlags(0x80000001))
		l.SetSeverityNumber(plog.SeverityNumberWarn3)
		l.SetSeverityText("WARN3")
		l.SetEventName("checkout.failed")
		putAllTypes(l.Attributes(), "log")
		l.SetDroppedAttributesCount(bigU32)
		body(l.Body())
		return l
	}
	full(func(v pcommon.Value) { putAllTypes(v.SetEmptyMap(), "body") })
	full(func(v pcommon.Value) { v.SetStr("plain body " + escapes + dirty) })
	full(func(v pcommon.Value) { v.SetEmptyBytes().FromRaw([]byte{0, 0xff, 'x'}) })
	full(func(v pcommon.Value) {
		s := v.SetEmptySlice()
		s.AppendEmpty().SetStr("a")
		s.AppendEmpty().SetDouble(7.0)
		s.AppendEmpty().SetEmptyMap().PutInt("n", 1)
	})
	full(func(v pcommon.Value) { v.SetInt(-42) })
	full(func(v pcommon.Value) { v.SetDouble(5e6) })
	full(func(v pcommon.Value) { v.SetBool(true) })
	full(func(v pcommon.Value) { v.SetDouble(math.Inf(-1)) })
	full(func(v pcommon.Value) { v.SetStr("") })

	// A record with nothing but its times and an empty body.
	l := sl.LogRecords().AppendEmpty()
	l.SetObservedTimestamp(c.next())
	l.SetTimestamp(l.ObservedTimestamp() - 1)
	return ld
}

func Metrics() pmetric.Metrics {
	var c clock
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	setResource(rm.Resource(), "inventory", 12)
	rm.SetSchemaUrl("https://opentelemetry.io/schemas/1.26.0")
	sm := rm.ScopeMetrics().AppendEmpty()
	setScope(sm.Scope(), "io.example.meter")
	sm.SetSchemaUrl("https://opentelemetry.io/schemas/1.23.0")

	metric := func(name string) pmetric.Metric {
		m := sm.Metrics().AppendEmpty()
		m.SetName(name)
		m.SetDescription("the " + name + " " + escapes)
		m.SetUnit("{request}/s")
		m.Metadata().PutStr("meta", name)
		m.Metadata().PutDouble("meta.double", 10.0)
		return m
	}
	type point interface {
		Attributes() pcommon.Map
		Exemplars() pmetric.ExemplarSlice
		SetTimestamp(pcommon.Timestamp)
		SetStartTimestamp(pcommon.Timestamp)
		SetFlags(pmetric.DataPointFlags)
	}
	fill := func(p point, salt string) {
		ts := c.next()
		p.SetTimestamp(ts)
		p.SetStartTimestamp(ts - 60_000_000_001)
		p.SetFlags(pmetric.DataPointFlags(0x80000001))
		putAllTypes(p.Attributes(), salt)
		ex := p.Exemplars().AppendEmpty()
		ex.SetTimestamp(ts - 1)
		ex.SetIntValue(-17)
		ex.SetTraceID(traceA)
		ex.SetSpanID(spanB)
		putAllTypes(ex.FilteredAttributes(), "exemplar")
		ex = p.Exemplars().AppendEmpty()
		ex.SetTimestamp(ts - 2)
		ex.SetDoubleValue(4e6)
		ex.SetTraceID(traceB)
		ex.SetSpanID(spanA)
		ex.FilteredAttributes().PutStr("only", "one")
		ex = p.Exemplars().AppendEmpty() // no ids, no attributes
		ex.SetTimestamp(ts - 3)
		ex.SetDoubleValue(0.125)
	}

	g := metric("gauge.int").SetEmptyGauge()
	dp := g.DataPoints().AppendEmpty()
	fill(dp, "gauge.int")
	dp.SetIntValue(math.MinInt64 + 1)
	dp = g.DataPoints().AppendEmpty()
	fill(dp, "gauge.int.2")
	dp.SetIntValue(123)

	g = metric("gauge.double").SetEmptyGauge()
	dp = g.DataPoints().AppendEmpty()
	fill(dp, "gauge.double")
	dp.SetDoubleValue(7.0)
	dp = g.DataPoints().AppendEmpty()
	fill(dp, "gauge.double.nan")
	dp.SetDoubleValue(math.NaN()) // float8 holds NaN itself
	dp = g.DataPoints().AppendEmpty()
	dp.SetTimestamp(c.next()) // no value, no start time

	s := metric("sum.monotonic").SetEmptySum()
	s.SetIsMonotonic(true)
	s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	dp = s.DataPoints().AppendEmpty()
	fill(dp, "sum")
	dp.SetIntValue(9_007_199_254_740_993) // not exact as a double
	s = metric("sum.delta").SetEmptySum()
	s.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	dp = s.DataPoints().AppendEmpty()
	fill(dp, "sum.delta")
	dp.SetDoubleValue(-0.5)

	h := metric("histogram").SetEmptyHistogram()
	h.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	hp := h.DataPoints().AppendEmpty()
	fill(hp, "histogram")
	hp.SetCount(math.MaxUint64) // bit for bit in bigint
	hp.SetSum(1e6)
	hp.SetMin(-1.5)
	hp.SetMax(math.Inf(1))
	hp.BucketCounts().FromRaw([]uint64{1, 0, math.MaxUint64 - 1, 4})
	hp.ExplicitBounds().FromRaw([]float64{-1, 0, 2.5})
	hp = h.DataPoints().AppendEmpty() // no sum/min/max, no buckets
	fill(hp, "histogram.empty")
	hp.SetCount(0)

	e := metric("exp.histogram").SetEmptyExponentialHistogram()
	e.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	ep := e.DataPoints().AppendEmpty()
	fill(ep, "exp")
	ep.SetCount(21)
	ep.SetSum(42.0)
	ep.SetMin(0.5)
	ep.SetMax(9.75)
	ep.SetScale(-3)
	ep.SetZeroCount(2)
	ep.SetZeroThreshold(1e-9)
	ep.Positive().SetOffset(-5)
	ep.Positive().BucketCounts().FromRaw([]uint64{1, 2, 3})
	ep.Negative().SetOffset(7)
	ep.Negative().BucketCounts().FromRaw([]uint64{4, 5})

	sum := metric("summary").SetEmptySummary()
	sp := sum.DataPoints().AppendEmpty()
	ts := c.next()
	sp.SetTimestamp(ts)
	sp.SetStartTimestamp(ts - 1)
	sp.SetFlags(1)
	putAllTypes(sp.Attributes(), "summary")
	sp.SetCount(100)
	sp.SetSum(12.5)
	for _, q := range [][2]float64{{0, 0.1}, {0.5, 3}, {0.99, 9.9}, {1, 12}} {
		qv := sp.QuantileValues().AppendEmpty()
		qv.SetQuantile(q[0])
		qv.SetValue(q[1])
	}
	return md
}
