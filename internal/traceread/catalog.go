package traceread

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Services lists the services that have spans, in order. It walks the
// service index a service at a time (a loose index scan), so it reads one
// index entry per service, not the spans; the same statement works on
// Citus, where each step is a min() over the shards.
func (r *Reader) Services(ctx context.Context) ([]string, error) {
	sql := fmt.Sprintf("SELECT min(service_name) FROM %s WHERE service_name > $1", r.rows)
	var out []string
	last := ""
	for len(out) < r.limits.MaxServices {
		var next *string
		if err := r.pool.QueryRow(ctx, sql, last).Scan(&next); err != nil {
			return nil, fmt.Errorf("list services: %w", err)
		}
		if next == nil {
			break
		}
		out = append(out, *next)
		last = *next
	}
	// The empty service name is a name too (a resource whose service.name
	// is ""), but Jaeger has no use for it.
	return out, nil
}

// Operation is a span name of a service, with its span kind as Jaeger names
// it ("server", "client", "producer", "consumer", "internal", or "" for
// unspecified).
type Operation struct {
	Name, SpanKind string
}

// Operations lists the span names and kinds of service, in order; a
// non-empty spanKind keeps those of that kind only.
func (r *Reader) Operations(ctx context.Context, service, spanKind string) ([]Operation, error) {
	args := []any{service, r.limits.MaxServices}
	cond := ""
	if spanKind != "" {
		k, ok := jaegerKinds[strings.ToLower(spanKind)]
		if !ok {
			return nil, nil
		}
		args = append(args, k)
		cond = " AND span_kind = $3"
	}
	// An index-only scan of the service's entries in the service index,
	// which includes span_name and span_kind.
	sql := fmt.Sprintf(`SELECT DISTINCT span_name, span_kind FROM %s WHERE service_name = $1%s
		ORDER BY span_name, span_kind LIMIT $2`, r.rows, cond)
	rows, err := r.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	ops, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Operation, error) {
		var op Operation
		var kind string
		err := row.Scan(&op.Name, &kind)
		op.SpanKind = kindNames[kind]
		return op, err
	})
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return ops, nil
}

var (
	// jaegerKinds maps Jaeger's span kind names to the span_kind column's,
	// kindNames the other way (filled with spanKinds).
	jaegerKinds = map[string]string{}
	kindNames   = map[string]string{}
)

// Dependency is a count of calls from parent's spans to child's.
type Dependency struct {
	Parent, Child string
	Calls         uint64
}

// Dependencies counts, for each pair of services, the spans of the second
// whose parent span is of the first, among the spans that start in
// [start, end] (their parents may start at any time). Calls within a
// service are not dependencies.
func (r *Reader) Dependencies(ctx context.Context, start, end time.Time) ([]Dependency, error) {
	// The join is on the trace id, the distribution column on Citus: each
	// shard joins its own traces.
	sql := fmt.Sprintf(`SELECT p.service_name, c.service_name, count(*)
		FROM %[1]s c JOIN %[1]s p ON p.trace_id = c.trace_id AND p.span_id = c.parent_span_id
		WHERE c.start_time >= $1 AND c.start_time <= $2 AND c.parent_span_id IS NOT NULL
		  AND p.service_name <> c.service_name
		GROUP BY 1, 2 ORDER BY 1, 2`, r.rows)
	rows, err := r.pool.Query(ctx, sql, start, end)
	if err != nil {
		return nil, fmt.Errorf("read dependencies: %w", err)
	}
	deps, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Dependency, error) {
		var d Dependency
		var n int64
		err := row.Scan(&d.Parent, &d.Child, &n)
		d.Calls = uint64(n)
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("read dependencies: %w", err)
	}
	return deps, nil
}
