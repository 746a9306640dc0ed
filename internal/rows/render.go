package rows

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// pgEpochUnix is 2000-01-01, where binary timestamptz counts from.
const pgEpochUnix = 946684800

// AppendRowJSON is AppendLayoutRowJSON of tables.DefaultLayout.
func AppendRowJSON(dst []byte, i int, tuple []byte) ([]byte, bool) {
	return AppendLayoutRowJSON(dst, tables.DefaultLayout(), i, tuple)
}

// AppendLayoutRowJSON appends tuple, one encoded row of table i, as a JSON object
// of its columns, written so that jsonb_populate_record reads it back into
// the table's row type (times as ISO 8601, ids as uuid or bigint, NaN and
// infinities as strings, jsonb columns as themselves). It reports false for
// a tuple that is not one row of table i. It serves the rejects table, off
// the hot path.
func AppendLayoutRowJSON(dst []byte, l *tables.Layout, i int, tuple []byte) ([]byte, bool) {
	t := l.Table(i)
	fields, ok := pgcopy.SplitRow(nil, tuple)
	if !ok || len(fields) != len(t.Kinds) {
		return dst, false
	}
	dst = append(dst, '{')
	for j, f := range fields {
		if j > 0 {
			dst = append(dst, ',')
		}
		dst = jsonb.AppendString(dst, t.Columns[j])
		dst = append(dst, ':')
		if f == nil {
			dst = append(dst, "null"...)
			continue
		}
		if dst, ok = appendFieldJSON(dst, t.Kinds[j], f); !ok {
			return dst, false
		}
	}
	return append(dst, '}'), true
}

func appendFieldJSON(dst []byte, k tables.Kind, f []byte) ([]byte, bool) {
	if n := fixedSize(k); n != 0 && len(f) != n || k == tables.KindJSONB && len(f) == 0 {
		return dst, false
	}
	switch k {
	case tables.KindTimestamptz:
		us := int64(binary.BigEndian.Uint64(f))
		ts := time.Unix(us/1e6+pgEpochUnix, us%1e6*1e3).UTC()
		dst = append(dst, '"')
		dst = ts.AppendFormat(dst, "2006-01-02T15:04:05.999999Z07:00")
		return append(dst, '"'), true
	case tables.KindInt16:
		return strconv.AppendInt(dst, int64(int16(binary.BigEndian.Uint16(f))), 10), true
	case tables.KindInt32:
		return strconv.AppendInt(dst, int64(int32(binary.BigEndian.Uint32(f))), 10), true
	case tables.KindInt64:
		return strconv.AppendInt(dst, int64(binary.BigEndian.Uint64(f)), 10), true
	case tables.KindFloat64:
		return jsonb.AppendFloat(dst, math.Float64frombits(binary.BigEndian.Uint64(f))), true
	case tables.KindBool:
		return strconv.AppendBool(dst, f[0] != 0), true
	case tables.KindUUID:
		var s [36]byte
		hex.Encode(s[0:8], f[0:4])
		hex.Encode(s[9:13], f[4:6])
		hex.Encode(s[14:18], f[6:8])
		hex.Encode(s[19:23], f[8:10])
		hex.Encode(s[24:36], f[10:16])
		s[8], s[13], s[18], s[23] = '-', '-', '-', '-'
		dst = append(dst, '"')
		dst = append(dst, s[:]...)
		return append(dst, '"'), true
	case tables.KindText:
		return jsonb.AppendString(dst, string(f)), true
	case tables.KindJSONB:
		doc := f[1:]
		// Embed the document unless jsonb would refuse it (it may be why
		// the row was refused): then keep it as a string.
		if f[0] == 1 && json.Valid(doc) && !bytes.Contains(doc, []byte(`\u0000`)) {
			return append(dst, doc...), true
		}
		return jsonb.AppendString(dst, string(doc)), true
	case tables.KindInt64Array, tables.KindFloat64Array:
		return appendArrayJSON(dst, k, f)
	case tables.KindTextArray:
		return appendTextArrayJSON(dst, f)
	}
	return dst, false
}

// appendTextArrayJSON renders a binary text[] as a JSON array of strings.
func appendTextArrayJSON(dst []byte, f []byte) ([]byte, bool) {
	vals, ok := pgcopy.TextArrayValues(f)
	if !ok {
		return dst, false
	}
	dst = append(dst, '[')
	for i, v := range vals {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = jsonb.AppendString(dst, v)
	}
	return append(dst, ']'), true
}

// fixedSize is the binary size of a fixed-size kind, 0 for the others.
func fixedSize(k tables.Kind) int {
	switch k {
	case tables.KindBool:
		return 1
	case tables.KindInt16:
		return 2
	case tables.KindInt32:
		return 4
	case tables.KindTimestamptz, tables.KindInt64, tables.KindFloat64:
		return 8
	case tables.KindUUID:
		return 16
	}
	return 0
}

// appendArrayJSON renders a one-dimensional binary array without NULLs, the
// only arrays the row writers make.
func appendArrayJSON(dst []byte, k tables.Kind, f []byte) ([]byte, bool) {
	if len(f) < 12 {
		return dst, false
	}
	ndim := binary.BigEndian.Uint32(f)
	if ndim == 0 {
		return append(dst, "[]"...), true
	}
	if ndim != 1 || len(f) < 20 {
		return dst, false
	}
	n := int(binary.BigEndian.Uint32(f[12:]))
	f = f[20:]
	if len(f) != n*12 {
		return dst, false
	}
	dst = append(dst, '[')
	for e := range n {
		if e > 0 {
			dst = append(dst, ',')
		}
		v := binary.BigEndian.Uint64(f[e*12+4:])
		if k == tables.KindFloat64Array {
			dst = jsonb.AppendFloat(dst, math.Float64frombits(v))
		} else {
			dst = strconv.AppendInt(dst, int64(v), 10)
		}
	}
	return append(dst, ']'), true
}
