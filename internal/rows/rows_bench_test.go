package rows_test

import (
	"io"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// benchAdd runs add on a reused Batch, as the exporter does, and reports the
// cost and encoded size per item next to the per-batch numbers.
func benchAdd(b *testing.B, add func(*rows.Batch)) {
	var batch rows.Batch
	add(&batch)
	size := 0
	for i := range tables.Tables {
		data, err := batch.Data(i)
		if err != nil {
			b.Fatal(err)
		}
		size += len(data)
	}
	if n := signalRows(&batch); n != rowstest.ItemsPerOp {
		b.Fatalf("%d rows per op, want %d", n, rowstest.ItemsPerOp)
	}
	b.SetBytes(int64(size))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		batch.Reset()
		add(&batch)
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rowstest.ItemsPerOp), "ns/item")
	b.ReportMetric(float64(size)/rowstest.ItemsPerOp, "B/item")
}

func BenchmarkAddTraces(b *testing.B) {
	td := rowstest.BenchTraces()
	benchAdd(b, func(batch *rows.Batch) { batch.AddTraces(td) })
}

func BenchmarkAddLogs(b *testing.B) {
	ld := rowstest.BenchLogs()
	benchAdd(b, func(batch *rows.Batch) { batch.AddLogs(ld) })
}

func BenchmarkAddMetrics(b *testing.B) {
	md := rowstest.BenchMetrics()
	benchAdd(b, func(batch *rows.Batch) { batch.AddMetrics(md) })
}

// signalRows are a batch's spans, log records and data points: its rows
// without the context dictionary's, one per new resource and scope.
func signalRows(b *rows.Batch) int {
	return b.TotalRows() - b.Rows(tables.IdxContexts)
}

// BenchmarkRedisPath is the CPU a request costs on its way through Redis,
// per span, both ways the exporter has carried it: "otlp" is what it did
// before entries carried rows (marshal the request to OTLP protobuf on
// Consume, unmarshal it in the flush worker and encode its rows there);
// "rows" and "rows+s2" encode on Consume, write the entry (compressed with
// S2 or not) and append it to the worker's batch. Redis's own cost, and the
// kernel's for each byte sent, come on top: the entry's size is reported.
func BenchmarkRedisPath(b *testing.B) {
	td := rowstest.BenchTraces()
	run := func(b *testing.B, one func(enc, flush *rows.Batch, buf []byte) (int, []byte)) {
		var enc, flush rows.Batch
		var buf []byte
		size := 0
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			enc.Reset()
			flush.Reset()
			size, buf = one(&enc, &flush, buf)
		}
		b.StopTimer()
		if n := signalRows(&flush); n != rowstest.ItemsPerOp {
			b.Fatalf("%d rows reached the batch, want %d", n, rowstest.ItemsPerOp)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rowstest.ItemsPerOp), "ns/item")
		b.ReportMetric(float64(size)/rowstest.ItemsPerOp, "entry-B/item")
	}
	b.Run("path=otlp", func(b *testing.B) {
		run(b, func(_, flush *rows.Batch, buf []byte) (int, []byte) {
			payload, err := (&ptrace.ProtoMarshaler{}).MarshalTraces(td)
			if err != nil {
				b.Fatal(err)
			}
			got, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(payload)
			if err != nil {
				b.Fatal(err)
			}
			flush.AddTraces(got)
			return len(payload), buf
		})
	})
	for _, compress := range []bool{false, true} {
		name := "path=rows"
		if compress {
			name = "path=rows+s2"
		}
		b.Run(name, func(b *testing.B) {
			run(b, func(enc, flush *rows.Batch, buf []byte) (int, []byte) {
				enc.AddTraces(td)
				ent, err := entry.Append(buf[:0], enc, compress)
				if err != nil {
					b.Fatal(err)
				}
				if err := entry.AddTo(flush, ent); err != nil {
					b.Fatal(err)
				}
				return len(ent), ent
			})
		})
	}
}

// BenchmarkFlush is a flush worker's cost per span for a flush of 50
// compressed entries of 100 spans each, from the entries to the bytes
// PostgreSQL reads: "batch" decompresses every entry into one batch (which
// grows to the whole flush) and reads its COPY stream; "stream" reads each
// table straight from the entries, one record decompressed at a time
// (entry.Entries, the flush path). Both check checksums and row shapes.
func BenchmarkFlush(b *testing.B) {
	td := rowstest.BenchTraces()
	var enc rows.Batch
	enc.AddTraces(td)
	ent, err := entry.Append(nil, &enc, true)
	if err != nil {
		b.Fatal(err)
	}
	const perFlush = 50
	run := func(b *testing.B, flush func() int) {
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if n := flush(); n != perFlush*rowstest.ItemsPerOp {
				b.Fatalf("%d rows", n)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*perFlush*rowstest.ItemsPerOp), "ns/span")
	}
	b.Run("path=batch", func(b *testing.B) {
		var batch rows.Batch
		run(b, func() int {
			batch.Reset()
			for range perFlush {
				if err := entry.AddTo(&batch, ent); err != nil {
					b.Fatal(err)
				}
			}
			data, err := batch.Data(tables.IdxSpans)
			if err != nil || len(data) == 0 {
				b.Fatal(err)
			}
			return batch.Rows(tables.IdxSpans)
		})
	})
	b.Run("path=stream", func(b *testing.B) {
		var s entry.Entries
		run(b, func() int {
			s.Reset(tables.DefaultLayout())
			for range perFlush {
				if err := s.Add(ent); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := io.Copy(io.Discard, s.TableReader(tables.IdxSpans)); err != nil {
				b.Fatal(err)
			}
			return s.Rows(tables.IdxSpans)
		})
	})
}

// BenchmarkLoadgen is the bench's own workload as the exporter's Consume
// sees it: loadgen's spans, metrics and logs (seed 1) encoded with the genai
// preset's promoted columns and the default limits, then written as an S2
// entry. "encode" is the
// rows alone, "entry" adds entry.Append.
func BenchmarkLoadgen(b *testing.B) {
	lay, err := tables.NewLayout(tables.GenAI())
	if err != nil {
		b.Fatal(err)
	}
	cfg := *loadgenreceiver.NewFactory().CreateDefaultConfig().(*loadgenreceiver.Config)
	cfg.Users, cfg.Concurrency = 4, 1
	g, err := loadgenreceiver.NewWorkerGenerator(cfg, time.Unix(1_700_000_000, 0), 0)
	if err != nil {
		b.Fatal(err)
	}
	var td []ptrace.Traces
	for t, ok := g.NextTraces(); ok; t, ok = g.NextTraces() {
		td = append(td, t)
	}
	var md []pmetric.Metrics
	for m, ok := g.NextMetrics(); ok; m, ok = g.NextMetrics() {
		md = append(md, m)
	}
	var ld []plog.Logs
	for l, ok := g.NextLogs(); ok; l, ok = g.NextLogs() {
		ld = append(ld, l)
	}
	for _, sig := range []struct {
		name string
		n    int
		add  func(*rows.Batch, int)
	}{
		{"traces", len(td), func(bt *rows.Batch, i int) { bt.AddTraces(td[i]) }},
		{"metrics", len(md), func(bt *rows.Batch, i int) { bt.AddMetrics(md[i]) }},
		{"logs", len(ld), func(bt *rows.Batch, i int) { bt.AddLogs(ld[i]) }},
	} {
		for _, withEntry := range []bool{false, true} {
			name := "signal=" + sig.name + "/op=encode"
			if withEntry {
				name = "signal=" + sig.name + "/op=entry"
			}
			b.Run(name, func(b *testing.B) {
				var batch rows.Batch
				batch.SetLayout(lay)
				// The exporter's default limits.
				batch.SetLimits(rows.Limits{MaxValue: 64 << 10, MaxRow: 1 << 20})
				var buf []byte
				items := 0
				b.ReportAllocs()
				for i := 0; b.Loop(); i++ {
					batch.Reset()
					sig.add(&batch, i%sig.n)
					items += signalRows(&batch)
					if withEntry {
						if buf, err = entry.Append(buf[:0], &batch, true); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(items), "ns/item")
			})
		}
	}
}
