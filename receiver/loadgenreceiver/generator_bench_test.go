package loadgenreceiver

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// The generator must outrun the exporter it feeds; these report items/s
// and the OTLP bytes made per second on one core.

func BenchmarkNextTraces(b *testing.B) {
	var g *Generator
	items, bytes := 0, 0
	for b.Loop() {
		if g == nil {
			g, _ = NewWorkerGenerator(testConfig(1_000_000), testStart, 0)
		}
		td, _ := g.NextTraces()
		items += td.SpanCount()
		bytes += (&ptrace.ProtoMarshaler{}).TracesSize(td)
	}
	report(b, items, bytes)
}

func BenchmarkNextMetrics(b *testing.B) {
	var g *Generator
	items, bytes := 0, 0
	for b.Loop() {
		if g == nil {
			g, _ = NewWorkerGenerator(testConfig(1_000_000), testStart, 0)
		}
		md, _ := g.NextMetrics()
		items += md.DataPointCount()
		bytes += (&pmetric.ProtoMarshaler{}).MetricsSize(md)
	}
	report(b, items, bytes)
}

func BenchmarkNextLogs(b *testing.B) {
	var g *Generator
	items, bytes := 0, 0
	for b.Loop() {
		if g == nil {
			g, _ = NewWorkerGenerator(testConfig(1_000_000), testStart, 0)
		}
		ld, _ := g.NextLogs()
		items += ld.LogRecordCount()
		bytes += (&plog.ProtoMarshaler{}).LogsSize(ld)
	}
	report(b, items, bytes)
}

func report(b *testing.B, items, bytes int) {
	s := b.Elapsed().Seconds()
	b.ReportMetric(float64(items)/s, "items/s")
	b.ReportMetric(float64(bytes)/s/(1<<20), "MiB/s")
	b.ReportMetric(float64(bytes)/float64(items), "B/item")
}
