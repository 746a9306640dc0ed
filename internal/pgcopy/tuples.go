package pgcopy

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"slices"
	"time"
)

var trailer = []byte{0xff, 0xff}

// NewReader returns a binary COPY stream of tuples (each a run of whole rows,
// as Tuples returns them) between the header and the trailer, without
// copying them.
func NewReader(tuples ...[]byte) io.Reader {
	rs := make([]io.Reader, 0, len(tuples)+2)
	rs = append(rs, bytes.NewReader(header))
	for _, t := range tuples {
		rs = append(rs, bytes.NewReader(t))
	}
	rs = append(rs, bytes.NewReader(trailer))
	return io.MultiReader(rs...)
}

// SplitRow appends to fields the values of one encoded row (nil for NULL,
// non-nil for an empty value) and reports whether row is exactly one
// well-formed row.
func SplitRow(fields [][]byte, row []byte) ([][]byte, bool) {
	_, size, ok := scanRow(row, func(f []byte) { fields = append(fields, f) })
	return fields, ok && size == len(row)
}

// scanRow walks the row that starts b, passing each value to field when it
// is not nil (nil for NULL), and returns the row's field count and length.
func scanRow(b []byte, field func([]byte)) (n, size int, ok bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	n = int(int16(binary.BigEndian.Uint16(b)))
	if n < 0 {
		return 0, 0, false
	}
	off := 2
	for range n {
		if len(b)-off < 4 {
			return 0, 0, false
		}
		l := int(int32(binary.BigEndian.Uint32(b[off:])))
		off += 4
		if l == -1 {
			if field != nil {
				field(nil)
			}
			continue
		}
		if l < 0 || l > len(b)-off {
			return 0, 0, false
		}
		if field != nil {
			field(b[off : off+l : off+l])
		}
		off += l
	}
	return n, off, true
}

// AppendField appends one field (nil for NULL) in the row layout.
func AppendField(dst, v []byte) []byte {
	if v == nil {
		return append(dst, 0xff, 0xff, 0xff, 0xff)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	return append(dst, v...)
}

// AppendTuples appends encoded rows (tuples, as Tuples returns them) of
// fields fields each, without re-encoding them. It checks every row's shape
// and appends nothing when one is malformed: tuples may come from outside
// the process (a stream entry), and a malformed one would be sent to
// PostgreSQL as a corrupt stream.
func (e *Encoder) AppendTuples(tuples []byte, fields int) (int, error) {
	return e.AppendTuplesFunc(len(tuples), fields, func(dst []byte) error {
		copy(dst, tuples)
		return nil
	})
}

// AppendTuplesFunc is AppendTuples for size bytes of tuples that fill writes
// straight into the encoder's buffer (a decompressor, say), saving a copy.
// When fill fails or the rows are malformed, nothing is appended.
func (e *Encoder) AppendTuplesFunc(size, fields int, fill func(dst []byte) error) (int, error) {
	e.closeRow()
	if size == 0 {
		return 0, nil
	}
	if need := len(header) + size; cap(e.buf)-len(e.buf) < need {
		// Double, as BeginRow does: a batch grows by whole entries.
		e.buf = slices.Grow(e.buf, max(need, cap(e.buf)))
	}
	keptBuf, keptOffs := len(e.buf), len(e.offs)
	if len(e.buf) == 0 {
		e.buf = append(e.buf, header...)
	}
	base := len(e.buf)
	e.buf = e.buf[:base+size]
	tuples := e.buf[base:]
	fail := func(err error) (int, error) {
		e.buf, e.offs = e.buf[:keptBuf], e.offs[:keptOffs]
		return 0, err
	}
	if err := fill(tuples); err != nil {
		return fail(err)
	}
	n, err := walkTuples(tuples, fields, func(off int) { e.offs = append(e.offs, base+off) })
	if err != nil {
		return fail(err)
	}
	e.rows += n
	return n, nil
}

// CheckTuples returns how many rows of fields fields tuples holds, or an
// error when it is not a run of such rows: tuples from outside the process
// (a stream entry) are checked before PostgreSQL sees them.
func CheckTuples(tuples []byte, fields int) (int, error) {
	return walkTuples(tuples, fields, nil)
}

// EachRow passes each row of tuples (rows of fields fields) to row, split
// into its values (nil for NULL); the slice is reused between calls.
func EachRow(tuples []byte, fields int, row func(values [][]byte)) error {
	var vals [][]byte
	_, err := walkTuples(tuples, fields, func(off int) {
		size, _ := rowSize(tuples[off:], fields)
		vals, _ = SplitRow(vals[:0], tuples[off:off+size])
		row(vals)
	})
	return err
}

// walkTuples walks tuples row by row, passing each row's offset to row when
// it is not nil.
func walkTuples(tuples []byte, fields int, row func(off int)) (int, error) {
	n := 0
	for off := 0; off < len(tuples); n++ {
		size, ok := rowSize(tuples[off:], fields)
		if !ok {
			return 0, fmt.Errorf("pgcopy: tuple %d is not a row of %d fields", n, fields)
		}
		if row != nil {
			row(off)
		}
		off += size
	}
	return n, nil
}

// Header is the start of a binary COPY stream, before its tuples. The slice
// is shared: do not write to it.
func Header() []byte { return header[:len(header):len(header)] }

// Trailer is the end of a binary COPY stream, after its tuples. The slice is
// shared: do not write to it.
func Trailer() []byte { return trailer[:len(trailer):len(trailer)] }

// rowSize returns the length of the row of fields fields that starts b.
func rowSize(b []byte, fields int) (int, bool) {
	if len(b) < 2 || int(int16(binary.BigEndian.Uint16(b))) != fields {
		return 0, false // checked first: a wrong count need not be walked
	}
	_, size, ok := scanRow(b, nil)
	return size, ok
}

// Truncate drops every row from the n-th on.
func (e *Encoder) Truncate(n int) {
	e.closeRow()
	if n < 0 || n >= e.rows {
		return
	}
	e.buf = e.buf[:e.offs[n]]
	e.offs = e.offs[:n]
	e.rows = n
}

// TimestamptzMicros is t as binary timestamptz holds it: microseconds since
// 2000-01-01 UTC, the unit FirstInt64Range returns for a time column.
func TimestamptzMicros(t time.Time) int64 { return t.UnixMicro() - pgEpochMicros }

// FirstInt64Range returns the least and the greatest first value of tuples'
// rows (rows of fields fields), each read as a big-endian int64: a
// timestamptz's microseconds since 2000. ok is false when tuples holds no
// row, a first value that is NULL or not 8 bytes, or a malformed row.
func FirstInt64Range(tuples []byte, fields int) (lo, hi int64, ok bool) {
	if fields < 1 {
		return 0, 0, false
	}
	lo, hi, ok = math.MaxInt64, math.MinInt64, true
	n, err := walkTuples(tuples, fields, func(off int) {
		v := tuples[off+2:] // past the field count: the first value's length
		if int32(binary.BigEndian.Uint32(v)) != 8 {
			ok = false
			return
		}
		x := int64(binary.BigEndian.Uint64(v[4:]))
		lo, hi = min(lo, x), max(hi, x)
	})
	if err != nil || n == 0 || !ok {
		return 0, 0, false
	}
	return lo, hi, true
}

// Piece is the rows of tuples that SplitFirstInt64 put in one range.
type Piece struct {
	Tuples []byte // whole rows, in their order in tuples
	Rows   int
	Lo, Hi int64 // their least and greatest first value; 0 when Rows is 0
}

// SplitFirstInt64 splits tuples (rows of fields fields) by their first value,
// read as FirstInt64Range reads it, at bounds (ascending): piece 0 holds the
// rows below bounds[0], piece k those from bounds[k-1] up to bounds[k]
// (excluded), the last those from the last bound on. The pieces share one
// new buffer, not tuples. ok is false when FirstInt64Range's would be.
func SplitFirstInt64(tuples []byte, fields int, bounds []int64) (pieces []Piece, ok bool) {
	if fields < 1 || len(tuples) == 0 {
		return nil, false
	}
	pieces = make([]Piece, len(bounds)+1)
	// Two walks: the first checks every row and sizes the pieces, the
	// second copies each row into its piece's part of one buffer.
	size := make([]int, len(pieces))
	var err error
	walk := func(row func(k int, r []byte, v int64)) {
		for off := 0; off < len(tuples); {
			n, good := rowSize(tuples[off:], fields)
			if !good || int32(binary.BigEndian.Uint32(tuples[off+2:])) != 8 {
				err = fmt.Errorf("pgcopy: tuple at %d is not a row of %d fields with a first value of 8 bytes", off, fields)
				return
			}
			// Past the field count and the first value's length.
			x := int64(binary.BigEndian.Uint64(tuples[off+6:]))
			k, _ := slices.BinarySearch(bounds, x)
			if k < len(bounds) && bounds[k] == x {
				k++ // a bound starts the piece after it
			}
			row(k, tuples[off:off+n], x)
			off += n
		}
	}
	walk(func(k int, r []byte, _ int64) { size[k] += len(r) })
	if err != nil {
		return nil, false
	}
	buf := make([]byte, 0, len(tuples))
	for k := range pieces {
		pieces[k].Tuples = buf[len(buf) : len(buf) : len(buf)+size[k]]
		buf = buf[:len(buf)+size[k]]
	}
	walk(func(k int, r []byte, x int64) {
		p := &pieces[k]
		if p.Rows == 0 {
			p.Lo, p.Hi = x, x
		}
		p.Tuples = append(p.Tuples, r...)
		p.Rows++
		p.Lo, p.Hi = min(p.Lo, x), max(p.Hi, x)
	})
	return pieces, true
}
