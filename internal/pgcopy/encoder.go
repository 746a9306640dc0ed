package pgcopy

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"unicode/utf8"
)

// header is the fixed binary COPY signature, flags and header-extension length.
var header = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// Array element type OIDs, from pg_type.
const (
	OIDInt8   = 20
	OIDFloat8 = 701
	OIDText   = 25
)

// pgEpochMicros is 2000-01-01T00:00:00Z in Unix microseconds: binary
// timestamptz counts microseconds from there.
const pgEpochMicros = 946684800 * 1_000_000

// Encoder appends rows in the binary COPY format to a growing buffer. Each row
// declares its field count, and Err reports a row that wrote a different number
// of fields, so a table description and its encoder cannot silently drift.
// An Encoder is not safe for concurrent use.
type Encoder struct {
	buf []byte
	// offs holds each row's start in buf, so that a writer can re-send any
	// run of rows (Tuples) without encoding them again.
	offs     []int
	rows     int
	want     int
	got      int
	err      error
	inRow    bool
	maxValue int
}

// Reset empties the encoder and keeps its buffer and its value limit.
func (e *Encoder) Reset() {
	e.buf = e.buf[:0]
	e.offs = e.offs[:0]
	e.rows, e.want, e.got = 0, 0, 0
	e.err = nil
	e.inRow = false
}

// SetMaxValue bounds every text value to n bytes (see AppendCleanLimit);
// zero means no bound.
func (e *Encoder) SetMaxValue(n int) { e.maxValue = n }

// Rows is the number of rows begun so far.
func (e *Encoder) Rows() int { return e.rows }

// Len is the number of bytes encoded so far.
func (e *Encoder) Len() int { return len(e.buf) }

// minSpare is the free room BeginRow keeps ahead of a row, so that nearly
// every row is written without growing the buffer.
const minSpare = 64 << 10

// BeginRow starts a row of n fields.
func (e *Encoder) BeginRow(n int) {
	e.closeRow()
	if cap(e.buf)-len(e.buf) < minSpare {
		// Double ahead of the row: append alone grows a large slice by a
		// quarter at a time, which copies a batch's stream about four times
		// over and touches fresh pages at every step (the exporter's
		// costliest line under load, in CPU profiles).
		e.buf = slices.Grow(e.buf, cap(e.buf)+minSpare)
	}
	if len(e.buf) == 0 {
		e.buf = append(e.buf, header...)
	}
	e.offs = append(e.offs, len(e.buf))
	e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(n))
	e.want, e.got, e.inRow = n, 0, true
	e.rows++
}

func (e *Encoder) closeRow() {
	if e.inRow && e.got != e.want && e.err == nil {
		e.err = fmt.Errorf("pgcopy: row %d has %d fields, want %d", e.rows, e.got, e.want)
	}
	e.inRow = false
}

// Bytes returns the stream with its trailer. The slice is valid until the
// encoder is written to again; the encoder itself stays open for more rows.
func (e *Encoder) Bytes() ([]byte, error) {
	e.closeRow()
	if e.err != nil {
		return nil, e.err
	}
	if e.rows == 0 {
		return nil, nil
	}
	return append(e.buf, 0xff, 0xff), nil
}

// Tuples returns rows lo to hi-1 as they appear in the stream, without header
// or trailer; NewReader makes a COPY stream of them. Like Bytes, the slice is
// valid until the encoder is written to again.
func (e *Encoder) Tuples(lo, hi int) []byte {
	if lo >= hi {
		return nil
	}
	end := len(e.buf)
	if hi < e.rows {
		end = e.offs[hi]
	}
	return e.buf[e.offs[lo]:end]
}

// LastRow returns the bytes of the row written last, from its field count on.
func (e *Encoder) LastRow() []byte {
	if e.rows == 0 {
		return nil
	}
	return e.buf[e.offs[e.rows-1]:]
}

// ReplaceLastRow overwrites the row written last with row, a complete row of
// the same field count (from SplitRow's layout), for a caller that shrinks it.
func (e *Encoder) ReplaceLastRow(row []byte) {
	e.buf = append(e.buf[:e.offs[e.rows-1]], row...)
}

// DropLastRow removes the row written last, for a caller that writes it
// again another way.
func (e *Encoder) DropLastRow() {
	if e.rows == 0 {
		return
	}
	e.closeRow()
	e.rows--
	e.buf = e.buf[:e.offs[e.rows]]
	e.offs = e.offs[:e.rows]
}

// Err returns the first field-count mismatch, if any.
func (e *Encoder) Err() error {
	e.closeRow()
	return e.err
}

func (e *Encoder) field(n int) {
	e.got++
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
}

// Null writes a NULL field.
func (e *Encoder) Null() {
	e.got++
	e.buf = append(e.buf, 0xff, 0xff, 0xff, 0xff)
}

// Int16 writes a smallint.
func (e *Encoder) Int16(v int16) {
	e.field(2)
	e.buf = binary.BigEndian.AppendUint16(e.buf, uint16(v))
}

// Int32 writes an integer.
func (e *Encoder) Int32(v int32) {
	e.field(4)
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(v))
}

// Int64 writes a bigint.
func (e *Encoder) Int64(v int64) {
	e.field(8)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v))
}

// Float64 writes a double precision; NaN and ±Inf are valid float8 values.
func (e *Encoder) Float64(v float64) {
	e.field(8)
	e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(v))
}

// Bool writes a boolean.
func (e *Encoder) Bool(v bool) {
	e.field(1)
	if v {
		e.buf = append(e.buf, 1)
	} else {
		e.buf = append(e.buf, 0)
	}
}

// Timestamptz writes a Unix-nanosecond time as timestamptz, which keeps
// microseconds; the caller stores the sub-microsecond rest where it needs it.
func (e *Encoder) Timestamptz(unixNano uint64) {
	e.field(8)
	us := int64(unixNano/1000) - pgEpochMicros
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(us))
}

// TimestamptzUnixMicro writes a Unix-microsecond time, which may precede
// 1970, as timestamptz.
func (e *Encoder) TimestamptzUnixMicro(us int64) {
	e.field(8)
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(us-pgEpochMicros))
}

// UUID writes 16 bytes as uuid, or NULL when every byte is zero (an absent id).
func (e *Encoder) UUID(id [16]byte) {
	if id == [16]byte{} {
		e.Null()
		return
	}
	e.field(16)
	e.buf = append(e.buf, id[:]...)
}

// UUIDValue writes 16 bytes as uuid, the nil uuid included: for a column
// that must not be NULL (a Citus distribution column).
func (e *Encoder) UUIDValue(id [16]byte) {
	e.field(16)
	e.buf = append(e.buf, id[:]...)
}

// ID8 writes an 8-byte id as a bigint with the same bits, or NULL when every
// byte is zero (an absent id).
func (e *Encoder) ID8(id [8]byte) {
	if id == [8]byte{} {
		e.Null()
		return
	}
	e.field(8)
	e.buf = append(e.buf, id[:]...)
}

// Text writes a text value, made valid for PostgreSQL first (see
// AppendClean) and bounded by SetMaxValue (see AppendCleanLimit).
func (e *Encoder) Text(s string) {
	start := e.Begin()
	if e.maxValue > 0 && len(s)*3 > e.maxValue {
		// Cleaning can triple a string: only then can it reach the bound.
		e.buf = AppendCleanLimit(e.buf, s, e.maxValue)
	} else {
		e.buf = AppendClean(e.buf, s)
	}
	e.End(start)
}

// TextOrNull writes s, or NULL when it is empty.
func (e *Encoder) TextOrNull(s string) {
	if s == "" {
		e.Null()
		return
	}
	e.Text(s)
}

// Begin reserves a field's length word and returns its position, for callers
// that append the value themselves with AppendBuf; End patches the length.
func (e *Encoder) Begin() int {
	e.got++
	pos := len(e.buf)
	e.buf = append(e.buf, 0, 0, 0, 0)
	return pos
}

// End closes a field opened by Begin.
func (e *Encoder) End(pos int) {
	binary.BigEndian.PutUint32(e.buf[pos:], uint32(len(e.buf)-pos-4))
}

// AppendBuf lets a caller append raw bytes of an open field.
func (e *Encoder) AppendBuf(f func([]byte) []byte) { e.buf = f(e.buf) }

// Fields appends n fields already encoded (each length-prefixed, as in a
// row), counting them towards the row's fields.
func (e *Encoder) Fields(b []byte, n int) {
	e.buf = append(e.buf, b...)
	e.got += n
}

// Raw appends bytes to an open field.
func (e *Encoder) Raw(b []byte) { e.buf = append(e.buf, b...) }

// JSONB writes an already encoded, valid JSON document as jsonb.
func (e *Encoder) JSONB(doc []byte) {
	e.field(len(doc) + 1)
	e.buf = append(e.buf, 1)
	e.buf = append(e.buf, doc...)
}

// BeginJSONB opens a jsonb field whose document the caller appends; close it
// with End.
func (e *Encoder) BeginJSONB() int {
	pos := e.Begin()
	e.buf = append(e.buf, 1) // jsonb binary format version
	return pos
}

// Float64Array writes a one-dimensional float8[].
func (e *Encoder) Float64Array(n int, at func(int) float64) {
	pos := e.arrayHeader(n, OIDFloat8)
	for i := 0; i < n; i++ {
		e.buf = binary.BigEndian.AppendUint32(e.buf, 8)
		e.buf = binary.BigEndian.AppendUint64(e.buf, math.Float64bits(at(i)))
	}
	e.End(pos)
}

// Int64Array writes a one-dimensional bigint[].
func (e *Encoder) Int64Array(n int, at func(int) int64) {
	pos := e.arrayHeader(n, OIDInt8)
	for i := 0; i < n; i++ {
		e.buf = binary.BigEndian.AppendUint32(e.buf, 8)
		e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(at(i)))
	}
	e.End(pos)
}

// BeginTextArray opens a one-dimensional text[] of n elements without
// NULLs; write each with ArrayText, then close it with End.
func (e *Encoder) BeginTextArray(n int) int { return e.arrayHeader(n, OIDText) }

// ArrayText writes one element of an open text[], made valid and bounded
// as Text makes a text value.
func (e *Encoder) ArrayText(s string) {
	pos := len(e.buf)
	e.buf = append(e.buf, 0, 0, 0, 0)
	if e.maxValue > 0 && len(s)*3 > e.maxValue {
		e.buf = AppendCleanLimit(e.buf, s, e.maxValue)
	} else {
		e.buf = AppendClean(e.buf, s)
	}
	binary.BigEndian.PutUint32(e.buf[pos:], uint32(len(e.buf)-pos-4))
}

// TextArrayValues decodes a one-dimensional binary text[] without NULLs, as
// BeginTextArray and ArrayText write one (an empty array too); false for
// anything else.
func TextArrayValues(f []byte) ([]string, bool) {
	if len(f) < 12 || binary.BigEndian.Uint32(f[8:]) != OIDText {
		return nil, false
	}
	switch binary.BigEndian.Uint32(f) {
	case 0:
		return nil, len(f) == 12
	case 1:
	default:
		return nil, false
	}
	if len(f) < 20 || binary.BigEndian.Uint32(f[4:]) != 0 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(f[12:]))
	f = f[20:]
	if n > len(f)/4 {
		return nil, false
	}
	out := make([]string, 0, n)
	for range n {
		if len(f) < 4 {
			return nil, false
		}
		l := int(int32(binary.BigEndian.Uint32(f)))
		if l < 0 || l > len(f)-4 {
			return nil, false
		}
		out = append(out, string(f[4:4+l]))
		f = f[4+l:]
	}
	return out, len(f) == 0
}

func (e *Encoder) arrayHeader(n int, oid uint32) int {
	pos := e.Begin()
	if n == 0 {
		// An empty array has no dimensions.
		e.buf = binary.BigEndian.AppendUint32(e.buf, 0)
		e.buf = binary.BigEndian.AppendUint32(e.buf, 0)
		e.buf = binary.BigEndian.AppendUint32(e.buf, oid)
		return pos
	}
	e.buf = binary.BigEndian.AppendUint32(e.buf, 1) // ndim
	e.buf = binary.BigEndian.AppendUint32(e.buf, 0) // no NULLs
	e.buf = binary.BigEndian.AppendUint32(e.buf, oid)
	e.buf = binary.BigEndian.AppendUint32(e.buf, uint32(n))
	e.buf = binary.BigEndian.AppendUint32(e.buf, 1) // lower bound
	return pos
}

// AppendClean appends s made acceptable to PostgreSQL text: NUL bytes, which
// text and jsonb refuse, and invalid UTF-8 each become U+FFFD.
func AppendClean(dst []byte, s string) []byte {
	if IsClean(s) {
		return append(dst, s...)
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c == 0 {
			dst = append(dst, "\uFFFD"...)
			i++
			continue
		}
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, "\uFFFD"...)
		} else {
			dst = append(dst, s[i:i+size]...)
		}
		i += size
	}
	return dst
}

// IsClean reports whether s is text PostgreSQL accepts as is: valid UTF-8
// without NUL.
func IsClean(s string) bool {
	i := 0
	// 8 bytes at a time while they are ASCII without NUL: a lane's top bit
	// is set by a byte of 0x80 or more (x) or by a zero byte's borrow (x -
	// 1), which only a zero byte lower in the word can also cause.
	for ; i+8 <= len(s); i += 8 {
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if (x-0x0101010101010101|x)&0x8080808080808080 != 0 {
			break
		}
	}
	for ; i < len(s); i++ {
		c := s[i]
		if c == 0 {
			return false
		}
		if c >= utf8.RuneSelf {
			return utf8.ValidString(s[i:]) && !containsNUL(s[i:])
		}
	}
	return true
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}
