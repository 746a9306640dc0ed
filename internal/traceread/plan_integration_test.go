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
// services, a service's operations and the dependencies of an hour (windowEnd).
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

	end := windowEnd(now)
	hour := TraceQuery{Service: "svc-7", StartMin: end.Add(-time.Hour), StartMax: end, Limit: 20}
	sql, args = r.findSQL(hour)
	noSeqScan("search by service, an hour", explain(sql, args...))
	withAll := hour
	withAll.Operation = "op-0"
	withAll.Attributes = map[string]string{"http.status_code": "500"}
	withAll.DurationMin = time.Millisecond
	sql, args = r.findSQL(withAll)
	noSeqScan("search by service, operation, tag and duration, an hour", explain(sql, args...))

	noSeqScan("services (one step)", explain(r.servicesSQL(), "svc-3"))
	noSeqScan("operations of a service", explain(r.operationsSQL(true), "svc-3", 100, "Server"))
	noSeqScan("dependencies, an hour", explain(r.dependenciesSQL(), end.Add(-time.Hour), end, end.Add(-time.Hour-DependencyParentSlack)))

	// And the answers are right on that table.
	found, err := r.FindTraceIDs(ctx, hour)
	require.NoError(t, err)
	require.Len(t, found, 20)
	services, err := r.Services(ctx)
	require.NoError(t, err)
	require.Len(t, services, planServices)
	deps, err := r.Dependencies(ctx, end.Add(-time.Hour), end)
	require.NoError(t, err)
	require.NotEmpty(t, deps)
	var n int
	require.NoError(t, r.GetTraces(ctx, []TraceRef{{ID: id}}, func(td ptrace.Traces) error {
		n += td.SpanCount()
		return nil
	}))
	require.Equal(t, planSpans, n)
}

// windowEnd is the end of the hour the finders are asked for: the middle of
// the larger part of the generated day in one daily (UTC) partition, so
// that the hour is a small share of every partition it reads at any time of
// day. The last hour is not: soon after midnight it is most of today's
// partition, and reading that one whole is then the right plan.
func windowEnd(now time.Time) time.Time {
	midnight := now.UTC().Truncate(24 * time.Hour)
	if today := now.Sub(midnight); today >= planHours*time.Hour/2 {
		return midnight.Add(today/2 + 30*time.Minute)
	}
	start := now.Add(-planHours * time.Hour)
	return start.Add(midnight.Sub(start)/2 + 30*time.Minute)
}

// At every time of day the plan test's hour lies within the generated day
// and within one daily partition, and is at most a twelfth of that
// partition's generated spans.
func TestWindowEndIsASmallShareOfOnePartition(t *testing.T) {
	day := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	for m := 0; m < 24*60; m += 7 {
		now := day.Add(time.Duration(m) * time.Minute)
		end := windowEnd(now)
		start := end.Add(-time.Hour)
		require.False(t, start.Before(now.Add(-planHours*time.Hour)), "now %v: the hour starts before the generated spans", now)
		require.False(t, end.After(now), "now %v: the hour ends after now", now)
		part := start.Truncate(24 * time.Hour)
		require.Equal(t, part, end.Add(-time.Nanosecond).Truncate(24*time.Hour), "now %v: the hour crosses midnight", now)
		from, to := now.Add(-planHours*time.Hour), now
		if from.Before(part) {
			from = part
		}
		if next := part.Add(24 * time.Hour); to.After(next) {
			to = next
		}
		generated := to.Sub(from)
		require.LessOrEqual(t, 12*time.Hour, generated, "now %v: the hour's partition holds %v of spans", now, generated)
	}
}
