package traceread

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/schema/spangen"
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
// partitions (spangen: in the database, seconds), analyzes them, and requires each finder's statement, as the
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
	shape := spangen.Shape{Traces: planTraces, Spans: planSpans, Services: planServices, Hours: planHours}
	require.NoError(t, spangen.Generate(ctx, pool, name, shape))
	s := func(table string) string { return schema.Qualified(name, table) }
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

	id := spangen.TraceID(5000)
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
