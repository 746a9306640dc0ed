package rows

import (
	"math"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// promoVal is one promoted value found for the current row.
type promoVal struct {
	ok  bool
	src pcommon.ValueType // the attribute's type, for a text column
	i   int64             // bigint, boolean (0/1), timestamptz (Unix µs)
	f   float64
	s   string
}

// convert converts v to kind; ok is false when it does not fit:
//
//   - text: a string as is; an int, double or bool as its decimal or
//     true/false spelling; a map, slice or bytes value does not fit.
//   - bigint: an int; a double or a decimal string only when integral and in
//     range (3.0 fits, 3.7 does not: rounding would invent a count).
//   - double precision: a double or int; a numeric string; NaN and the
//     infinities do not fit (they would poison sums).
//   - boolean: a bool; "true"/"false" (and strconv.ParseBool's 1, t, T, TRUE,
//     0, f, F, FALSE...); an int 0 or 1.
//   - timestamptz: an int as Unix nanoseconds (not negative); an RFC 3339
//     string; a decimal string as Unix nanoseconds.
//
// Strings are trimmed of surrounding spaces before parsing, as PostgreSQL's
// own input functions do.
func convert(kind tables.Kind, v pcommon.Value) promoVal {
	t := v.Type()
	out := promoVal{src: t}
	switch kind {
	case tables.KindText:
		switch t {
		case pcommon.ValueTypeStr:
			out.s, out.ok = v.Str(), true
		case pcommon.ValueTypeInt:
			out.i, out.ok = v.Int(), true
		case pcommon.ValueTypeDouble:
			out.f, out.ok = v.Double(), true
		case pcommon.ValueTypeBool:
			out.ok = true
			if v.Bool() {
				out.i = 1
			}
		}
	case tables.KindInt64:
		switch t {
		case pcommon.ValueTypeInt:
			out.i, out.ok = v.Int(), true
		case pcommon.ValueTypeDouble:
			out.i, out.ok = integral(v.Double())
		case pcommon.ValueTypeStr:
			s := strings.TrimSpace(v.Str())
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				out.i, out.ok = n, true
			} else if f, err := strconv.ParseFloat(s, 64); err == nil {
				out.i, out.ok = integral(f)
			}
		}
	case tables.KindFloat64:
		switch t {
		case pcommon.ValueTypeDouble:
			out.f = v.Double()
			out.ok = !math.IsNaN(out.f) && !math.IsInf(out.f, 0)
		case pcommon.ValueTypeInt:
			out.f, out.ok = float64(v.Int()), true
		case pcommon.ValueTypeStr:
			f, err := strconv.ParseFloat(strings.TrimSpace(v.Str()), 64)
			out.f, out.ok = f, err == nil && !math.IsNaN(f) && !math.IsInf(f, 0)
		}
	case tables.KindBool:
		switch t {
		case pcommon.ValueTypeBool:
			out.ok = true
			if v.Bool() {
				out.i = 1
			}
		case pcommon.ValueTypeInt:
			out.i, out.ok = v.Int(), v.Int() == 0 || v.Int() == 1
		case pcommon.ValueTypeStr:
			if b, err := strconv.ParseBool(strings.TrimSpace(v.Str())); err == nil {
				out.ok = true
				if b {
					out.i = 1
				}
			}
		}
	case tables.KindTimestamptz:
		switch t {
		case pcommon.ValueTypeInt:
			out.i, out.ok = v.Int()/1000, v.Int() >= 0
		case pcommon.ValueTypeStr:
			s := strings.TrimSpace(v.Str())
			if n, err := strconv.ParseInt(s, 10, 64); err == nil {
				out.i, out.ok = n/1000, n >= 0
			} else if ts, err := time.Parse(time.RFC3339Nano, s); err == nil {
				out.i, out.ok = ts.UnixMicro(), true
			}
		}
	}
	return out
}

// integral returns f as an int64 when it is a whole number within range.
func integral(f float64) (int64, bool) {
	if f != math.Trunc(f) || f < -(1<<63) || f >= 1<<63 {
		return 0, false // NaN fails the first test
	}
	return int64(f), true
}

// resolve finds the promoted values of a row of table i, whose own
// attributes are own, into b.vals, and the keys remove drops from own into
// b.skip. It returns the resource JSON for the row: without the resource keys
// remove drops.
//
// The own attributes are read in one pass (ownKeys) rather than with a
// Map.Get per source key, which scans the map each time: the genai preset
// has 30 span keys. A repeated key's first entry counts, as with Get.
func (b *Batch) resolve(i int, cols []tables.PromoColumn, own pcommon.Map) []byte {
	c := &b.ctx
	ix := b.ownKeys(i)
	b.hitGen++
	if b.hitGen == 0 { // wrapped: no stamp may match a past row's
		clear(b.hitAt)
		b.hitGen = 1
	}
	gen := b.hitGen
	for k, v := range own.All() {
		for _, r := range ix.match(k) {
			if b.hitAt[r] != gen {
				b.hitAt[r], b.hitVal[r] = gen, v
			}
		}
	}
	vals, skip := b.vals[:0], b.skip[:0]
	var mask uint64
	res := c.resource.Attributes()
	for j, col := range cols {
		var pv promoVal
		for si, src := range col.From {
			var v pcommon.Value
			if src.Own {
				r := ix.refs[j][si]
				if b.hitAt[r] != gen {
					continue
				}
				v = b.hitVal[r]
			} else {
				var ok bool
				if v, ok = res.Get(src.Key); !ok {
					continue
				}
			}
			if v.Type() == pcommon.ValueTypeEmpty {
				continue
			}
			pv = convert(col.Kind, v)
			if pv.ok && col.Remove {
				if src.Own {
					skip = append(skip, src.Key)
				} else {
					mask |= src.Bit
				}
			}
			break
		}
		vals = append(vals, pv)
	}
	b.vals, b.skip = vals, skip
	return c.resourceJSON(mask, b.layout().ResourceKeys())
}

// ownKeyIndex finds which promoted sources of one table an attribute key
// feeds. Each own source is a ref, numbered from 0; keys are bucketed by
// length, so that most attribute keys are passed over after one lookup and
// the rest compared with a few keys of their length.
type ownKeyIndex struct {
	byLen [64][]ownKey // keys of length n < 63 at n; longer ones at 63
	refs  [][]int      // per column, per source: its ref (own sources)
}

type ownKey struct {
	key  string
	refs []int
}

// match returns the refs that key k feeds, nil when none. Keys of one
// length often share a prefix (gen_ai.usage.…): the last byte is compared
// first.
func (x *ownKeyIndex) match(k string) []int {
	keys := x.byLen[min(len(k), 63)]
	if len(k) == 0 {
		if len(keys) == 0 {
			return nil
		}
		return keys[0].refs // the empty key, should one be promoted
	}
	last := k[len(k)-1]
	for _, ok := range keys {
		if ok.key[len(ok.key)-1] == last && ok.key == k {
			return ok.refs
		}
	}
	return nil
}

// ownKeys returns table i's index, built on first use for the batch's layout.
func (b *Batch) ownKeys(i int) *ownKeyIndex {
	lay := b.layout()
	if b.ownLay != lay {
		b.ownLay, b.ownIdx = lay, [tables.NumTables]*ownKeyIndex{}
	}
	if x := b.ownIdx[i]; x != nil {
		return x
	}
	x := &ownKeyIndex{}
	n := 0
	for _, col := range lay.PromoColumns(i) {
		refs := make([]int, len(col.From))
		for si, src := range col.From {
			if !src.Own {
				continue
			}
			refs[si] = n
			bucket := &x.byLen[min(len(src.Key), 63)]
			found := false
			for k := range *bucket {
				if (*bucket)[k].key == src.Key {
					(*bucket)[k].refs = append((*bucket)[k].refs, n)
					found = true
				}
			}
			if !found {
				*bucket = append(*bucket, ownKey{key: src.Key, refs: []int{n}})
			}
			n++
		}
		x.refs = append(x.refs, refs)
	}
	if len(b.hitAt) < n {
		b.hitAt, b.hitVal = make([]uint32, n), make([]pcommon.Value, n)
	}
	b.ownIdx[i] = x
	return x
}

// resourceJSON is the resource's JSON without the keys of mask. Rows under
// one resource usually drop the same keys: the last such document is kept.
func (c *context) resourceJSON(mask uint64, keys []string) []byte {
	if mask == 0 {
		return c.resJSON
	}
	if c.resSkipOK && c.resSkipMask == mask {
		return c.resSkipJSON
	}
	skip := c.resSkipKeys[:0]
	for i, k := range keys {
		if mask&(1<<i) != 0 {
			skip = append(skip, k)
		}
	}
	c.resSkipKeys = skip
	c.resSkipJSON = c.json.AppendMapSkip(c.resSkipJSON[:0], c.resource.Attributes(), skip)
	c.gen++
	c.resSkipMask, c.resSkipOK = mask, true
	return c.resSkipJSON
}

// writePromoted writes the values resolve found, in column order.
func (b *Batch) writePromoted(e *pgcopy.Encoder, cols []tables.PromoColumn) {
	for j, col := range cols {
		v := &b.vals[j]
		if !v.ok {
			e.Null()
			continue
		}
		switch col.Kind {
		case tables.KindText:
			switch v.src {
			case pcommon.ValueTypeStr:
				e.Text(v.s)
			case pcommon.ValueTypeInt:
				pos := e.Begin()
				e.AppendBuf(func(d []byte) []byte { return strconv.AppendInt(d, v.i, 10) })
				e.End(pos)
			case pcommon.ValueTypeDouble:
				pos := e.Begin()
				e.AppendBuf(func(d []byte) []byte { return strconv.AppendFloat(d, v.f, 'g', -1, 64) })
				e.End(pos)
			default: // bool
				pos := e.Begin()
				e.AppendBuf(func(d []byte) []byte { return strconv.AppendBool(d, v.i != 0) })
				e.End(pos)
			}
		case tables.KindInt64:
			e.Int64(v.i)
		case tables.KindFloat64:
			e.Float64(v.f)
		case tables.KindBool:
			e.Bool(v.i != 0)
		case tables.KindTimestamptz:
			e.TimestamptzUnixMicro(v.i)
		}
	}
}
