package traceread

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// Limits bound what one request may read and return.
type Limits struct {
	// MaxTraces caps the traces (or trace ids) one search returns; a search
	// asking for more gets this many. A search asking for none gets
	// DefaultTraces.
	MaxTraces     int
	DefaultTraces int
	// MaxTraceIDs caps the trace ids one GetTraces request may name.
	MaxTraceIDs int
	// MaxSpansPerTrace caps the spans read for one trace: the earliest are
	// returned.
	MaxSpansPerTrace int
	// ChunkBytes is about how many bytes of stored span data one emitted
	// ptrace.Traces holds: a large trace is emitted in several parts, each
	// under a gRPC message's size limit.
	ChunkBytes int
	// MaxServices caps the services and the operations listed.
	MaxServices int
}

// DefaultLimits are the limits a zero Limits field stands for.
var DefaultLimits = Limits{
	MaxTraces: 1000, DefaultTraces: 20, MaxTraceIDs: 100, MaxSpansPerTrace: 10000,
	ChunkBytes: 1 << 20, MaxServices: 10000,
}

// ErrTooManyTraceIDs is returned by GetTraces for a request naming more
// trace ids than Limits.MaxTraceIDs.
var ErrTooManyTraceIDs = errors.New("too many trace ids in one request")

// Reader reads the spans of one schema.
type Reader struct {
	pool   *pgxpool.Pool
	limits Limits
	spans  string // the spans view: merged long attributes, contexts joined
	rows   string // spans_rows, the stored table, for what needs no context
}

// New returns a Reader of the schema schemaName (a validated identifier)
// through pool.
func New(pool *pgxpool.Pool, schemaName string, limits Limits) *Reader {
	d := DefaultLimits
	for _, f := range []struct{ v, def *int }{
		{&limits.MaxTraces, &d.MaxTraces}, {&limits.DefaultTraces, &d.DefaultTraces},
		{&limits.MaxTraceIDs, &d.MaxTraceIDs}, {&limits.MaxSpansPerTrace, &d.MaxSpansPerTrace},
		{&limits.ChunkBytes, &d.ChunkBytes}, {&limits.MaxServices, &d.MaxServices},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	limits.DefaultTraces = min(limits.DefaultTraces, limits.MaxTraces)
	return &Reader{pool: pool, limits: limits,
		spans: schema.Qualified(schemaName, "spans"), rows: schema.Qualified(schemaName, "spans_rows")}
}

// TraceRef names a trace and, optionally, the time range its spans start
// in (a zero bound is no bound).
type TraceRef struct {
	ID         pcommon.TraceID
	Start, End time.Time
}

// GetTraces emits the spans of each trace, in the order of refs, a trace in
// one or more parts (consecutive, each of ChunkBytes at most but for a single
// span); a trace without spans emits nothing.
func (r *Reader) GetTraces(ctx context.Context, refs []TraceRef, emit func(ptrace.Traces) error) error {
	if len(refs) > r.limits.MaxTraceIDs {
		return fmt.Errorf("%w: %d, at most %d", ErrTooManyTraceIDs, len(refs), r.limits.MaxTraceIDs)
	}
	for _, ref := range refs {
		if err := r.getTrace(ctx, ref, emit); err != nil {
			return err
		}
	}
	return nil
}

func (r *Reader) getTrace(ctx context.Context, ref TraceRef, emit func(ptrace.Traces) error) error {
	sql, args := r.traceSQL(ref)
	rows, err := r.pool.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("read trace %s: %w", ref.ID, err)
	}
	defer rows.Close()
	a, size := newAssembler(), 0
	var row spanRow
	dest := row.dest()
	for rows.Next() {
		row = spanRow{}
		if err := rows.Scan(dest...); err != nil {
			return fmt.Errorf("read trace %s: %w", ref.ID, err)
		}
		n := len(row.attrs) + len(row.events) + len(row.links) + len(row.resAttrs) + len(row.scopeAttrs) + 256
		if a.spans > 0 && size+n > r.limits.ChunkBytes {
			if err := emit(a.td); err != nil {
				return err
			}
			a, size = newAssembler(), 0
		}
		size += n
		if err := a.add(&row); err != nil {
			return fmt.Errorf("read trace %s: span %x: %w", ref.ID, row.sid.Int64, err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read trace %s: %w", ref.ID, err)
	}
	if a.spans > 0 {
		return emit(a.td)
	}
	return nil
}

// traceSQL is the statement that reads the spans of ref.
func (r *Reader) traceSQL(ref TraceRef) (string, []any) {
	// One statement per trace: on Citus, trace_id = $1 routes it to the
	// trace's one shard. The bounds are written into the statement only when
	// set, so that the planner prunes the partitions outside them.
	var sql strings.Builder
	args := []any{pgtype.UUID{Bytes: ref.ID, Valid: true}}
	fmt.Fprintf(&sql, "SELECT %s FROM %s WHERE trace_id = $1", spanColumns, r.spans)
	if !ref.Start.IsZero() {
		args = append(args, ref.Start)
		fmt.Fprintf(&sql, " AND start_time >= $%d", len(args))
	}
	if !ref.End.IsZero() {
		args = append(args, ref.End)
		fmt.Fprintf(&sql, " AND start_time <= $%d", len(args))
	}
	args = append(args, r.limits.MaxSpansPerTrace)
	fmt.Fprintf(&sql, " ORDER BY start_time, start_time_frac_ns, span_id LIMIT $%d", len(args))

	return sql.String(), args
}

// TraceQuery is a search: the traces with at least one span that matches
// every condition set (a zero field is no condition).
type TraceQuery struct {
	Service   string
	Operation string
	// Attributes match a span's attributes or its resource's, compared as
	// text (an int attribute 200 matches "200"). The key "error" with the
	// value "true" also matches a span whose status is Error.
	Attributes               map[string]string
	StartMin, StartMax       time.Time
	DurationMin, DurationMax time.Duration
	// Limit is the number of traces wanted, capped by Limits.MaxTraces; 0
	// is Limits.DefaultTraces.
	Limit int
}

// FoundTrace is a trace a search found, with the time range of its
// matching spans.
type FoundTrace struct {
	ID         pcommon.TraceID
	Start, End time.Time
}

// FindTraceIDs returns the traces that match q, the most recent first (by
// their latest matching span).
func (r *Reader) FindTraceIDs(ctx context.Context, q TraceQuery) ([]FoundTrace, error) {
	sql, args := r.findSQL(q)
	rows, err := r.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("find traces: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FoundTrace, error) {
		var f FoundTrace
		var id pgtype.UUID
		err := row.Scan(&id, &f.Start, &f.End)
		f.ID = id.Bytes
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("find traces: %w", err)
	}
	return found, nil
}

// findSQL is the statement that finds the traces of q.
func (r *Reader) findSQL(q TraceQuery) (string, []any) {
	limit := q.Limit
	switch {
	case limit <= 0:
		limit = r.limits.DefaultTraces
	case limit > r.limits.MaxTraces:
		limit = r.limits.MaxTraces
	}
	var where []string
	var args []any
	arg := func(v any) string {
		if s, ok := v.(string); ok {
			v = clean(s)
		}
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	where = append(where, "trace_id IS NOT NULL")
	if q.Service != "" {
		where = append(where, "service_name = "+arg(q.Service))
	}
	if q.Operation != "" {
		where = append(where, "span_name = "+arg(q.Operation))
	}
	if !q.StartMin.IsZero() {
		where = append(where, "start_time >= "+arg(q.StartMin))
	}
	if !q.StartMax.IsZero() {
		where = append(where, "start_time <= "+arg(q.StartMax))
	}
	if q.DurationMin > 0 {
		where = append(where, "duration_ns >= "+arg(q.DurationMin.Nanoseconds()))
	}
	if q.DurationMax > 0 {
		where = append(where, "duration_ns <= "+arg(q.DurationMax.Nanoseconds()))
	}
	table := r.rows
	if len(q.Attributes) > 0 {
		// Resource attributes and long span attributes are read as the view
		// merges them.
		table = r.spans
		// Keys in order: the same search is the same statement.
		for _, k := range slices.Sorted(maps.Keys(q.Attributes)) {
			v := q.Attributes[k]
			cond := fmt.Sprintf("span_attributes ->> %[1]s = %[2]s OR resource_attributes ->> %[1]s = %[2]s", arg(k), arg(v))
			if k == "error" && v == "true" {
				// Jaeger's error tag: OTLP says it with the span's status.
				cond += " OR status_code = 'Error'"
			}
			where = append(where, "("+cond+")")
		}
	}
	sql := fmt.Sprintf(`SELECT trace_id, min(start_time), max(end_time) FROM %s WHERE %s
		GROUP BY trace_id ORDER BY max(start_time) DESC, trace_id LIMIT %s`, table, strings.Join(where, " AND "), arg(limit))
	return sql, args
}

// FindTraces emits the traces that match q, as FindTraceIDs orders them,
// each read whole (its spans outside the search's time range too).
func (r *Reader) FindTraces(ctx context.Context, q TraceQuery, emit func(ptrace.Traces) error) error {
	found, err := r.FindTraceIDs(ctx, q)
	if err != nil {
		return err
	}
	for _, f := range found {
		if err := r.getTrace(ctx, TraceRef{ID: f.ID}, emit); err != nil {
			return err
		}
	}
	return nil
}

// clean applies the tables' text stand-in to a search's text, as the
// exporter applied it to what it stored: NUL and each invalid UTF-8 byte
// become U+FFFD (PostgreSQL refuses both in text).
func clean(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == 0 || (r == utf8.RuneError && size == 1) {
			b.WriteRune(utf8.RuneError)
		} else {
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}
