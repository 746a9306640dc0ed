package entry_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// requireReadsBack requires entry, which Append made of src, to read
// back whole through both readers: AddTo into a batch, and Entries'
// COPY streams, each equal to src's byte for byte.
func requireReadsBack(t *testing.T, src *rows.Batch, ent []byte, what string) {
	t.Helper()
	l := src.Layout()
	dst := new(rows.Batch)
	dst.SetLayout(l)
	require.NoError(t, entry.AddTo(dst, ent), "%s: AddTo", what)
	var s entry.Entries
	s.Reset(l)
	require.NoError(t, s.Add(ent), "%s: Entries.Add", what)
	got, err := readAll(&s)
	require.NoError(t, err, "%s: Entries' COPY streams", what)
	for i := range tables.Tables {
		want, err := src.Data(i)
		require.NoError(t, err)
		d, err := dst.Data(i)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, d), "%s: table %s through AddTo", what, tables.Tables[i].Name)
		if want != nil {
			require.True(t, bytes.Equal(want, got[i]), "%s: table %s through Entries", what, tables.Tables[i].Name)
		}
	}
}

// periodicTraces is n spans whose attribute "blob" is the same size-byte
// periodic string: rows that compress far beyond the usual 8 to 30 times.
func periodicTraces(n, size int) ptrace.Traces {
	blob := strings.Repeat("0123456789abcdef", size/16+1)[:size]
	td := ptrace.NewTraces()
	ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
	for i := range n {
		sp := ss.Spans().AppendEmpty()
		sp.SetName("periodic")
		sp.SetTraceID([16]byte{1, byte(i)})
		sp.SetSpanID([8]byte{2, byte(i)})
		sp.Attributes().PutStr("blob", blob)
	}
	return td
}

// The repro: requests of 10 spans that each carry the same 60 KB
// periodic attribute compress over 1000 times with S2. The reader refused
// such entries as damaged ("bad compressed table header"), and the flush worker
// deleted them, good rows and all.
func TestEntryPeriodicAttribute60KB(t *testing.T) {
	for req := range 3 {
		b := new(rows.Batch)
		b.AddTraces(periodicTraces(10, 60<<10))
		ent, err := entry.Append(nil, b, true)
		require.NoError(t, err)
		requireReadsBack(t, b, ent, fmt.Sprintf("request %d", req))
		n, err := entry.Size(ent)
		require.NoError(t, err)
		require.Greater(t, n, 600_000, "the rows are all there")
		require.Less(t, len(ent)*10, n, "and still compressed")
	}
}

// The other two: a 10 MB attribute value, and an exponential
// histogram of 100,000 buckets, lost the same way.
func TestEntryLargeRepetitiveValues(t *testing.T) {
	b := new(rows.Batch)
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("big")
	sp.Attributes().PutStr("value", strings.Repeat("x", 10<<20))
	b.AddTraces(td)

	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("wide")
	dp := m.SetEmptyExponentialHistogram().DataPoints().AppendEmpty()
	dp.Positive().BucketCounts().FromRaw(make([]uint64, 100_000))
	dp.Negative().BucketCounts().FromRaw(make([]uint64, 100_000))
	b.AddMetrics(md)
	require.Positive(t, b.Rows(tables.IdxExpHistogram))

	ent, err := entry.Append(nil, b, true)
	require.NoError(t, err)
	requireReadsBack(t, b, ent, "10 MB value and 100,000 buckets")
}

// s2Ratio is how many times S2 alone compresses tuples.
func s2Ratio(tuples []byte) float64 {
	return float64(len(tuples)) / float64(len(s2.Encode(nil, tuples)))
}

// spansOfRatio returns a batch of spans whose tuples S2 compresses about
// ratio times, by the size of a periodic attribute.
func spansOfRatio(t *testing.T, ratio float64) (*rows.Batch, int) {
	t.Helper()
	lo, hi := 1<<10, 16<<20
	build := func(size int) *rows.Batch {
		b := new(rows.Batch)
		b.AddTraces(periodicTraces(4, size))
		return b
	}
	for hi-lo > 1 { // the ratio grows with the attribute's size
		mid := (lo + hi) / 2
		b := build(mid)
		if s2Ratio(b.Tuples(tables.IdxSpans, 0, b.Rows(tables.IdxSpans))) < ratio {
			lo = mid
		} else {
			hi = mid
		}
	}
	return build(hi), hi
}

// The ratio bound: for rows S2 compresses just under, at and past the
// ratio the reader accepts, and far past it, every entry Append writes
// reads back whole, and every compressed record keeps within the bound.
func TestEntryRatioLimit(t *testing.T) {
	for _, ratio := range []float64{entry.MaxRatio / 2, entry.MaxRatio - 1, entry.MaxRatio, entry.MaxRatio + 1, 4 * entry.MaxRatio, 64 * entry.MaxRatio} {
		b, size := spansOfRatio(t, ratio)
		got := s2Ratio(b.Tuples(tables.IdxSpans, 0, b.Rows(tables.IdxSpans)))
		what := fmt.Sprintf("S2 ratio %.1f (attribute of %d bytes)", got, size)
		require.GreaterOrEqual(t, got, ratio, what)
		if ratio > entry.MaxRatio {
			require.Greater(t, got, float64(entry.MaxRatio), "%s: past the bound", what)
		}
		ent, err := entry.Append(nil, b, true)
		require.NoError(t, err, what)
		requireReadsBack(t, b, ent, what)
		records, err := entry.EntryTables(ent)
		require.NoError(t, err, what)
		require.Len(t, records, 2, "the spans and their context")
		require.Equal(t, tables.IdxContexts, records[0].Table, "the contexts come first")
		tb := records[1]
		require.Equal(t, tables.IdxSpans, tb.Table)
		require.True(t, tb.Compressed, "%s: still compressed", what)
		require.LessOrEqual(t, tb.Size, tb.Stored*entry.MaxRatio+64, what)
	}
}

// logsOfSize returns a batch of one log record whose body is size bytes.
func logsOfSize(size int) *rows.Batch {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	// Digits in a pseudo-random order: S2 must not shrink it past the bound.
	var sb strings.Builder
	x := uint32(1)
	for sb.Len() < size {
		x = x*1664525 + 1013904223
		sb.WriteByte('0' + byte(x>>24)%10)
	}
	lr.Body().SetStr(sb.String())
	b := new(rows.Batch)
	b.AddLogs(ld)
	return b
}

// The table size bound, lowered so that a test reaches it: a table of
// exactly the bound is written and reads back, raw and compressed; one byte
// more is refused by Append (the request is refused, not acknowledged)
// and, written under the old bound, by both readers.
func TestEntryTableSizeLimit(t *testing.T) {
	b := logsOfSize(100_000)
	size := uint64(len(b.Tuples(tables.IdxLogs, 0, 1)))
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			restore := entry.SetMaxTableSize(size)
			ent, err := entry.Append(nil, b, compress)
			require.NoError(t, err, "at the bound")
			requireReadsBack(t, b, ent, "at the bound")
			restore()

			restore = entry.SetMaxTableSize(size - 1)
			defer restore()
			_, err = entry.Append(nil, b, compress)
			require.ErrorIs(t, err, entry.ErrTooLarge, "past the bound")
			require.ErrorIs(t, entry.AddTo(new(rows.Batch), ent), entry.ErrMalformed, "past the bound")
			var s entry.Entries
			s.Reset(tables.DefaultLayout())
			require.ErrorIs(t, s.Add(ent), entry.ErrMalformed, "past the bound")
			_, err = entry.Size(ent)
			require.ErrorIs(t, err, entry.ErrMalformed)
		})
	}
}

// Row counts and lengths whose varints take one, two and three bytes read
// back, raw and compressed.
func TestEntryVarintWidths(t *testing.T) {
	for _, n := range []int{1, 127, 128, 16383, 16384} {
		ld := plog.NewLogs()
		lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for i := range n {
			lrs.AppendEmpty().Body().SetInt(int64(i))
		}
		b := new(rows.Batch)
		b.AddLogs(ld)
		for _, compress := range []bool{false, true} {
			ent, err := entry.Append(nil, b, compress)
			require.NoError(t, err)
			requireReadsBack(t, b, ent, fmt.Sprintf("%d rows, compress=%v", n, compress))
		}
	}
}

// promotedLayout is a layout whose spans table has exactly columns columns.
func promotedLayout(columns int) (*tables.Layout, error) {
	var p []tables.Promoted
	for i := len(tables.Tables[tables.IdxSpans].Columns); i < columns; i++ {
		p = append(p, tables.Promoted{Column: fmt.Sprintf("p%d", i), Kind: tables.KindText, Traces: true,
			From: []tables.Source{{Scope: tables.ScopeSpan, Key: fmt.Sprintf("k%d", i)}}})
	}
	return tables.NewLayout(p)
}

// The column bound: a layout of PostgreSQL's 1600 columns writes entries
// that a reader of another layout parses (ParseLayout) and reads back; one
// column more is refused when the layout is built, at start, rather than in
// every entry.
func TestEntryColumnLimit(t *testing.T) {
	l, err := promotedLayout(tables.MaxColumns)
	require.NoError(t, err)
	require.Len(t, l.Table(tables.IdxSpans).Columns, tables.MaxColumns)
	b := new(rows.Batch)
	b.SetLayout(l)
	b.AddTraces(periodicTraces(3, 100))
	for _, compress := range []bool{false, true} {
		ent, err := entry.Append(nil, b, compress)
		require.NoError(t, err)
		desc, err := entry.Descriptor(ent)
		require.NoError(t, err)
		parsed, err := tables.ParseLayout(desc)
		require.NoError(t, err)
		dst := new(rows.Batch)
		dst.SetLayout(parsed)
		require.NoError(t, entry.AddTo(dst, ent))
		got, err := dst.Data(tables.IdxSpans)
		require.NoError(t, err)
		want, err := b.Data(tables.IdxSpans)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got))
		requireReadsBack(t, b, ent, fmt.Sprintf("%d columns, compress=%v", tables.MaxColumns, compress))
	}

	_, err = promotedLayout(tables.MaxColumns + 1)
	require.ErrorContains(t, err, "columns")
}

// Hand-made entries past each limit are refused by both readers: a size
// claim past the ratio bound, past the table bound, and a descriptor of too
// many columns.
func TestEntryPastLimitsRefused(t *testing.T) {
	b := new(rows.Batch)
	b.AddTraces(periodicTraces(4, 1000))
	ent, err := entry.Append(nil, b, true)
	require.NoError(t, err)
	records, err := entry.EntryTables(ent)
	require.NoError(t, err)
	require.True(t, records[0].Compressed)
	desc, _ := entry.Descriptor(ent)
	head := binary.PutUvarint(make([]byte, binary.MaxVarintLen64), uint64(len(desc))) + len(desc)
	// Rebuild the first record's header with another size claim.
	withSize := func(size uint64) []byte {
		r := ent[head+2:]
		rowsN, n1 := binary.Uvarint(r)
		_, n2 := binary.Uvarint(r[n1:])
		out := append([]byte(nil), ent[:head+2]...)
		out = binary.AppendUvarint(out, rowsN)
		out = binary.AppendUvarint(out, size)
		return append(out, r[n1+n2:]...)
	}
	refused := func(bad []byte, what string) {
		t.Helper()
		require.ErrorIs(t, entry.AddTo(new(rows.Batch), bad), entry.ErrMalformed, what)
		var s entry.Entries
		s.Reset(tables.DefaultLayout())
		if err := s.Add(bad); err == nil {
			_, err = readAll(&s)
			require.ErrorIs(t, err, entry.ErrMalformed, what)
		}
	}
	refused(withSize(records[0].Stored*entry.MaxRatio+65), "past the ratio")
	refused(withSize(records[0].Stored*entry.MaxRatio+64), "at the ratio, but not the block's size")
	refused(withSize(1<<31), "past the table bound")
	refused(withSize(records[0].Size+1), "a size the block disagrees with")
	require.NoError(t, entry.AddTo(new(rows.Batch), withSize(records[0].Size)), "the rebuild itself is sound")

	l, err := promotedLayout(tables.MaxColumns)
	require.NoError(t, err)
	d := l.Descriptor()
	// Spans come first: its column count follows its name.
	at := 1 + len("spans")
	n, w := binary.Uvarint(d[at:])
	require.EqualValues(t, tables.MaxColumns, n)
	over := append(append(append([]byte(nil), d[:at]...), binary.AppendUvarint(nil, n+1)...), d[at+w:]...)
	_, err = tables.ParseLayout(over)
	require.ErrorIs(t, err, tables.ErrDescriptor)
}

// FuzzEntryReadsBack: whatever the rows (here spans repeating a value of any
// bytes, any number of times, which spans every compression ratio), every
// entry Append writes reads back whole through both readers.
func FuzzEntryReadsBack(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), uint16(4096), uint8(10))
	f.Add([]byte{0}, uint16(60000), uint8(40))
	f.Add([]byte("x"), uint16(1), uint8(1))
	f.Add([]byte("\xff\xfe\x00 ünïcode"), uint16(300), uint8(3))
	f.Fuzz(func(t *testing.T, unit []byte, repeat uint16, spans uint8) {
		if len(unit) == 0 || len(unit)*int(repeat)*max(int(spans), 1) > 2<<20 {
			return
		}
		value := bytes.Repeat(unit, int(repeat))
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		for i := range int(spans) {
			sp := ss.Spans().AppendEmpty()
			sp.SetSpanID([8]byte{1, byte(i)})
			sp.Attributes().PutStr("v", string(value))
			sp.Attributes().PutEmptyBytes("b").FromRaw(value)
		}
		b := new(rows.Batch)
		b.AddTraces(td)
		for _, compress := range []bool{false, true} {
			ent, err := entry.Append(nil, b, compress)
			require.NoError(t, err)
			requireReadsBack(t, b, ent, fmt.Sprintf("compress=%v", compress))
		}
	})
}
