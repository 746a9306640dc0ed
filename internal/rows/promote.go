package rows

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// Promoted attributes. A promoted column is a typed column, added after a
// table's built-in columns, that holds one attribute's value so that queries
// filter and aggregate it without reading JSONB. Its value comes from the
// first of its keys present on the row (a fallback list: a deprecated or a
// vendor name after the standard one); that key alone decides: converted to
// the column's type, or NULL when it does not fit (see convert). A row is
// never refused for it.

// Scope says whose attributes a promoted key is read from.
type Scope uint8

// Scopes.
const (
	ScopeSpan     Scope = iota + 1 // the span's attributes (spans table)
	ScopeLog                       // the log record's attributes (logs table)
	ScopeResource                  // the resource's attributes (both tables)
)

// Source is one attribute key a promoted column is read from.
type Source struct {
	Scope Scope
	Key   string
}

// Promoted describes one promoted column.
type Promoted struct {
	Column string
	// Kind is KindText, KindInt64, KindFloat64, KindBool or KindTimestamptz.
	Kind Kind
	// From is tried in order; the first key present decides. Span keys
	// apply to spans only, log keys to logs only, resource keys to both.
	From []Source
	// Traces and Logs choose the tables that get the column.
	Traces, Logs bool
	// Remove drops the deciding key from its JSONB column when its value was
	// stored in the column (a misfit stays in the JSONB: nothing is lost).
	// A row then no longer round-trips to the original pdata through JSONB
	// alone: the column holds that attribute, typed.
	Remove bool
}

// promoSource is a Source resolved for one table.
type promoSource struct {
	own bool   // the row's own attributes; else the resource's
	key string // attribute key
	bit uint64 // with Remove on a resource key: its bit in Layout.resKeys
}

type promoCol struct {
	kind   Kind
	from   []promoSource
	remove bool
}

// maxResourceRemovals bounds the distinct resource keys that remove may drop,
// one bit each in a mask.
const maxResourceRemovals = 64

// Layout is the tables one exporter writes: the built-in columns, then its
// promoted ones on spans and logs. A Batch encodes rows of its Layout, and
// the writer, the rejects' rendering and the schema checks read the columns
// from the same Layout, so that they cannot drift.
type Layout struct {
	tables  [numTables]Table
	promo   [numTables][]promoCol
	resKeys []string // resource keys that remove may drop, by bit
	desc    []byte   // Descriptor, computed once the layout is complete
}

var defaultLayout = Layout{tables: Tables}

func init() { defaultLayout.desc = defaultLayout.descriptor() }

// DefaultLayout is the built-in tables, without promoted columns: a zero
// Batch uses it.
func DefaultLayout() *Layout { return &defaultLayout }

// Table returns table i of the layout (an Idx constant).
func (l *Layout) Table(i int) *Table { return &l.tables[i] }

// Promoted lists, for table i, its promoted columns' names.
func (l *Layout) Promoted(i int) []string {
	n := len(l.promo[i])
	return l.tables[i].Columns[len(l.tables[i].Columns)-n:]
}

// supportedKinds are the kinds a promoted column may have.
var supportedKinds = map[Kind]string{
	KindText: "text", KindInt64: "bigint", KindFloat64: "double precision",
	KindBool: "boolean", KindTimestamptz: "timestamptz",
}

// KindOfType maps a promoted column's SQL type name (text, bigint, double
// precision, boolean, timestamptz) to its Kind.
func KindOfType(name string) (Kind, bool) {
	for k, n := range supportedKinds {
		if n == name {
			return k, true
		}
	}
	return 0, false
}

// SQLType is the SQL type name of a promoted column's kind, "" for the others.
func (k Kind) SQLType() string { return supportedKinds[k] }

// NewLayout adds promoted to the built-in tables. It refuses a column that
// repeats a name, collides with a built-in column, has an unsupported kind,
// or lacks a key for one of its tables.
func NewLayout(promoted []Promoted) (*Layout, error) {
	l := &Layout{tables: Tables}
	for i := range l.tables {
		// Copy the slices: appending must not touch Tables.
		l.tables[i].Columns = append([]string(nil), Tables[i].Columns...)
		l.tables[i].Kinds = append([]Kind(nil), Tables[i].Kinds...)
	}
	seen := map[string]bool{}
	var errs error
	for _, p := range promoted {
		if err := l.add(p, seen); err != nil {
			errs = errors.Join(errs, fmt.Errorf("promoted column %q: %w", p.Column, err))
		}
	}
	for i := range l.tables {
		if n := len(l.tables[i].Columns); n > maxColumns {
			errs = errors.Join(errs, fmt.Errorf("table %s would have %d columns, over PostgreSQL's %d", l.tables[i].Name, n, maxColumns))
		}
	}
	if errs != nil {
		return nil, errs
	}
	l.desc = l.descriptor()
	return l, nil
}

func (l *Layout) add(p Promoted, seen map[string]bool) error {
	switch {
	case p.Column == "":
		return errors.New("no name")
	case seen[p.Column]:
		return errors.New("named twice")
	case p.Kind.SQLType() == "":
		return errors.New("unsupported type")
	case !p.Traces && !p.Logs:
		return errors.New("no table: it needs traces or logs")
	case len(p.From) == 0:
		return errors.New("no attribute key")
	}
	seen[p.Column] = true
	for _, t := range []struct {
		on  bool
		idx int
		own Scope
	}{{p.Traces, IdxSpans, ScopeSpan}, {p.Logs, IdxLogs, ScopeLog}} {
		if !t.on {
			continue
		}
		tb := &l.tables[t.idx]
		for _, c := range Tables[t.idx].Columns {
			if c == p.Column {
				return fmt.Errorf("collides with a built-in column of %s", tb.Name)
			}
		}
		col := promoCol{kind: p.Kind, remove: p.Remove}
		for _, s := range p.From {
			switch s.Scope {
			case t.own:
				col.from = append(col.from, promoSource{own: true, key: s.Key})
			case ScopeResource:
				src := promoSource{key: s.Key}
				if p.Remove {
					bit, err := l.resourceBit(s.Key)
					if err != nil {
						return err
					}
					src.bit = bit
				}
				col.from = append(col.from, src)
			case ScopeSpan, ScopeLog:
				// The other signal's key: it serves the other table.
			default:
				return fmt.Errorf("key %q has no valid scope", s.Key)
			}
		}
		if len(col.from) == 0 {
			return fmt.Errorf("no key applies to %s: use %s or resource keys", tb.Name, map[Scope]string{ScopeSpan: "span", ScopeLog: "log"}[t.own])
		}
		tb.Columns = append(tb.Columns, p.Column)
		tb.Kinds = append(tb.Kinds, p.Kind)
		l.promo[t.idx] = append(l.promo[t.idx], col)
	}
	for _, s := range p.From {
		if s.Scope == ScopeSpan && !p.Traces || s.Scope == ScopeLog && !p.Logs {
			return fmt.Errorf("key %q is read from a signal the column is not on", s.Key)
		}
	}
	return nil
}

func (l *Layout) resourceBit(key string) (uint64, error) {
	for i, k := range l.resKeys {
		if k == key {
			return 1 << i, nil
		}
	}
	if len(l.resKeys) == maxResourceRemovals {
		return 0, fmt.Errorf("more than %d resource keys to remove", maxResourceRemovals)
	}
	l.resKeys = append(l.resKeys, key)
	return 1 << (len(l.resKeys) - 1), nil
}

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
func convert(kind Kind, v pcommon.Value) promoVal {
	t := v.Type()
	out := promoVal{src: t}
	switch kind {
	case KindText:
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
	case KindInt64:
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
	case KindFloat64:
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
	case KindBool:
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
	case KindTimestamptz:
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

// resolve finds the promoted values of the row whose own attributes are own,
// into b.vals, and the keys remove drops from own into b.skip. It returns the
// resource JSON for the row: without the resource keys remove drops.
func (b *Batch) resolve(cols []promoCol, own pcommon.Map) []byte {
	c := &b.ctx
	vals, skip := b.vals[:0], b.skip[:0]
	var mask uint64
	res := c.resource.Attributes()
	for _, col := range cols {
		var pv promoVal
		for _, src := range col.from {
			m := res
			if src.own {
				m = own
			}
			v, ok := m.Get(src.key)
			if !ok || v.Type() == pcommon.ValueTypeEmpty {
				continue
			}
			pv = convert(col.kind, v)
			if pv.ok && col.remove {
				if src.own {
					skip = append(skip, src.key)
				} else {
					mask |= src.bit
				}
			}
			break
		}
		vals = append(vals, pv)
	}
	b.vals, b.skip = vals, skip
	return c.resourceJSON(mask, b.layout().resKeys)
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
	c.resSkipMask, c.resSkipOK = mask, true
	return c.resSkipJSON
}

// writePromoted writes the values resolve found, in column order.
func (b *Batch) writePromoted(e *pgcopy.Encoder, cols []promoCol) {
	for j, col := range cols {
		v := &b.vals[j]
		if !v.ok {
			e.Null()
			continue
		}
		switch col.kind {
		case KindText:
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
		case KindInt64:
			e.Int64(v.i)
		case KindFloat64:
			e.Float64(v.f)
		case KindBool:
			e.Bool(v.i != 0)
		case KindTimestamptz:
			e.TimestamptzUnixMicro(v.i)
		}
	}
}
