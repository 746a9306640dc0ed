package rows_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

func fixtureBatch(t *testing.T, l *rows.Layout) *rows.Batch {
	t.Helper()
	b := new(rows.Batch)
	b.SetLayout(l)
	b.AddTraces(fixtureTraces())
	b.AddLogs(fixtureLogs())
	b.AddMetrics(fixtureMetrics())
	for i := range rows.Tables {
		require.Positive(t, b.Rows(i), "the fixture fills table %s", rows.Tables[i].Name)
	}
	return b
}

// An entry carries a batch's COPY streams byte for byte, for the default
// layout and one with promoted columns, and adds to a batch that has rows.
func TestEntryRoundTrip(t *testing.T) {
	genai, err := rows.NewLayout(rows.GenAI())
	require.NoError(t, err)
	for name, l := range map[string]*rows.Layout{"default": rows.DefaultLayout(), "genai": genai} {
		for _, compress := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/compress=%v", name, compress), func(t *testing.T) {
				src := fixtureBatch(t, l)
				entry, err := src.AppendEntry(nil, compress)
				require.NoError(t, err)
				desc, err := rows.EntryDescriptor(entry)
				require.NoError(t, err)
				require.Equal(t, l.Descriptor(), desc)

				dst := new(rows.Batch)
				dst.SetLayout(l)
				require.NoError(t, dst.AddEntry(entry))
				for i := range rows.Tables {
					want, err := src.Data(i)
					require.NoError(t, err)
					got, err := dst.Data(i)
					require.NoError(t, err)
					require.True(t, bytes.Equal(want, got), "table %s differs", rows.Tables[i].Name)
				}

				// A second entry appends: every row twice, each addressable.
				require.NoError(t, dst.AddEntry(entry))
				for i := range rows.Tables {
					n := src.Rows(i)
					require.Equal(t, 2*n, dst.Rows(i))
					require.Equal(t, src.Tuples(i, 0, n), dst.Tuples(i, n, 2*n))
					require.Equal(t, src.Tuples(i, n-1, n), dst.Tuples(i, 2*n-1, 2*n))
				}
			})
		}
	}
}

// A reader with another layout refuses the entry; ParseLayout rebuilds the
// writer's layout from the descriptor, and a batch of it takes the entry.
func TestEntryOtherLayout(t *testing.T) {
	genai, err := rows.NewLayout(rows.GenAI())
	require.NoError(t, err)
	entry, err := fixtureBatch(t, genai).AppendEntry(nil, true)
	require.NoError(t, err)

	own := new(rows.Batch)
	require.ErrorIs(t, own.AddEntry(entry), rows.ErrEntry)
	require.Zero(t, own.TotalRows())

	desc, err := rows.EntryDescriptor(entry)
	require.NoError(t, err)
	parsed, err := rows.ParseLayout(desc)
	require.NoError(t, err)
	require.Equal(t, genai.Descriptor(), parsed.Descriptor())
	for i := range rows.Tables {
		require.Equal(t, genai.Table(i).Columns, parsed.Table(i).Columns)
		require.Equal(t, genai.Table(i).Kinds, parsed.Table(i).Kinds)
	}
	b := new(rows.Batch)
	b.SetLayout(parsed)
	require.NoError(t, b.AddEntry(entry))
	require.Equal(t, fixtureBatch(t, genai).TotalRows(), b.TotalRows())
	// Rejected rows render with the entry's columns.
	js, ok := parsed.AppendRowJSON(nil, rows.IdxSpans, b.Tuples(rows.IdxSpans, 0, 1))
	require.True(t, ok)
	require.Contains(t, string(js), `"gen_ai_request_model":`)
}

// Every cut or corrupted entry is refused whole, raw or compressed: the
// batch keeps exactly the rows it had.
func TestEntryMalformed(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			entry, err := fixtureBatch(t, rows.DefaultLayout()).AppendEntry(nil, compress)
			require.NoError(t, err)
			b := new(rows.Batch)
			require.NoError(t, b.AddEntry(entry))
			before := b.TotalRows()
			want := make([][]byte, len(rows.Tables))
			for i := range rows.Tables {
				d, _ := b.Data(i)
				want[i] = append([]byte(nil), d...)
			}
			check := func(bad []byte, what string) {
				t.Helper()
				require.ErrorIs(t, b.AddEntry(bad), rows.ErrEntry, what)
				require.Equal(t, before, b.TotalRows(), what)
				for i := range rows.Tables {
					d, _ := b.Data(i)
					require.Equal(t, want[i], d, what)
				}
			}
			for n := 0; n < len(entry); n += 1 + n/7 {
				check(entry[:n], fmt.Sprintf("cut at %d", n))
			}
			_, err = rows.EntrySize(entry[:len(entry)-1])
			require.ErrorIs(t, err, rows.ErrEntry)
			desc, _ := rows.EntryDescriptor(entry)
			at := len(desc) + 2 // the first table's record: index, codec, rows...
			// A row count that disagrees with the tuples.
			bad := append([]byte(nil), entry...)
			bad[at+2]++
			check(bad, "row count")
			// An unknown codec.
			bad = append([]byte(nil), entry...)
			bad[at+1] = 9
			check(bad, "codec")
			// A flipped byte in the first table's data: its field count when
			// raw (a flip inside a raw value is a different value, not a
			// malformed row); the checksum or the block when compressed.
			_, n1 := binary.Uvarint(entry[at+2:])
			_, n2 := binary.Uvarint(entry[at+2+n1:])
			data := at + 2 + n1 + n2
			offs := []int{1}
			if compress {
				offs = []int{1, 2, 9, 12, 20, 40}
			}
			for _, off := range offs {
				bad = append([]byte(nil), entry...)
				bad[data+off] ^= 0x80
				check(bad, fmt.Sprintf("flip at %d", off))
			}
			// Trailing bytes after the last table.
			check(append(append([]byte(nil), entry...), 0), "trailing byte")
		})
	}
	_, err := rows.ParseLayout([]byte("nonsense"))
	require.ErrorIs(t, err, rows.ErrEntry)
}

// Compression shrinks the fixture's tables at least twice.
func TestEntryCompresses(t *testing.T) {
	b := fixtureBatch(t, rows.DefaultLayout())
	raw, err := b.AppendEntry(nil, false)
	require.NoError(t, err)
	packed, err := b.AppendEntry(nil, true)
	require.NoError(t, err)
	require.Less(t, len(packed)*2, len(raw), "encoded rows compress at least twice")
}

// The same request encodes to the same entry bytes on a fresh batch and on a
// reused one: the ledger key of an entry is a hash of its bytes, so a request
// the Collector retries after an XADD whose reply was lost is written once.
func TestEntryDeterministic(t *testing.T) {
	fresh, err := fixtureBatch(t, rows.DefaultLayout()).AppendEntry(nil, true)
	require.NoError(t, err)
	reused := new(rows.Batch)
	reused.AddLogs(fixtureLogs())
	reused.AddTraces(fixtureTraces())
	reused.Reset()
	reused.AddTraces(fixtureTraces())
	reused.AddLogs(fixtureLogs())
	reused.AddMetrics(fixtureMetrics())
	again, err := reused.AppendEntry(make([]byte, 0, 7), true)
	require.NoError(t, err)
	require.Equal(t, fresh, again)
}
