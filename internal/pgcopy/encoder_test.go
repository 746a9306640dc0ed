package pgcopy

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// parse splits a binary COPY stream into rows of fields (nil for NULL),
// checking the header and trailer the server checks.
func parse(t *testing.T, data []byte) [][][]byte {
	t.Helper()
	sig := "PGCOPY\n\xff\r\n\x00"
	require.True(t, bytes.HasPrefix(data, []byte(sig)), "signature")
	data = data[len(sig):]
	require.GreaterOrEqual(t, len(data), 8)
	require.Equal(t, uint32(0), binary.BigEndian.Uint32(data), "flags: no OIDs")
	ext := binary.BigEndian.Uint32(data[4:])
	data = data[8+ext:]
	var rows [][][]byte
	for {
		require.GreaterOrEqual(t, len(data), 2, "truncated stream")
		n := int16(binary.BigEndian.Uint16(data))
		data = data[2:]
		if n == -1 {
			require.Empty(t, data, "bytes after the trailer")
			return rows
		}
		row := make([][]byte, n)
		for i := range row {
			require.GreaterOrEqual(t, len(data), 4, "truncated field")
			l := int32(binary.BigEndian.Uint32(data))
			data = data[4:]
			if l == -1 {
				continue
			}
			require.GreaterOrEqual(t, len(data), int(l), "truncated value")
			row[i] = append([]byte{}, data[:l]...)
			if row[i] == nil {
				row[i] = []byte{}
			}
			data = data[l:]
		}
		rows = append(rows, row)
	}
}

func mustBytes(t *testing.T, e *Encoder) []byte {
	t.Helper()
	b, err := e.Bytes()
	require.NoError(t, err)
	return b
}

func TestHeaderAndTrailer(t *testing.T) {
	var e Encoder
	b, err := e.Bytes()
	require.NoError(t, err)
	require.Nil(t, b, "no rows, no stream: the writer skips the table")

	e.BeginRow(1)
	e.Int32(7)
	b = mustBytes(t, &e)
	want := append([]byte("PGCOPY\n\xff\r\n\x00"), 0, 0, 0, 0, 0, 0, 0, 0) // flags, extension length
	want = append(want, 0, 1, 0, 0, 0, 4, 0, 0, 0, 7)                      // 1 field of 4 bytes
	want = append(want, 0xff, 0xff)                                        // trailer
	require.Equal(t, want, b)
	require.Equal(t, 1, e.Rows())
	require.Equal(t, len(want)-2, e.Len(), "Len excludes the trailer")

	// Bytes does not close the stream: more rows go before a single trailer.
	e.BeginRow(1)
	e.Int32(8)
	rows := parse(t, mustBytes(t, &e))
	require.Len(t, rows, 2)
	require.Equal(t, []byte{0, 0, 0, 8}, rows[1][0])
}

func TestReset(t *testing.T) {
	var e Encoder
	e.BeginRow(2)
	e.Int16(1) // one field short
	require.Error(t, e.Err())
	e.Reset()
	require.NoError(t, e.Err())
	require.Zero(t, e.Rows())
	require.Zero(t, e.Len())
	e.BeginRow(1)
	e.Null()
	rows := parse(t, mustBytes(t, &e)) // header written again
	require.Equal(t, [][][]byte{{nil}}, rows)
}

func TestScalars(t *testing.T) {
	var e Encoder
	e.BeginRow(11)
	e.Null()
	e.Int16(-2)
	e.Int32(math.MinInt32)
	e.Int64(-1)
	e.Float64(1.5)
	e.Float64(math.NaN())
	e.Float64(math.Inf(-1))
	e.Bool(true)
	e.Bool(false)
	e.JSONB([]byte(`{"a":1}`))
	e.Text("")
	rows := parse(t, mustBytes(t, &e))
	require.Len(t, rows, 1)
	r := rows[0]
	require.Nil(t, r[0])
	require.Equal(t, []byte{0xff, 0xfe}, r[1])
	require.Equal(t, []byte{0x80, 0, 0, 0}, r[2])
	require.Equal(t, bytes.Repeat([]byte{0xff}, 8), r[3])
	require.Equal(t, 1.5, math.Float64frombits(binary.BigEndian.Uint64(r[4])))
	require.True(t, math.IsNaN(math.Float64frombits(binary.BigEndian.Uint64(r[5]))))
	require.True(t, math.IsInf(math.Float64frombits(binary.BigEndian.Uint64(r[6])), -1))
	require.Equal(t, []byte{1}, r[7])
	require.Equal(t, []byte{0}, r[8])
	require.Equal(t, []byte("\x01{\"a\":1}"), r[9], "jsonb binary starts with version 1")
	require.Equal(t, []byte{}, r[10], "an empty text is a zero-length value, not NULL")
}

func TestTimestamptz(t *testing.T) {
	micros := func(unixNano uint64) int64 {
		var e Encoder
		e.BeginRow(1)
		e.Timestamptz(unixNano)
		return int64(binary.BigEndian.Uint64(parse(t, mustBytes(t, &e))[0][0]))
	}
	pgEpoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	require.Zero(t, micros(uint64(pgEpoch.UnixNano())), "2000-01-01 is zero")
	require.Equal(t, int64(-946684800_000000), micros(0), "the Unix epoch is before the PostgreSQL one")
	require.Equal(t, int64(1), micros(uint64(pgEpoch.UnixNano())+1999), "sub-microsecond nanos are truncated")
	ts := time.Date(2023, 11, 14, 22, 13, 20, 123456789, time.UTC)
	require.Equal(t, ts.Sub(pgEpoch).Microseconds(), micros(uint64(ts.UnixNano())))
	require.Equal(t, int64(math.MaxUint64/1000)-946684800_000000, micros(math.MaxUint64), "no overflow at the top")
}

func TestIDs(t *testing.T) {
	var e Encoder
	e.BeginRow(4)
	e.UUID([16]byte{})
	e.UUID([16]byte{15: 1})
	e.ID8([8]byte{})
	e.ID8([8]byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1})
	r := parse(t, mustBytes(t, &e))[0]
	require.Nil(t, r[0], "an all-zero trace id is absent: NULL")
	require.Equal(t, append(make([]byte, 15), 1), r[1])
	require.Nil(t, r[2], "an all-zero span id is absent: NULL")
	require.Equal(t, []byte{0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1}, r[3], "same bits as a bigint")
}

func TestText(t *testing.T) {
	var e Encoder
	e.BeginRow(3)
	e.TextOrNull("")
	e.TextOrNull("a\x00b")
	e.Text("héllo \"q\" \x01")
	r := parse(t, mustBytes(t, &e))[0]
	require.Nil(t, r[0])
	require.Equal(t, "a\uFFFDb", string(r[1]))
	require.Equal(t, "héllo \"q\" \x01", string(r[2]), "text needs no escaping in binary COPY")
}

func TestBeginEnd(t *testing.T) {
	var e Encoder
	e.BeginRow(2)
	pos := e.BeginJSONB()
	e.AppendBuf(func(b []byte) []byte { return append(b, `[1,2]`...) })
	e.End(pos)
	pos = e.Begin()
	e.Raw([]byte("raw"))
	e.End(pos)
	r := parse(t, mustBytes(t, &e))[0]
	require.Equal(t, "\x01[1,2]", string(r[0]))
	require.Equal(t, "raw", string(r[1]))
}

// array decodes a one-dimensional binary array.
func array(t *testing.T, b []byte) (oid uint32, elems [][]byte) {
	t.Helper()
	ndim := binary.BigEndian.Uint32(b)
	require.Zero(t, binary.BigEndian.Uint32(b[4:]), "no NULL elements")
	oid = binary.BigEndian.Uint32(b[8:])
	if ndim == 0 {
		require.Len(t, b, 12, "an empty array is its 12-byte header")
		return oid, nil
	}
	require.Equal(t, uint32(1), ndim)
	n := binary.BigEndian.Uint32(b[12:])
	require.Equal(t, uint32(1), binary.BigEndian.Uint32(b[16:]), "lower bound")
	b = b[20:]
	for range n {
		l := binary.BigEndian.Uint32(b)
		elems = append(elems, b[4:4+l])
		b = b[4+l:]
	}
	require.Empty(t, b)
	return oid, elems
}

func TestArrays(t *testing.T) {
	ints := []int64{1, -1, math.MaxInt64}
	floats := []float64{0.5, math.Inf(1)}
	var e Encoder
	e.BeginRow(4)
	e.Int64Array(len(ints), func(i int) int64 { return ints[i] })
	e.Float64Array(len(floats), func(i int) float64 { return floats[i] })
	e.Int64Array(0, nil)
	e.Float64Array(0, nil)
	r := parse(t, mustBytes(t, &e))[0]

	oid, el := array(t, r[0])
	require.Equal(t, uint32(OIDInt8), oid)
	require.Len(t, el, len(ints))
	for i, v := range ints {
		require.Equal(t, v, int64(binary.BigEndian.Uint64(el[i])))
	}
	oid, el = array(t, r[1])
	require.Equal(t, uint32(OIDFloat8), oid)
	require.Len(t, el, len(floats))
	for i, v := range floats {
		require.Equal(t, v, math.Float64frombits(binary.BigEndian.Uint64(el[i])))
	}
	for _, f := range r[2:] {
		_, el := array(t, f)
		require.Empty(t, el)
	}
	oid, _ = array(t, r[3])
	require.Equal(t, uint32(OIDFloat8), oid, "an empty array still names its element type")
}

func TestFieldCountMismatch(t *testing.T) {
	t.Run("short row then next row", func(t *testing.T) {
		var e Encoder
		e.BeginRow(2)
		e.Int32(1)
		e.BeginRow(2)
		e.Int32(1)
		e.Int32(2)
		err := e.Err()
		require.ErrorContains(t, err, "row 1 has 1 fields, want 2")
		_, err = e.Bytes()
		require.Error(t, err, "Bytes refuses a stream the server would reject")
	})
	t.Run("long last row", func(t *testing.T) {
		var e Encoder
		e.BeginRow(1)
		e.Int32(1)
		e.BeginRow(1)
		e.Null()
		e.Text("x")
		require.ErrorContains(t, e.Err(), "row 2 has 2 fields, want 1")
	})
	t.Run("first error kept", func(t *testing.T) {
		var e Encoder
		e.BeginRow(3)
		e.BeginRow(1)
		require.ErrorContains(t, e.Err(), "row 1")
	})
	t.Run("every writer counts one field", func(t *testing.T) {
		var e Encoder
		e.BeginRow(19)
		e.Null()
		e.Int16(0)
		e.Int32(0)
		e.Int64(0)
		e.Float64(0)
		e.Bool(false)
		e.Timestamptz(0)
		e.UUID([16]byte{})
		e.UUID([16]byte{1})
		e.ID8([8]byte{})
		e.ID8([8]byte{1})
		e.Text("")
		e.TextOrNull("")
		e.JSONB([]byte("{}"))
		e.End(e.BeginJSONB())
		e.End(e.Begin())
		e.Int64Array(0, nil)
		e.Float64Array(1, func(int) float64 { return 0 })
		e.TextOrNull("x")
		require.NoError(t, e.Err())
		require.Len(t, parse(t, mustBytes(t, &e))[0], 19)
	})
}

func TestAppendClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain ascii", "plain ascii"},
		{"héllo wörld 🙂", "héllo wörld 🙂"},
		{"quotes \" ' and \\ stay", "quotes \" ' and \\ stay"},
		{"controls \x01\t\n\r\x1f\x7f stay", "controls \x01\t\n\r\x1f\x7f stay"},
		{"nul\x00", "nul\uFFFD"},
		{"\x00\x00", "\uFFFD\uFFFD"},
		{"é\x00", "é\uFFFD"},
		{"bad \xff byte", "bad \uFFFD byte"},
		{"truncated \xe2\x82", "truncated \uFFFD\uFFFD"},
		{"surrogate \xed\xa0\x80", "surrogate \uFFFD\uFFFD\uFFFD"},
		{"overlong \xc0\xaf", "overlong \uFFFD\uFFFD"},
		{"real \uFFFD kept", "real \uFFFD kept"},
	} {
		got := string(AppendClean([]byte("pre:"), tc.in))
		require.Equal(t, "pre:"+tc.want, got, "%q", tc.in)
		require.True(t, utf8.ValidString(got))
		require.NotContains(t, got, "\x00")
	}
}

func TestAppendCleanAlwaysValid(t *testing.T) {
	// Every byte value at every position of a short string.
	for b := 0; b < 256; b++ {
		for _, s := range []string{string(rune(0)) + string([]byte{byte(b)}), "é" + string([]byte{byte(b)}) + "x", strings.Repeat(string([]byte{byte(b)}), 3)} {
			got := AppendClean(nil, s)
			require.True(t, utf8.Valid(got), "%q", s)
			require.NotContains(t, string(got), "\x00", "%q", s)
		}
	}
}

// IsClean finds a NUL or a non-ASCII byte at every position of its 8-byte
// words and of the tail after them.
func TestIsCleanEveryPosition(t *testing.T) {
	for n := 1; n <= 19; n++ {
		for pos := range n {
			for _, c := range []byte{0, 0x01, 0x7f, 0x80, 0xc3, 0xff} {
				b := []byte(strings.Repeat("a", n))
				b[pos] = c
				want := c != 0 && c < 0x80 // a lone byte of 0x80 or more is not UTF-8
				if got := IsClean(string(b)); got != want {
					t.Fatalf("%q: IsClean = %v", b, got)
				}
			}
			b := []byte(strings.Repeat("a", n+1))
			copy(b[pos:], "é") // valid UTF-8 across the position
			if !IsClean(string(b)) {
				t.Fatalf("%q: IsClean = false", b)
			}
		}
	}
}

// BenchmarkIsClean is the check every text value passes (a log body here).
func BenchmarkIsClean(b *testing.B) {
	s := strings.Repeat("chat completion gpt-4o input_tokens=1834 output_tokens=512 ", 5)
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		if !IsClean(s) {
			b.Fatal("not clean")
		}
	}
}

func TestFirstInt64Range(t *testing.T) {
	var e Encoder
	for _, us := range []int64{5_000_000, -3, 7_000_000_000} {
		e.BeginRow(2)
		e.TimestamptzUnixMicro(us + pgEpochMicros)
		e.Text("x")
	}
	lo, hi, ok := FirstInt64Range(e.Tuples(0, e.Rows()), 2)
	if !ok || lo != -3 || hi != 7_000_000_000 {
		t.Fatalf("range = %d, %d, %v; want -3, 7000000000, true", lo, hi, ok)
	}
	if _, _, ok := FirstInt64Range(e.Tuples(0, e.Rows()), 3); ok {
		t.Error("rows of another field count gave a range")
	}
	if _, _, ok := FirstInt64Range(nil, 2); ok {
		t.Error("no rows gave a range")
	}
	e.BeginRow(2)
	e.Null()
	e.Text("y")
	if _, _, ok := FirstInt64Range(e.Tuples(0, e.Rows()), 2); ok {
		t.Error("a NULL first value gave a range")
	}
	e.Reset()
	e.BeginRow(2)
	e.Text("not a time")
	e.Text("z")
	if _, _, ok := FirstInt64Range(e.Tuples(0, e.Rows()), 2); ok {
		t.Error("a first value of 10 bytes gave a range")
	}
}

// TestTextArray: a text[] written element by element, cleaned and bounded
// like a text value, reads back as its strings; an empty one as none; a
// damaged or foreign array is refused.
func TestTextArray(t *testing.T) {
	var e Encoder
	e.SetMaxValue(1024)
	e.BeginRow(2)
	pos := e.BeginTextArray(4)
	e.ArrayText("key")
	e.ArrayText("a\x00b\xff")
	e.ArrayText("")
	e.ArrayText(strings.Repeat("é", 1000))
	e.End(pos)
	e.End(e.BeginTextArray(0))
	r := parse(t, mustBytes(t, &e))[0]
	vals, ok := TextArrayValues(r[0])
	require.True(t, ok)
	require.Len(t, vals, 4)
	require.Equal(t, []string{"key", "a\uFFFDb\uFFFD", ""}, vals[:3])
	require.LessOrEqual(t, len(vals[3]), 1024)
	require.True(t, strings.HasSuffix(vals[3], "[postgrescopy: truncated from 2000 bytes]"))
	vals, ok = TextArrayValues(r[1])
	require.True(t, ok)
	require.Empty(t, vals)

	for name, f := range map[string][]byte{
		"short":        r[0][:10],
		"cut element":  r[0][:len(r[0])-1],
		"trailing":     append(slices.Clone(r[0]), 0),
		"not text":     slices.Concat(r[0][:8], []byte{0, 0, 0, 20}, r[0][12:]),
		"two dims":     slices.Concat([]byte{0, 0, 0, 2}, r[0][4:]),
		"huge count":   slices.Concat(r[0][:12], []byte{0x7f, 0, 0, 0}, r[0][16:]),
		"null element": slices.Concat(r[0][:20], []byte{0xff, 0xff, 0xff, 0xff}),
	} {
		_, ok := TextArrayValues(f)
		require.False(t, ok, name)
	}
}

func TestSplitFirstInt64(t *testing.T) {
	var e Encoder
	values := []int64{25, 5, 10, 30, 19, 20, 7, 40}
	for k, us := range values {
		e.BeginRow(2)
		e.TimestamptzUnixMicro(us + pgEpochMicros)
		e.Text(strconv.Itoa(k))
	}
	tuples := e.Tuples(0, e.Rows())
	orig := slices.Clone(tuples)
	pieces, ok := SplitFirstInt64(tuples, 2, []int64{10, 20, 30})
	if !ok || len(pieces) != 4 {
		t.Fatalf("split = %d pieces, %v; want 4, true", len(pieces), ok)
	}
	// Each piece's rows, in the order they came, by their text.
	want := []struct {
		rows   []string
		lo, hi int64
	}{{[]string{"1", "6"}, 5, 7}, {[]string{"2", "4"}, 10, 19}, {[]string{"0", "5"}, 20, 25}, {[]string{"3", "7"}, 30, 40}}
	total := 0
	for k, p := range pieces {
		var got []string
		for off := 0; off < len(p.Tuples); {
			n, ok := rowSize(p.Tuples[off:], 2)
			if !ok {
				t.Fatalf("piece %d: malformed row at %d", k, off)
			}
			fields, _ := SplitRow(nil, p.Tuples[off:off+n])
			got = append(got, string(fields[1]))
			off += n
		}
		if !slices.Equal(got, want[k].rows) || p.Rows != len(want[k].rows) || p.Lo != want[k].lo || p.Hi != want[k].hi {
			t.Errorf("piece %d = %v (%d rows, %d–%d); want %v, %d–%d", k, got, p.Rows, p.Lo, p.Hi, want[k].rows, want[k].lo, want[k].hi)
		}
		total += len(p.Tuples)
	}
	if total != len(tuples) || !bytes.Equal(tuples, orig) {
		t.Errorf("pieces hold %d bytes of %d, or the input changed", total, len(tuples))
	}
	// A piece with no row is empty; a piece past every row too.
	pieces, ok = SplitFirstInt64(tuples, 2, []int64{0, 100})
	if !ok || pieces[0].Rows != 0 || len(pieces[0].Tuples) != 0 || pieces[1].Rows != len(values) || pieces[2].Rows != 0 {
		t.Errorf("split at 0, 100 = %+v, %v", pieces, ok)
	}
	if _, ok := SplitFirstInt64(tuples, 3, []int64{10}); ok {
		t.Error("rows of another field count were split")
	}
	e.BeginRow(2)
	e.Null()
	e.Text("y")
	if _, ok := SplitFirstInt64(e.Tuples(0, e.Rows()), 2, []int64{10}); ok {
		t.Error("a NULL first value was split")
	}
	if _, ok := SplitFirstInt64(nil, 2, []int64{10}); ok {
		t.Error("no rows were split")
	}
}
