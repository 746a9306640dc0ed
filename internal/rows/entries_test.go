package rows_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// readAll reads every table of s, failing on the first error.
func readAll(s *rows.Entries) ([][]byte, error) {
	out := make([][]byte, len(rows.Tables))
	for i := range rows.Tables {
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

// Entries streams exactly the COPY data a Batch holds after AddEntry of the
// same entries, raw and compressed, for layouts with and without promoted
// columns, and is reusable after Reset.
func TestEntriesStreamLikeBatch(t *testing.T) {
	genai, err := rows.NewLayout(rows.GenAI())
	require.NoError(t, err)
	var s rows.Entries
	for name, l := range map[string]*rows.Layout{"default": rows.DefaultLayout(), "genai": genai} {
		for _, compress := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/compress=%v", name, compress), func(t *testing.T) {
				src := fixtureBatch(t, l)
				entry, err := src.AppendEntry(nil, compress)
				require.NoError(t, err)
				logsOnly := new(rows.Batch)
				logsOnly.SetLayout(l)
				logsOnly.AddLogs(fixtureLogs())
				second, err := logsOnly.AppendEntry(nil, compress)
				require.NoError(t, err)

				b := new(rows.Batch)
				b.SetLayout(l)
				s.Reset(l)
				for _, e := range [][]byte{entry, second, entry} {
					require.NoError(t, b.AddEntry(e))
					require.NoError(t, s.Add(e))
				}
				require.Equal(t, 3, s.Len())
				require.Equal(t, b.TotalRows(), s.TotalRows())
				got, err := readAll(&s)
				require.NoError(t, err)
				for i := range rows.Tables {
					want, err := b.Data(i)
					require.NoError(t, err)
					require.Equal(t, b.Rows(i), s.Rows(i), rows.Tables[i].Name)
					if want == nil {
						require.Zero(t, s.Rows(i))
						continue
					}
					require.True(t, bytes.Equal(want, got[i]), "table %s differs", rows.Tables[i].Name)
					require.Equal(t, len(want)-len(pgcopy.Header())-len(pgcopy.Trailer()), s.Size(i))
				}
			})
		}
	}
}

// Every entry AddEntry refuses is refused by Entries too, at Add (headers)
// or while its table is read (rows): a damaged entry never reaches
// PostgreSQL as a complete COPY stream. A refusal at Add adds nothing.
func TestEntriesRefuseWhatAddEntryRefuses(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			entry, err := fixtureBatch(t, rows.DefaultLayout()).AppendEntry(nil, compress)
			require.NoError(t, err)
			var bad [][]byte
			for n := 0; n < len(entry); n += 1 + n/7 {
				bad = append(bad, entry[:n])
			}
			desc, _ := rows.EntryDescriptor(entry)
			at := len(desc) + 2
			_, n1 := binary.Uvarint(entry[at+2:])
			_, n2 := binary.Uvarint(entry[at+2+n1:])
			data := at + 2 + n1 + n2
			for _, mutate := range []func([]byte){
				func(b []byte) { b[at+2]++ },         // row count
				func(b []byte) { b[at+1] = 9 },       // codec
				func(b []byte) { b[data+1] ^= 0x80 }, // field count or block
				func(b []byte) { b[data+9] ^= 0x80 },
				func(b []byte) { b[data+20] ^= 0x80 },
				func(b []byte) { b[data+40] ^= 0x80 },
			} {
				b := append([]byte(nil), entry...)
				mutate(b)
				bad = append(bad, b)
			}
			bad = append(bad, append(append([]byte(nil), entry...), 0))

			var s rows.Entries
			atRead := 0
			for k, b := range bad {
				if new(rows.Batch).AddEntry(b) == nil {
					continue // a flip inside a raw value: another value, not damage
				}
				s.Reset(rows.DefaultLayout())
				require.NoError(t, s.Add(entry))
				before := s.TotalRows()
				if err := s.Add(b); err != nil {
					require.ErrorIs(t, err, rows.ErrEntry, "case %d", k)
					require.Equal(t, before, s.TotalRows(), "case %d", k)
					require.Equal(t, 1, s.Len(), "case %d", k)
					continue
				}
				_, err := readAll(&s)
				require.ErrorIs(t, err, rows.ErrEntry, "case %d: damage found while reading", k)
				atRead++
			}
			// Headers parse for the row-count and data flips: found in rows.
			require.Positive(t, atRead)
		})
	}
}
