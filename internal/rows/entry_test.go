package rows_test

import (
	"bytes"
	"encoding/binary"
	"errors"
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
		t.Run(name, func(t *testing.T) {
			src := fixtureBatch(t, l)
			entry, err := src.AppendEntry(nil)
			require.NoError(t, err)
			require.LessOrEqual(t, len(entry), src.EntryLen())
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

// A reader with another layout refuses the entry; ParseLayout rebuilds the
// writer's layout from the descriptor, and a batch of it takes the entry.
func TestEntryOtherLayout(t *testing.T) {
	genai, err := rows.NewLayout(rows.GenAI())
	require.NoError(t, err)
	entry, err := fixtureBatch(t, genai).AppendEntry(nil)
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

// Every cut or corrupted entry is refused whole: the batch keeps exactly the
// rows it had.
func TestEntryMalformed(t *testing.T) {
	entry, err := fixtureBatch(t, rows.DefaultLayout()).AppendEntry(nil)
	require.NoError(t, err)
	b := new(rows.Batch)
	require.NoError(t, b.AddEntry(entry))
	before := b.TotalRows()
	want := make([][]byte, len(rows.Tables))
	for i := range rows.Tables {
		d, _ := b.Data(i)
		want[i] = append([]byte(nil), d...)
	}
	check := func(bad []byte) {
		t.Helper()
		require.True(t, errors.Is(b.AddEntry(bad), rows.ErrEntry))
		require.Equal(t, before, b.TotalRows())
		for i := range rows.Tables {
			d, _ := b.Data(i)
			require.Equal(t, want[i], d)
		}
	}
	for n := 0; n < len(entry); n += 1 + n/7 {
		check(entry[:n])
	}
	// A row count that disagrees with the tuples.
	desc, _ := rows.EntryDescriptor(entry)
	at := len(entry) - len(entry[len(desc)+2:])
	bad := append([]byte(nil), entry...)
	bad[at+1]++
	check(bad)
	// A first row whose field count is not its table's.
	bad = append([]byte(nil), entry...)
	_, n1 := binary.Uvarint(bad[at+1:])
	_, n2 := binary.Uvarint(bad[at+1+n1:])
	bad[at+1+n1+n2+1]++
	check(bad)
	// Trailing bytes after the last table.
	bad = append(append([]byte(nil), entry...), 0)
	check(bad)

	_, err = rows.ParseLayout([]byte("nonsense"))
	require.ErrorIs(t, err, rows.ErrEntry)
}
