package rows_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// minShare mirrors rows.minShare: what a shrunk value may keep at least.
const minShare = 64

// checkBatch is what PostgreSQL's input functions check, done in Go for every
// field of every row of b, plus the limits: a batch that passes cannot be
// refused for its encoding. It returns the first problem, or nil.
func checkBatch(b *rows.Batch, lim rows.Limits) error {
	for i, t := range tables.Tables {
		if _, err := b.Data(i); err != nil {
			return err
		}
		for r := range b.Rows(i) {
			tuple := b.Tuples(i, r, r+1)
			if err := checkRow(t, tuple, lim); err != nil {
				return fmt.Errorf("%s row %d: %w", t.Name, r, err)
			}
			js, ok := rows.AppendRowJSON(nil, i, tuple)
			if !ok || !json.Valid(js) {
				return fmt.Errorf("%s row %d: bad JSON rendering %q", t.Name, r, js)
			}
		}
	}
	return nil
}

func checkRow(t tables.Table, tuple []byte, lim rows.Limits) error {
	fields, ok := pgcopy.SplitRow(nil, tuple)
	if !ok || len(fields) != len(t.Kinds) {
		return fmt.Errorf("malformed row")
	}
	allSmall := true // every text and jsonb value within the smallest share
	for j, f := range fields {
		col := t.Columns[j]
		if f == nil {
			continue
		}
		switch k := t.Kinds[j]; k {
		case tables.KindText:
			if err := checkText(f, lim); err != nil {
				return fmt.Errorf("%s: %w", col, err)
			}
			allSmall = allSmall && len(f) <= minShare
		case tables.KindJSONB:
			if len(f) == 0 || f[0] != 1 {
				return fmt.Errorf("%s: no jsonb version byte", col)
			}
			if err := checkJSON(f[1:], lim); err != nil {
				return fmt.Errorf("%s: %w", col, err)
			}
			allSmall = allSmall && len(f)-1 <= minShare
		case tables.KindInt64Array, tables.KindFloat64Array:
			if err := checkArray(f); err != nil {
				return fmt.Errorf("%s: %w", col, err)
			}
		case tables.KindTextArray:
			if err := checkTextArray(f, lim); err != nil {
				return fmt.Errorf("%s: %w", col, err)
			}
			// Only a row within the limit keeps long strings apart.
			allSmall = false
		default:
			want := map[tables.Kind]int{tables.KindTimestamptz: 8, tables.KindInt16: 2, tables.KindInt32: 4,
				tables.KindInt64: 8, tables.KindFloat64: 8, tables.KindBool: 1, tables.KindUUID: 16}[k]
			if len(f) != want {
				return fmt.Errorf("%s: %d bytes, want %d", col, len(f), want)
			}
			if k == tables.KindInt16 && strings.HasSuffix(col, "_frac_ns") {
				if v := int16(binary.BigEndian.Uint16(f)); v < 0 || v > 999 {
					return fmt.Errorf("%s: %d out of 0..999", col, v)
				}
			}
		}
	}
	if lim.MaxRow > 0 && len(tuple) > lim.MaxRow && !allSmall {
		return fmt.Errorf("row of %d bytes over the %d limit with values left to cut", len(tuple), lim.MaxRow)
	}
	return nil
}

func checkText(f []byte, lim rows.Limits) error {
	switch {
	case !utf8.Valid(f):
		return fmt.Errorf("invalid UTF-8 %q", f)
	case bytes.IndexByte(f, 0) >= 0:
		return fmt.Errorf("NUL in %q", f)
	case lim.MaxValue > 0 && len(f) > lim.MaxValue:
		return fmt.Errorf("%d bytes over the %d value limit", len(f), lim.MaxValue)
	}
	return nil
}

// checkJSON is what jsonb input refuses: invalid JSON or UTF-8, NUL even
// escaped, nesting beyond what we promise, and strings over the value limit.
func checkJSON(doc []byte, lim rows.Limits) error {
	if !json.Valid(doc) || !utf8.Valid(doc) {
		return fmt.Errorf("invalid JSON %q", doc)
	}
	if bytes.IndexByte(doc, 0) >= 0 || bytes.Contains(doc, []byte(`\u0000`)) {
		return fmt.Errorf("NUL in %q", doc)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	depth := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		switch v := tok.(type) {
		case json.Delim:
			if v == '{' || v == '[' {
				depth++
				// Events and links arrays add an array and an object above
				// each attribute map.
				if depth > jsonb.MaxDepth+3 {
					return fmt.Errorf("nested %d deep", depth)
				}
			} else {
				depth--
			}
		case string:
			if lim.MaxValue > 0 && len(v) > lim.MaxValue {
				return fmt.Errorf("string of %d bytes over the %d value limit", len(v), lim.MaxValue)
			}
		}
	}
}

// checkTextArray is what text[] input refuses, and the long strings'
// column's own shape: pairs of a key and a value longer than
// tables.LongString bytes as given (cleaning and the value limit may
// shorten it since).
func checkTextArray(f []byte, lim rows.Limits) error {
	if len(f) < 20 || binary.BigEndian.Uint32(f) != 1 || binary.BigEndian.Uint32(f[4:]) != 0 ||
		binary.BigEndian.Uint32(f[8:]) != pgcopy.OIDText || binary.BigEndian.Uint32(f[16:]) != 1 {
		return fmt.Errorf("bad text[] header")
	}
	n := int(binary.BigEndian.Uint32(f[12:]))
	if n == 0 || n%2 != 0 {
		return fmt.Errorf("text[] of %d elements: want key and value pairs", n)
	}
	f = f[20:]
	for range n {
		if len(f) < 4 {
			return fmt.Errorf("short text[]")
		}
		l := int(binary.BigEndian.Uint32(f))
		if l > len(f)-4 {
			return fmt.Errorf("text[] element of %d bytes past the end", l)
		}
		if err := checkText(f[4:4+l], lim); err != nil {
			return err
		}
		f = f[4+l:]
	}
	if len(f) != 0 {
		return fmt.Errorf("%d bytes after the text[]", len(f))
	}
	return nil
}

func checkArray(f []byte) error {
	if len(f) < 12 {
		return fmt.Errorf("short array")
	}
	ndim := binary.BigEndian.Uint32(f)
	if ndim == 0 {
		if len(f) != 12 {
			return fmt.Errorf("empty array with %d bytes", len(f))
		}
		return nil
	}
	if ndim != 1 || len(f) < 20 {
		return fmt.Errorf("bad array header")
	}
	n := int(binary.BigEndian.Uint32(f[12:]))
	if len(f) != 20+12*n {
		return fmt.Errorf("array of %d elements in %d bytes", n, len(f))
	}
	return nil
}
