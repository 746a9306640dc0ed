package entry_test

import (
	"errors"
	"io"
	"testing"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// BenchmarkEntry is the entry format's own cost per span on the bench's
// spans: writing an entry (raw or S2) from an encoded batch, and reading it
// back, into a batch (AddTo) or as a COPY stream (Entries), the spans'
// time range the writer routes them by (Entries.FirstInt64Range), and both.
func BenchmarkEntry(b *testing.B) {
	var enc rows.Batch
	enc.AddTraces(rowstest.BenchTraces())
	perSpan := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rowstest.ItemsPerOp), "ns/span")
	}
	for _, c := range []struct {
		name     string
		compress bool
	}{{"raw", false}, {"s2", true}} {
		ent, err := entry.Append(nil, &enc, c.compress)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("op=append/codec="+c.name, func(b *testing.B) {
			buf := make([]byte, 0, len(ent))
			b.ReportAllocs()
			for b.Loop() {
				if buf, err = entry.Append(buf[:0], &enc, c.compress); err != nil {
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
				if err := entry.AddTo(&dst, ent); err != nil {
					b.Fatal(err)
				}
			}
			perSpan(b)
		})
		for _, op := range []struct {
			name string
			read func(*entry.Entries) error
		}{
			{"range", func(s *entry.Entries) error {
				if _, _, ok := s.FirstInt64Range(tables.IdxSpans); !ok {
					return errors.New("no range")
				}
				return nil
			}},
			{"stream", func(s *entry.Entries) error {
				_, err := io.Copy(io.Discard, s.TableReader(tables.IdxSpans))
				return err
			}},
			// What a flush routed into a partition does.
			{"range-stream", func(s *entry.Entries) error {
				if _, _, ok := s.FirstInt64Range(tables.IdxSpans); !ok {
					return errors.New("no range")
				}
				_, err := io.Copy(io.Discard, s.TableReader(tables.IdxSpans))
				return err
			}},
		} {
			b.Run("op="+op.name+"/codec="+c.name, func(b *testing.B) {
				var s entry.Entries
				b.ReportAllocs()
				for b.Loop() {
					s.Reset(tables.DefaultLayout())
					if err := s.Add(ent); err != nil {
						b.Fatal(err)
					}
					if err := op.read(&s); err != nil {
						b.Fatal(err)
					}
				}
				perSpan(b)
			})
		}
	}
}
