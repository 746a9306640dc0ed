package traceread

import (
	"context"
	"crypto/md5"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

var seqScanRe = regexp.MustCompile(`Seq Scan on (\S+)`)

// planTraces × planSpans spans are generated in the database for the plan
// test, over the last planHours hours, across planServices services.
const (
	planTraces   = 100_000
	planSpans    = 10
	planServices = 20
	planHours    = 24
)

// TestPlans generates a million spans in a test-owned schema with daily
// partitions (INSERT ... SELECT generate_series, not through the exporter:
// seconds), analyzes them, and requires each finder's statement, as the
// Reader builds it, to read the spans through an index: no sequential scan
// of a spans partition for a trace by id, a search by service and time, the
// services, a service's operations and the dependencies of the last hour.
func TestPlans(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: generates a million spans")
	}
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	conn.Release()
	_, err = schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: 24 * time.Hour, Premake: 1})
	require.NoError(t, err)

	began := time.Now()
	s := func(table string) string { return schema.Qualified(name, table) }
	_, err = pool.Exec(ctx, `INSERT INTO `+s("contexts")+` (context_id, scope_name, resource_attributes, scope_attributes,
		resource_dropped_attributes_count, scope_dropped_attributes_count)
		SELECT md5('ctx' || i)::uuid, 'io.example', jsonb_build_object('service.name', 'svc-' || i, 'host.name', 'host-' || i), '{}', 0, 0
		FROM generate_series(0, $1 - 1) i`, planServices)
	require.NoError(t, err)
	// Trace t starts t × (planHours / planTraces) ago; its spans follow each
	// other by a millisecond, each of another service than its parent.
	_, err = pool.Exec(ctx, `ALTER TABLE `+s("spans_rows")+` DISABLE TRIGGER USER`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO `+s("spans_rows")+` (start_time, start_time_frac_ns, end_time, duration_ns,
		trace_id, span_id, parent_span_id, flags, service_name, span_name, span_kind, status_code, span_attributes,
		dropped_attributes_count, dropped_events_count, dropped_links_count, context_id)
		SELECT x.ts, 0, x.ts + interval '5 ms', 5000000, md5(t::text)::uuid, t * 16 + k + 1, CASE WHEN k > 0 THEN t * 16 + k END, 0,
		       'svc-' || ((t + k) % $2), 'op-' || (k % 5), CASE WHEN k = 0 THEN 'Server' ELSE 'Client' END,
		       CASE WHEN t % 100 = 0 THEN 'Error' ELSE 'Unset' END,
		       jsonb_build_object('http.status_code', CASE WHEN t % 100 = 0 THEN 500 ELSE 200 END, 'k', k), 0, 0, 0,
		       md5('ctx' || ((t + k) % $2))::uuid
		FROM generate_series(0, $1 - 1) t, generate_series(0, $3 - 1) k,
		     LATERAL (SELECT now() - t * ($4 * interval '1 hour' / $1) + k * interval '1 ms' AS ts) x`,
		planTraces, planServices, planSpans, planHours)
	require.NoError(t, err)
	// As autovacuum leaves an insert-only table: analyzed, its visibility
	// map set (index-only scans).
	_, err = pool.Exec(ctx, `VACUUM ANALYZE `+s("spans_rows")+`, `+s("contexts"))
	require.NoError(t, err)
	t.Logf("%d spans generated and analyzed in %v", planTraces*planSpans, time.Since(began).Round(time.Millisecond))

	r := New(pool, name, Limits{})
	explain := func(sql string, args ...any) string {
		t.Helper()
		rows, err := pool.Query(ctx, "EXPLAIN "+sql, args...)
		require.NoError(t, err)
		var lines []string
		for rows.Next() {
			var l string
			require.NoError(t, rows.Scan(&l))
			lines = append(lines, l)
		}
		require.NoError(t, rows.Err())
		return strings.Join(lines, "\n")
	}
	// A sequential scan of an empty partition (tomorrow's, the default
	// one) reads nothing; one of a partition that holds spans reads them all.
	noSeqScan := func(what, plan string) {
		t.Helper()
		t.Logf("%s:\n%s", what, plan)
		for _, m := range seqScanRe.FindAllStringSubmatch(plan, -1) {
			if !strings.HasPrefix(m[1], "spans") {
				continue
			}
			var pages int
			require.NoError(t, pool.QueryRow(ctx, `SELECT relpages FROM pg_class WHERE oid = $1::regclass`, s(m[1])).Scan(&pages))
			require.Zerof(t, pages, "%s reads %s, a partition with spans, whole:\n%s", what, m[1], plan)
		}
	}

	id := md5.Sum([]byte("5000"))
	now := time.Now()
	sql, args := r.traceSQL(TraceRef{ID: id})
	noSeqScan("trace by id", explain(sql, args...))
	sql, args = r.traceSQL(TraceRef{ID: id, Start: now.Add(-2 * time.Hour), End: now})
	noSeqScan("trace by id, time bounds", explain(sql, args...))

	hour := TraceQuery{Service: "svc-7", StartMin: now.Add(-time.Hour), StartMax: now, Limit: 20}
	sql, args = r.findSQL(hour)
	noSeqScan("search by service, last hour", explain(sql, args...))
	withAll := hour
	withAll.Operation = "op-0"
	withAll.Attributes = map[string]string{"http.status_code": "500"}
	withAll.DurationMin = time.Millisecond
	sql, args = r.findSQL(withAll)
	noSeqScan("search by service, operation, tag and duration, last hour", explain(sql, args...))

	noSeqScan("services (one step)", explain(r.servicesSQL(), "svc-3"))
	noSeqScan("operations of a service", explain(r.operationsSQL(true), "svc-3", 100, "Server"))
	noSeqScan("dependencies, last hour", explain(r.dependenciesSQL(), now.Add(-time.Hour), now, now.Add(-time.Hour-DependencyParentSlack)))

	// And the answers are right on that table.
	found, err := r.FindTraceIDs(ctx, hour)
	require.NoError(t, err)
	require.Len(t, found, 20)
	services, err := r.Services(ctx)
	require.NoError(t, err)
	require.Len(t, services, planServices)
	deps, err := r.Dependencies(ctx, now.Add(-time.Hour), now)
	require.NoError(t, err)
	require.NotEmpty(t, deps)
	var n int
	require.NoError(t, r.GetTraces(ctx, []TraceRef{{ID: id}}, func(td ptrace.Traces) error {
		n += td.SpanCount()
		return nil
	}))
	require.Equal(t, planSpans, n)
}
