package rowstest

// The benchmarks' workload: realistic spans, logs and metric points (an
// instrumented HTTP service), ItemsPerOp of each per batch.

import (
	"fmt"
	"strings"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// ItemsPerOp is the number of spans, log records or metric points one
// benchmark op encodes: the exporter sees batches, and the resource and scope
// are encoded once per batch, so per-item cost is measured over a batch.
const ItemsPerOp = 100

const benchTime = pcommon.Timestamp(1_700_000_000_123_456_789)

func benchResource(r pcommon.Resource) {
	a := r.Attributes()
	a.PutStr("service.name", "checkout")
	a.PutStr("service.namespace", "shop")
	a.PutStr("service.version", "2.14.1")
	a.PutStr("service.instance.id", "627cc493-f310-47de-96bd-71410b7dec09")
	a.PutStr("deployment.environment.name", "production")
	a.PutStr("host.name", "ip-10-0-12-34.eu-west-1.compute.internal")
	a.PutStr("host.arch", "amd64")
	a.PutStr("k8s.namespace.name", "shop")
	a.PutStr("k8s.pod.name", "checkout-7d9c8b7f5-x2x9q")
	a.PutStr("k8s.node.name", "ip-10-0-12-34.eu-west-1.compute.internal")
	a.PutStr("cloud.provider", "aws")
	a.PutStr("cloud.region", "eu-west-1")
	a.PutStr("telemetry.sdk.name", "opentelemetry")
	a.PutStr("telemetry.sdk.language", "go")
	a.PutStr("telemetry.sdk.version", "1.47.0")
	a.PutInt("process.pid", 4242)
}

func benchScope(s pcommon.InstrumentationScope) {
	s.SetName("go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp")
	s.SetVersion("0.62.0")
}

// benchSpanAttrs is a server span's worth of semantic-convention attributes:
// 20 of them, with the long URL, user agent and SQL that make real rows big.
func benchSpanAttrs(m pcommon.Map, i int) {
	m.PutStr("http.request.method", "POST")
	m.PutStr("http.route", "/api/v2/carts/{cart_id}/checkout")
	m.PutStr("url.full", fmt.Sprintf("https://shop.example.com/api/v2/carts/%d/checkout?currency=EUR&locale=de-DE&promo=WINTER2025&ref=%s", 1000+i, strings.Repeat("a1b2c3", 12)))
	m.PutStr("url.scheme", "https")
	m.PutStr("url.path", fmt.Sprintf("/api/v2/carts/%d/checkout", 1000+i))
	m.PutStr("server.address", "shop.example.com")
	m.PutInt("server.port", 443)
	m.PutStr("client.address", "203.0.113.77")
	m.PutInt("client.port", 51234)
	m.PutStr("network.protocol.version", "1.1")
	m.PutStr("user_agent.original", "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36")
	m.PutInt("http.response.status_code", 200)
	m.PutInt("http.request.body.size", 1834)
	m.PutInt("http.response.body.size", 5120)
	m.PutStr("db.system.name", "postgresql")
	m.PutStr("db.query.text", "SELECT c.id, c.customer_id, c.currency, c.created_at, c.updated_at, c.shipping_address_id, c.billing_address_id, "+
		"i.sku, i.quantity, i.unit_price, i.discount, i.position, p.name, p.description, p.tax_class, p.weight_grams, "+
		"s.warehouse_id, s.available, s.reserved FROM carts c JOIN cart_items i ON i.cart_id = c.id "+
		"JOIN products p ON p.sku = i.sku LEFT JOIN stock s ON s.sku = i.sku AND s.region = $2 "+
		"WHERE c.id = $1 AND c.status = 'open' AND p.active AND (i.discount IS NULL OR i.discount < p.max_discount) "+
		"ORDER BY i.position, p.name LIMIT 200")
	m.PutDouble("app.cart.total", 149.9)
	m.PutBool("app.cart.has_promo", true)
	m.PutStr("app.user.id", fmt.Sprintf("user-%08d", i))
	tags := m.PutEmptySlice("app.cart.tags")
	for _, s := range []string{"gift", "express", "eu"} {
		tags.AppendEmpty().SetStr(s)
	}
}

func BenchTraces() ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	benchResource(rs.Resource())
	ss := rs.ScopeSpans().AppendEmpty()
	benchScope(ss.Scope())
	for i := range ItemsPerOp {
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		s.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i)})
		s.SetParentSpanID(pcommon.SpanID{8, 7, 6, 5, 4, 3, 2, 1})
		s.SetName("POST /api/v2/carts/{cart_id}/checkout")
		s.SetKind(ptrace.SpanKindServer)
		start := benchTime + pcommon.Timestamp(i)*1_000_017
		s.SetStartTimestamp(start)
		s.SetEndTimestamp(start + 48_123_457)
		benchSpanAttrs(s.Attributes(), i)
		for j := range 2 {
			ev := s.Events().AppendEmpty()
			ev.SetTimestamp(start + pcommon.Timestamp(j+1)*1_000_000)
			ev.SetName("cart.validated")
			ev.Attributes().PutInt("app.items", 3)
			ev.Attributes().PutStr("app.stage", "pricing")
			ev.Attributes().PutStr("app.detail", "prices recomputed from catalogue snapshot 2025-11-29T10:00:00Z; promo WINTER2025 applied to 2 of 3 items")
		}
		l := s.Links().AppendEmpty()
		l.SetTraceID(pcommon.TraceID{9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, 9, byte(i)})
		l.SetSpanID(pcommon.SpanID{9, 9, 9, 9, 9, 9, 9, 9})
		l.Attributes().PutStr("messaging.operation.type", "receive")
		s.Status().SetCode(ptrace.StatusCodeOk)
	}
	return td
}

func BenchLogs() plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	benchResource(rl.Resource())
	sl := rl.ScopeLogs().AppendEmpty()
	benchScope(sl.Scope())
	for i := range ItemsPerOp {
		l := sl.LogRecords().AppendEmpty()
		l.SetTimestamp(benchTime + pcommon.Timestamp(i)*1_000_017)
		l.SetObservedTimestamp(l.Timestamp() + 1234)
		l.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, byte(i)})
		l.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, byte(i)})
		l.SetSeverityNumber(plog.SeverityNumberInfo)
		l.SetSeverityText("INFO")
		l.Body().SetStr(fmt.Sprintf("checkout completed for cart %d: 3 items, total 149.90 EUR, payment authorised by provider stripe (intent pi_%s)", 1000+i, strings.Repeat("3Nf", 8)))
		a := l.Attributes()
		a.PutStr("code.function.name", "checkout.(*Service).Complete")
		a.PutStr("code.file.path", "/src/internal/checkout/service.go")
		a.PutInt("code.line.number", 212)
		a.PutStr("app.cart.id", fmt.Sprint(1000+i))
		a.PutDouble("app.cart.total", 149.9)
		a.PutStr("app.payment.provider", "stripe")
		a.PutBool("app.cart.has_promo", true)
		a.PutStr("app.user.id", fmt.Sprintf("user-%08d", i))
	}
	return ld
}

// BenchMetrics has ItemsPerOp points spread over the five point types, each
// with a few attributes, as a typical runtime/HTTP instrumentation sends.
func BenchMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	benchResource(rm.Resource())
	sm := rm.ScopeMetrics().AppendEmpty()
	benchScope(sm.Scope())
	attrs := func(m pcommon.Map, i int) {
		m.PutStr("http.request.method", "GET")
		m.PutStr("http.route", fmt.Sprintf("/api/v2/route/%d", i%10))
		m.PutInt("http.response.status_code", 200)
		m.PutStr("server.address", "shop.example.com")
	}
	ts := func(i int) pcommon.Timestamp { return benchTime + pcommon.Timestamp(i)*1_000_017 }
	per := ItemsPerOp / 5

	g := sm.Metrics().AppendEmpty()
	g.SetName("process.memory.usage")
	g.SetUnit("By")
	gauge := g.SetEmptyGauge()
	for i := range per {
		dp := gauge.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(i))
		attrs(dp.Attributes(), i)
		dp.SetIntValue(int64(123456789 + i))
	}
	s := sm.Metrics().AppendEmpty()
	s.SetName("http.server.request.count")
	sum := s.SetEmptySum()
	sum.SetIsMonotonic(true)
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range per {
		dp := sum.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(i))
		dp.SetStartTimestamp(benchTime - 60_000_000_000)
		attrs(dp.Attributes(), i)
		dp.SetDoubleValue(float64(i) * 1.5)
	}
	h := sm.Metrics().AppendEmpty()
	h.SetName("http.server.request.duration")
	h.SetUnit("s")
	hist := h.SetEmptyHistogram()
	hist.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	for i := range per {
		dp := hist.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(i))
		dp.SetStartTimestamp(benchTime - 60_000_000_000)
		attrs(dp.Attributes(), i)
		dp.SetCount(1000)
		dp.SetSum(12.5)
		dp.SetMin(0.001)
		dp.SetMax(2.5)
		dp.ExplicitBounds().FromRaw([]float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10})
		dp.BucketCounts().FromRaw([]uint64{10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 40, 10})
		ex := dp.Exemplars().AppendEmpty()
		ex.SetTimestamp(ts(i))
		ex.SetDoubleValue(0.042)
		ex.SetTraceID(pcommon.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
		ex.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, 8})
	}
	e := sm.Metrics().AppendEmpty()
	e.SetName("rpc.server.duration")
	exp := e.SetEmptyExponentialHistogram()
	exp.SetAggregationTemporality(pmetric.AggregationTemporalityDelta)
	for i := range per {
		dp := exp.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(i))
		dp.SetStartTimestamp(ts(i) - 10_000_000_000)
		attrs(dp.Attributes(), i)
		dp.SetCount(500)
		dp.SetSum(40)
		dp.SetScale(3)
		dp.SetZeroCount(1)
		dp.Positive().SetOffset(-10)
		dp.Positive().BucketCounts().FromRaw([]uint64{1, 4, 9, 16, 25, 36, 49, 64, 81, 100, 81, 34})
	}
	q := sm.Metrics().AppendEmpty()
	q.SetName("db.client.latency")
	summary := q.SetEmptySummary()
	for i := range per {
		dp := summary.DataPoints().AppendEmpty()
		dp.SetTimestamp(ts(i))
		attrs(dp.Attributes(), i)
		dp.SetCount(100)
		dp.SetSum(3.5)
		for _, v := range [][2]float64{{0.5, 0.02}, {0.9, 0.05}, {0.99, 0.2}} {
			qv := dp.QuantileValues().AppendEmpty()
			qv.SetQuantile(v[0])
			qv.SetValue(v[1])
		}
	}
	return md
}
