package entry_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// readAll reads every table of s, failing on the first error.
func readAll(s *entry.Entries) ([][]byte, error) {
	out := make([][]byte, len(tables.Tables))
	for i := range tables.Tables {
		r := s.TableReader(i)
		// One byte at a time: records must join across any read boundary.
		data, err := io.ReadAll(iotest.OneByteReader(r))
		if err != nil {
			return nil, err
		}
		if r.Err() != nil {
			return nil, r.Err()
		}
		out[i] = data
	}
	return out, nil
}

// Entries streams exactly the COPY data a Batch holds after AddTo of the
// same entries, raw and compressed, for layouts with and without promoted
// columns, whether or not the first column's range was read first (the
// records are then read from what that decompressed), and is reusable
// after Reset.
func TestEntriesStreamLikeBatch(t *testing.T) {
	genai, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	var s entry.Entries
	for name, l := range map[string]*tables.Layout{"default": tables.DefaultLayout(), "genai": genai} {
		for _, c := range []struct{ compress, ranged bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			compress := c.compress
			t.Run(fmt.Sprintf("%s/compress=%v/ranged=%v", name, compress, c.ranged), func(t *testing.T) {
				src := fixtureBatch(t, l)
				ent, err := entry.Append(nil, src, compress)
				require.NoError(t, err)
				logsOnly := new(rows.Batch)
				logsOnly.SetLayout(l)
				logsOnly.AddLogs(rowstest.Logs())
				second, err := entry.Append(nil, logsOnly, compress)
				require.NoError(t, err)

				b := new(rows.Batch)
				b.SetLayout(l)
				s.Reset(l)
				for _, e := range [][]byte{ent, second, ent} {
					require.NoError(t, entry.AddTo(b, e))
					require.NoError(t, s.Add(e))
				}
				require.Equal(t, 3, s.Len())
				require.Equal(t, b.TotalRows(), s.TotalRows())
				if c.ranged {
					for _, i := range []int{tables.IdxSpans, tables.IdxLogs} {
						data, err := b.Data(i)
						require.NoError(t, err)
						tuples := data[len(pgcopy.Header()) : len(data)-len(pgcopy.Trailer())]
						wantLo, wantHi, wantOK := pgcopy.FirstInt64Range(tuples, len(l.Table(i).Columns))
						require.True(t, wantOK)
						lo, hi, ok := s.FirstInt64Range(i)
						require.True(t, ok, tables.Tables[i].Name)
						require.Equal(t, [2]int64{wantLo, wantHi}, [2]int64{lo, hi}, tables.Tables[i].Name)
					}
				}
				got, err := readAll(&s)
				require.NoError(t, err)
				for i := range tables.Tables {
					want, err := b.Data(i)
					require.NoError(t, err)
					require.Equal(t, b.Rows(i), s.Rows(i), tables.Tables[i].Name)
					if want == nil {
						require.Zero(t, s.Rows(i))
						continue
					}
					require.True(t, bytes.Equal(want, got[i]), "table %s differs", tables.Tables[i].Name)
					require.Equal(t, len(want)-len(pgcopy.Header())-len(pgcopy.Trailer()), s.Size(i))
				}
			})
		}
	}
}

// Every entry AddTo refuses is refused by Entries too, at Add (headers)
// or while its table is read (rows), whether or not the first column's
// range was read first (it then says it has none): a damaged entry never
// reaches PostgreSQL as a complete COPY stream. A refusal at Add adds
// nothing.
func TestEntriesRefuseWhatAddToRefuses(t *testing.T) {
	for _, c := range []struct{ compress, ranged bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		compress := c.compress
		t.Run(fmt.Sprintf("compress=%v/ranged=%v", compress, c.ranged), func(t *testing.T) {
			ent, err := entry.Append(nil, fixtureBatch(t, tables.DefaultLayout()), compress)
			require.NoError(t, err)
			var bad [][]byte
			for n := 0; n < len(ent); n += 1 + n/7 {
				bad = append(bad, ent[:n])
			}
			desc, _ := entry.Descriptor(ent)
			at := len(desc) + 2
			_, n1 := binary.Uvarint(ent[at+2:])
			_, n2 := binary.Uvarint(ent[at+2+n1:])
			data := at + 2 + n1 + n2
			for _, mutate := range []func([]byte){
				func(b []byte) { b[at+2]++ },         // row count
				func(b []byte) { b[at+1] = 9 },       // codec
				func(b []byte) { b[data+1] ^= 0x80 }, // field count or block
				func(b []byte) { b[data+9] ^= 0x80 },
				func(b []byte) { b[data+20] ^= 0x80 },
				func(b []byte) { b[data+40] ^= 0x80 },
			} {
				b := append([]byte(nil), ent...)
				mutate(b)
				bad = append(bad, b)
			}
			bad = append(bad, append(append([]byte(nil), ent...), 0))

			var s entry.Entries
			atRead := 0
			for k, b := range bad {
				if entry.AddTo(new(rows.Batch), b) == nil {
					continue // a flip inside a raw value: another value, not damage
				}
				s.Reset(tables.DefaultLayout())
				require.NoError(t, s.Add(ent))
				before := s.TotalRows()
				if err := s.Add(b); err != nil {
					require.ErrorIs(t, err, entry.ErrMalformed, "case %d", k)
					require.Equal(t, before, s.TotalRows(), "case %d", k)
					require.Equal(t, 1, s.Len(), "case %d", k)
					continue
				}
				if c.ranged {
					for i := range tables.Tables {
						s.FirstInt64Range(i)
					}
				}
				_, err := readAll(&s)
				require.ErrorIs(t, err, entry.ErrMalformed, "case %d: damage found while reading", k)
				atRead++
			}
			// Headers parse for the row-count and data flips: found in rows.
			require.Positive(t, atRead)
		})
	}
}
