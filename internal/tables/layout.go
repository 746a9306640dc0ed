package tables

import (
	"errors"
	"fmt"
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

// PromoSource is a Source resolved for one table.
type PromoSource struct {
	Own bool   // the row's own attributes; else the resource's
	Key string // attribute key
	Bit uint64 // with Remove on a resource key: its bit in ResourceKeys
}

// PromoColumn is a promoted column resolved for one table: what the row
// writers read to fill it.
type PromoColumn struct {
	Kind   Kind
	From   []PromoSource
	Remove bool
}

// maxResourceRemovals bounds the distinct resource keys that remove may drop,
// one bit each in a mask.
const maxResourceRemovals = 64

// Layout is the tables one exporter writes: the built-in columns, then its
// promoted ones on spans and logs. A rows.Batch encodes rows of its Layout, and
// the writer, the rejects' rendering and the schema checks read the columns
// from the same Layout, so that they cannot drift.
type Layout struct {
	tables  [NumTables]Table
	promo   [NumTables][]PromoColumn
	resKeys []string // resource keys that remove may drop, by bit
	desc    []byte   // Descriptor, computed once the layout is complete
	// shardKey: every table ends with ShardKeyColumn (distribution: citus).
	shardKey bool
}

var defaultLayout = Layout{tables: Tables}

func init() { defaultLayout.desc = defaultLayout.descriptor() }

// DefaultLayout is the built-in tables, without promoted columns: a zero
// Batch uses it.
func DefaultLayout() *Layout { return &defaultLayout }

// Table returns table i of the layout (an Idx constant).
func (l *Layout) Table(i int) *Table { return &l.tables[i] }

// PromoColumns lists table i's promoted columns, in column order (they
// follow the built-in ones).
func (l *Layout) PromoColumns(i int) []PromoColumn { return l.promo[i] }

// ResourceKeys are the resource keys that Remove may drop, by bit.
func (l *Layout) ResourceKeys() []string { return l.resKeys }

// Promoted lists, for table i, its promoted columns' names.
func (l *Layout) Promoted(i int) []string {
	end := l.promoEnd(i)
	return l.tables[i].Columns[end-len(l.promo[i]) : end]
}

// PromotedKinds lists, for table i, its promoted columns' kinds.
func (l *Layout) PromotedKinds(i int) []Kind {
	end := l.promoEnd(i)
	return l.tables[i].Kinds[end-len(l.promo[i]) : end]
}

// promoEnd is where table i's promoted columns end: the shard key follows.
func (l *Layout) promoEnd(i int) int {
	if l.HasShardKey(i) {
		return len(l.tables[i].Columns) - 1
	}
	return len(l.tables[i].Columns)
}

// ShardKeyColumn is the distribution column on Citus (distribution: citus,
// see internal/schema/citus/distribute.sql) of the logs and metric tables:
// a uuid that is a log's trace id when it has one, so that it is colocated
// with its trace's spans (distributed by trace_id), and otherwise derived
// from the row (a log outside a trace) or from its series (a metric point),
// so that those tables spread evenly. The real trace_id column is left as it
// is, NULL when absent.
const ShardKeyColumn = "shard_key"

// WithShardKey returns l with ShardKeyColumn added at the end of every table
// but spans and the context dictionary (a reference table). Only distribution: citus writes it: one PostgreSQL does not
// store its 16 bytes a row.
func (l *Layout) WithShardKey() *Layout {
	if l.shardKey {
		return l
	}
	out := &Layout{tables: l.tables, promo: l.promo, resKeys: l.resKeys, shardKey: true}
	for i := range l.tables {
		if !out.HasShardKey(i) {
			continue
		}
		t := &out.tables[i]
		t.Columns = append(append([]string(nil), t.Columns...), ShardKeyColumn)
		t.Kinds = append(append([]Kind(nil), t.Kinds...), KindUUID)
	}
	out.desc = out.descriptor()
	return out
}

// HasShardKey reports whether table i ends with ShardKeyColumn.
func (l *Layout) HasShardKey(i int) bool {
	return l.shardKey && i != IdxSpans && i != IdxContexts
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
		if n := len(l.tables[i].Columns); n > MaxColumns {
			errs = errors.Join(errs, fmt.Errorf("table %s would have %d columns, over PostgreSQL's %d", l.tables[i].Name, n, MaxColumns))
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
		col := PromoColumn{Kind: p.Kind, Remove: p.Remove}
		for _, s := range p.From {
			switch s.Scope {
			case t.own:
				col.From = append(col.From, PromoSource{Own: true, Key: s.Key})
			case ScopeResource:
				src := PromoSource{Key: s.Key}
				if p.Remove {
					bit, err := l.resourceBit(s.Key)
					if err != nil {
						return err
					}
					src.Bit = bit
				}
				col.From = append(col.From, src)
			case ScopeSpan, ScopeLog:
				// The other signal's key: it serves the other table.
			default:
				return fmt.Errorf("key %q has no valid scope", s.Key)
			}
		}
		if len(col.From) == 0 {
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
