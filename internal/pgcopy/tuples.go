package pgcopy

import (
	"bytes"
	"encoding/binary"
	"io"
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
	if len(row) < 2 {
		return fields, false
	}
	n := int(int16(binary.BigEndian.Uint16(row)))
	row = row[2:]
	if n < 0 {
		return fields, false
	}
	for range n {
		if len(row) < 4 {
			return fields, false
		}
		l := int(int32(binary.BigEndian.Uint32(row)))
		row = row[4:]
		if l == -1 {
			fields = append(fields, nil)
			continue
		}
		if l < 0 || l > len(row) {
			return fields, false
		}
		fields = append(fields, row[:l:l])
		row = row[l:]
	}
	return fields, len(row) == 0
}

// AppendField appends one field (nil for NULL) in the row layout.
func AppendField(dst, v []byte) []byte {
	if v == nil {
		return append(dst, 0xff, 0xff, 0xff, 0xff)
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(v)))
	return append(dst, v...)
}
