package traceread

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Services lists the services that have spans, in order (spans without a
// service name have none to list). It walks the
// service index a service at a time (a loose index scan), so it reads one
// index entry per service, not the spans; the same statement works on
// Citus, where each step is a min() over the shards.
func (r *Reader) Services(ctx context.Context) ([]string, error) {
	sql := r.servicesSQL()
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
	return out, nil
}

// servicesSQL is the statement of one step of Services: the next service
// name after $1.
func (r *Reader) servicesSQL() string {
	return fmt.Sprintf("SELECT min(service_name) FROM %s WHERE service_name > $1", r.rows)
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
	if spanKind != "" {
		k, ok := jaegerKinds[strings.ToLower(spanKind)]
		if !ok {
			return nil, nil
		}
		args = append(args, k)
	}
	rows, err := r.pool.Query(ctx, r.operationsSQL(spanKind != ""), args...)
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

// operationsSQL lists the operations of service $1, at most $2, of kind $3
// when byKind. It is an index-only scan of the service's entries in the
// service index, which includes span_name and span_kind.
func (r *Reader) operationsSQL(byKind bool) string {
	cond := ""
	if byKind {
		cond = " AND span_kind = $3"
	}
	return fmt.Sprintf(`SELECT DISTINCT span_name, span_kind FROM %s WHERE service_name = $1%s
		ORDER BY span_name, span_kind LIMIT $2`, r.rows, cond)
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

// DependencyParentSlack is how long before the window of Dependencies a
// parent span may have started and still be counted: the parents are read
// from the window widened by it, not from every partition.
const DependencyParentSlack = time.Hour

// Dependencies counts, for each pair of services, the spans of the second
// whose parent span is of the first, among the spans that start in
// [start, end] and whose parent starts at most DependencyParentSlack before
// start. Calls within a service are not dependencies.
func (r *Reader) Dependencies(ctx context.Context, start, end time.Time) ([]Dependency, error) {
	rows, err := r.pool.Query(ctx, r.dependenciesSQL(), start, end, start.Add(-DependencyParentSlack))
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

// dependenciesSQL counts the calls between services of the spans that start
// in [$1, $2], their parents starting in [$3, $2]. Each child looks its
// parent up by the (trace_id, span_id) index: the work grows with the
// spans of the window, not with the partitions' (OFFSET 0 keeps the
// planner from making it a hash join over the whole parent side). The join
// is on the trace id, the distribution column on Citus: each shard joins
// its own traces.
func (r *Reader) dependenciesSQL() string {
	return fmt.Sprintf(`SELECT p.service_name, c.service_name, count(*)
		FROM %[1]s c CROSS JOIN LATERAL (
			SELECT x.service_name FROM %[1]s x
			WHERE x.trace_id = c.trace_id AND x.span_id = c.parent_span_id AND x.start_time >= $3 AND x.start_time <= $2
			OFFSET 0) p
		WHERE c.start_time >= $1 AND c.start_time <= $2 AND c.parent_span_id IS NOT NULL
		  AND p.service_name <> c.service_name
		GROUP BY 1, 2 ORDER BY 1, 2`, r.rows)
}
