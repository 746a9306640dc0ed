package entry_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

func fixtureBatch(t *testing.T, l *tables.Layout) *rows.Batch {
	t.Helper()
	b := new(rows.Batch)
	b.SetLayout(l)
	b.AddTraces(rowstest.Traces())
	b.AddLogs(rowstest.Logs())
	b.AddMetrics(rowstest.Metrics())
	for i := range tables.Tables {
		require.Positive(t, b.Rows(i), "the fixture fills table %s", tables.Tables[i].Name)
	}
	return b
}

// An entry carries a batch's COPY streams byte for byte, for the default
// layout and one with promoted columns, and adds to a batch that has rows.
func TestEntryRoundTrip(t *testing.T) {
	genai, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	for name, l := range map[string]*tables.Layout{"default": tables.DefaultLayout(), "genai": genai} {
		for _, compress := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/compress=%v", name, compress), func(t *testing.T) {
				src := fixtureBatch(t, l)
				ent, err := entry.Append(nil, src, compress)
				require.NoError(t, err)
				desc, err := entry.Descriptor(ent)
				require.NoError(t, err)
				require.Equal(t, l.Descriptor(), desc)

				dst := new(rows.Batch)
				dst.SetLayout(l)
				require.NoError(t, entry.AddTo(dst, ent))
				for i := range tables.Tables {
					want, err := src.Data(i)
					require.NoError(t, err)
					got, err := dst.Data(i)
					require.NoError(t, err)
					require.True(t, bytes.Equal(want, got), "table %s differs", tables.Tables[i].Name)
				}

				// A second entry appends: every row twice, each addressable.
				require.NoError(t, entry.AddTo(dst, ent))
				for i := range tables.Tables {
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
	genai, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	ent, err := entry.Append(nil, fixtureBatch(t, genai), true)
	require.NoError(t, err)

	own := new(rows.Batch)
	require.ErrorIs(t, entry.AddTo(own, ent), entry.ErrMalformed)
	require.Zero(t, own.TotalRows())

	desc, err := entry.Descriptor(ent)
	require.NoError(t, err)
	parsed, err := tables.ParseLayout(desc)
	require.NoError(t, err)
	require.Equal(t, genai.Descriptor(), parsed.Descriptor())
	for i := range tables.Tables {
		require.Equal(t, genai.Table(i).Columns, parsed.Table(i).Columns)
		require.Equal(t, genai.Table(i).Kinds, parsed.Table(i).Kinds)
	}
	b := new(rows.Batch)
	b.SetLayout(parsed)
	require.NoError(t, entry.AddTo(b, ent))
	require.Equal(t, fixtureBatch(t, genai).TotalRows(), b.TotalRows())
	// Rejected rows render with the entry's columns.
	js, ok := rows.AppendLayoutRowJSON(nil, parsed, tables.IdxSpans, b.Tuples(tables.IdxSpans, 0, 1))
	require.True(t, ok)
	require.Contains(t, string(js), `"gen_ai_request_model":`)
}

// Every cut or corrupted entry is refused whole, raw or compressed: the
// batch keeps exactly the rows it had.
func TestEntryMalformed(t *testing.T) {
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			ent, err := entry.Append(nil, fixtureBatch(t, tables.DefaultLayout()), compress)
			require.NoError(t, err)
			b := new(rows.Batch)
			require.NoError(t, entry.AddTo(b, ent))
			before := b.TotalRows()
			want := make([][]byte, len(tables.Tables))
			for i := range tables.Tables {
				d, _ := b.Data(i)
				want[i] = append([]byte(nil), d...)
			}
			check := func(bad []byte, what string) {
				t.Helper()
				require.ErrorIs(t, entry.AddTo(b, bad), entry.ErrMalformed, what)
				require.Equal(t, before, b.TotalRows(), what)
				for i := range tables.Tables {
					d, _ := b.Data(i)
					require.Equal(t, want[i], d, what)
				}
			}
			for n := 0; n < len(ent); n += 1 + n/7 {
				check(ent[:n], fmt.Sprintf("cut at %d", n))
			}
			_, err = entry.Size(ent[:len(ent)-1])
			require.ErrorIs(t, err, entry.ErrMalformed)
			desc, _ := entry.Descriptor(ent)
			at := len(desc) + 2 // the first table's record: index, codec, rows...
			// A row count that disagrees with the tuples.
			bad := append([]byte(nil), ent...)
			bad[at+2]++
			check(bad, "row count")
			// An unknown codec.
			bad = append([]byte(nil), ent...)
			bad[at+1] = 9
			check(bad, "codec")
			// A flipped byte in the first table's data: its field count when
			// raw (a flip inside a raw value is a different value, not a
			// malformed row); the checksum or the block when compressed.
			_, n1 := binary.Uvarint(ent[at+2:])
			_, n2 := binary.Uvarint(ent[at+2+n1:])
			data := at + 2 + n1 + n2
			offs := []int{1}
			if compress {
				offs = []int{1, 2, 9, 12, 20, 40}
			}
			for _, off := range offs {
				bad = append([]byte(nil), ent...)
				bad[data+off] ^= 0x80
				check(bad, fmt.Sprintf("flip at %d", off))
			}
			// Trailing bytes after the last table.
			check(append(append([]byte(nil), ent...), 0), "trailing byte")
		})
	}
	_, err := tables.ParseLayout([]byte("nonsense"))
	require.ErrorIs(t, err, tables.ErrDescriptor)
}

// Compression shrinks the fixture's tables at least twice.
func TestEntryCompresses(t *testing.T) {
	b := fixtureBatch(t, tables.DefaultLayout())
	raw, err := entry.Append(nil, b, false)
	require.NoError(t, err)
	packed, err := entry.Append(nil, b, true)
	require.NoError(t, err)
	require.Less(t, len(packed)*2, len(raw), "encoded rows compress at least twice")
}

// The same request encodes to the same entry bytes on a fresh batch and on a
// reused one: the ledger key of an entry is a hash of its bytes, so a request
// the Collector retries after an XADD whose reply was lost is written once.
func TestEntryDeterministic(t *testing.T) {
	fresh, err := entry.Append(nil, fixtureBatch(t, tables.DefaultLayout()), true)
	require.NoError(t, err)
	reused := new(rows.Batch)
	reused.AddLogs(rowstest.Logs())
	reused.AddTraces(rowstest.Traces())
	reused.Reset()
	reused.AddTraces(rowstest.Traces())
	reused.AddLogs(rowstest.Logs())
	reused.AddMetrics(rowstest.Metrics())
	again, err := entry.Append(make([]byte, 0, 7), reused, true)
	require.NoError(t, err)
	require.Equal(t, fresh, again)
}
