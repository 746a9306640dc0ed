package rows_test

import (
	"io"
	"testing"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// BenchmarkEntry is the entry format's own cost per span on the bench's
// spans: writing an entry (raw or S2) from an encoded batch, and reading it
// back, into a batch (AddEntry) or as a COPY stream (Entries).
func BenchmarkEntry(b *testing.B) {
	var enc rows.Batch
	enc.AddTraces(benchTraces())
	perSpan := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*itemsPerOp), "ns/span")
	}
	for _, c := range []struct {
		name     string
		compress bool
	}{{"raw", false}, {"s2", true}} {
		entry, err := enc.AppendEntry(nil, c.compress)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("op=append/codec="+c.name, func(b *testing.B) {
			buf := make([]byte, 0, len(entry))
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = enc.AppendEntry(buf[:0], c.compress); err != nil {
					b.Fatal(err)
				}
			}
			perSpan(b)
		})
		b.Run("op=add/codec="+c.name, func(b *testing.B) {
			var dst rows.Batch
			b.ReportAllocs()
			for b.Loop() {
				dst.Reset()
				if err := dst.AddEntry(entry); err != nil {
					b.Fatal(err)
				}
			}
			perSpan(b)
		})
		b.Run("op=stream/codec="+c.name, func(b *testing.B) {
			var s rows.Entries
			b.ReportAllocs()
			for b.Loop() {
				s.Reset(rows.DefaultLayout())
				if err := s.Add(entry); err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, s.TableReader(rows.IdxSpans)); err != nil {
					b.Fatal(err)
				}
			}
			perSpan(b)
		})
	}
}
