// Package spangen fills a schema's spans with generated traces inside the
// database (INSERT ... SELECT generate_series), for the plan tests and the
// read benchmarks: a million spans in seconds, where the exporter would take
// minutes. For tests and benchmarks only.
package spangen

import (
	"context"
	"crypto/md5"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/pdata/pcommon"

	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// Shape says what to generate: Traces traces of Spans spans each, over the
// last Hours hours (trace t starts t × Hours/Traces ago), across Services
// services (svc-0...). A trace's spans follow each other by a millisecond,
// each a child of the one before and of another service; the first is a
// Server span, the others Client spans, span names op-0...op-4. One trace in
// a hundred has http.status_code 500 and an Error status, the others 200.
type Shape struct {
	Traces, Spans, Services, Hours int
}

// TraceID is the id of generated trace t.
func TraceID(t int) pcommon.TraceID { return md5.Sum(fmt.Appendf(nil, "%d", t)) }

// Generate writes s's spans into schemaName (migrated) and leaves the table
// as autovacuum leaves an insert-only table: analyzed, its visibility map
// set. The AI spend capture trigger is disabled on the schema's spans_rows
// (the generated spans have no GenAI attributes).
func Generate(ctx context.Context, pool *pgxpool.Pool, schemaName string, s Shape) error {
	q := func(table string) string { return schema.Qualified(schemaName, table) }
	if _, err := pool.Exec(ctx, `INSERT INTO `+q("contexts")+` (context_id, scope_name, resource_attributes, scope_attributes,
		resource_dropped_attributes_count, scope_dropped_attributes_count)
		SELECT md5('ctx' || i)::uuid, 'io.example', jsonb_build_object('service.name', 'svc-' || i, 'host.name', 'host-' || i), '{}', 0, 0
		FROM generate_series(0, $1 - 1) i ON CONFLICT DO NOTHING`, s.Services); err != nil {
		return fmt.Errorf("generate contexts: %w", err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE `+q("spans_rows")+` DISABLE TRIGGER USER`); err != nil {
		return fmt.Errorf("disable triggers: %w", err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+q("spans_rows")+` (start_time, start_time_frac_ns, end_time, duration_ns,
		trace_id, span_id, parent_span_id, flags, service_name, span_name, span_kind, status_code, span_attributes,
		dropped_attributes_count, dropped_events_count, dropped_links_count, context_id)
		SELECT x.ts, 0, x.ts + interval '5 ms', 5000000, md5(t::text)::uuid, t * 16 + k + 1, CASE WHEN k > 0 THEN t * 16 + k END, 0,
		       'svc-' || ((t + k) % $2), 'op-' || (k % 5), CASE WHEN k = 0 THEN 'Server' ELSE 'Client' END,
		       CASE WHEN t % 100 = 0 THEN 'Error' ELSE 'Unset' END,
		       jsonb_build_object('http.status_code', CASE WHEN t % 100 = 0 THEN 500 ELSE 200 END, 'k', k), 0, 0, 0,
		       md5('ctx' || ((t + k) % $2))::uuid
		FROM generate_series(0, $1 - 1) t, generate_series(0, $3 - 1) k,
		     LATERAL (SELECT now() - t * ($4 * interval '1 hour' / $1) + k * interval '1 ms' AS ts) x`,
		s.Traces, s.Services, s.Spans, s.Hours); err != nil {
		return fmt.Errorf("generate spans: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE `+q("spans_rows")+`, `+q("contexts")); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	return nil
}

// Since is how long ago generated trace t starts.
func (s Shape) Since(t int) time.Duration {
	return time.Duration(t) * time.Duration(s.Hours) * time.Hour / time.Duration(s.Traces)
}
