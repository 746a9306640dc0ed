package traceread_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// extensionLimits are the extension's default limits, so the Reader here is
// the one a default-configured extension serves.
var extensionLimits = traceread.Limits{MaxTraces: 1000, DefaultTraces: 20, MaxTraceIDs: 100, MaxSpansPerTrace: 10000}

// TestStreamingReplica writes traces on a throwaway primary, waits until its
// streaming hot standby has replayed them, and runs every finder on the
// standby: each answer is the primary's, and the full-fidelity fixture
// comes back from the standby exactly as it went in.
func TestStreamingReplica(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pglocal.NewCluster("pg_basebackup")
	if err != nil {
		pgtest.Unavailable(t, "%v (make deps)", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the servers: %v", err)
		}
	})
	p, err := c.Primary(ctx, "primary", pglocal.ReplicationSettings)
	require.NoError(t, err)
	s, err := c.Standby(ctx, "standby", p)
	require.NoError(t, err)
	primary, err := pgxpool.New(ctx, p.URL)
	require.NoError(t, err)
	defer primary.Close()
	standby, err := pgxpool.New(ctx, s.URL)
	require.NoError(t, err)
	defer standby.Close()

	const name = "otel"
	conn, err := primary.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	conn.Release()

	td := rowstest.Traces()
	want := ptrace.NewTraces()
	td.CopyTo(want)
	rowstest.NormTraces(want)
	write(t, primary, name, td)
	now := time.Now().UTC().Truncate(time.Millisecond)
	write(t, primary, name, makeTrace(1,
		spanSpec{service: "frontend", name: "GET /", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-time.Minute), dur: time.Second,
			attrs: map[string]any{"http.status_code": 200}, resAttrs: map[string]any{"deployment.environment": "prod"}},
		spanSpec{service: "backend", name: "handle", kind: ptrace.SpanKindServer, id: 2, parent: 1, start: now.Add(-time.Minute), dur: time.Millisecond},
		spanSpec{service: "backend", name: "SELECT", kind: ptrace.SpanKindClient, id: 3, parent: 2, start: now.Add(-time.Minute), dur: time.Millisecond, errored: true},
	))
	write(t, primary, name, makeTrace(2,
		spanSpec{service: "frontend", name: "GET /cart", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-2 * time.Minute), dur: 3 * time.Second,
			attrs: map[string]any{"http.status_code": 500}},
		spanSpec{service: "cart", name: "load", kind: ptrace.SpanKindServer, id: 2, parent: 1, start: now.Add(-2 * time.Minute), dur: time.Second},
	))

	require.NoError(t, pglocal.WaitReplayed(ctx, primary, standby, time.Minute))
	var inRecovery bool
	require.NoError(t, standby.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.True(t, inRecovery, "the standby is a hot standby")
	_, err = standby.Exec(ctx, "CREATE TABLE proof (x int)")
	require.Error(t, err, "the standby refuses writes")

	onPrimary := traceread.New(primary, name, extensionLimits)
	onStandby := traceread.New(standby, name, extensionLimits)

	// Trace by id: the fixture with every OTel field round-trips through the
	// standby, and the primary answers the same.
	var traces []pcommon.TraceID
	seen := map[pcommon.TraceID]bool{}
	for _, rs := range want.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				if id := sp.TraceID(); !id.IsEmpty() && !seen[id] {
					seen[id] = true
					traces = append(traces, id)
				}
			}
		}
	}
	require.Len(t, traces, 2)
	for _, id := range append(traces, traceID(1), traceID(2)) {
		get := func(r *traceread.Reader) []ptrace.Traces {
			return collect(t, func(emit func(ptrace.Traces) error) error {
				return r.GetTraces(ctx, []traceread.TraceRef{{ID: id}}, emit)
			})
		}
		fromStandby := get(onStandby)
		require.NotEmpty(t, fromStandby, "trace %s on the standby", id)
		assert.Equal(t, flat(t, get(onPrimary)...), flat(t, fromStandby...), "trace %s", id)
		if seen[id] {
			assert.Equal(t, flat(t, only(want, id)), flat(t, fromStandby...), "trace %s as written", id)
		}
	}

	// Search: ids and whole traces, by service, operation, span and
	// resource attributes, duration and time.
	queries := []traceread.TraceQuery{
		{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now},
		{Service: "frontend", Operation: "GET /", StartMin: now.Add(-time.Hour), StartMax: now},
		{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now, Attributes: map[string]string{"http.status_code": "500"}},
		{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now, Attributes: map[string]string{"deployment.environment": "prod"}},
		{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now, DurationMin: 2 * time.Second},
		{Service: "backend", StartMin: now.Add(-time.Hour), StartMax: now, Attributes: map[string]string{"error": "true"}},
	}
	wantIDs := [][]pcommon.TraceID{{traceID(1), traceID(2)}, {traceID(1)}, {traceID(2)}, {traceID(1)}, {traceID(2)}, {traceID(1)}}
	for i, q := range queries {
		fromStandby, err := onStandby.FindTraceIDs(ctx, q)
		require.NoError(t, err, "query %d", i)
		fromPrimary, err := onPrimary.FindTraceIDs(ctx, q)
		require.NoError(t, err, "query %d", i)
		assert.Equal(t, fromPrimary, fromStandby, "query %d", i)
		assert.ElementsMatch(t, wantIDs[i], ids(fromStandby), "query %d", i)
		find := func(r *traceread.Reader) []string {
			return flat(t, collect(t, func(emit func(ptrace.Traces) error) error { return r.FindTraces(ctx, q, emit) })...)
		}
		got := find(onStandby)
		assert.NotEmpty(t, got, "query %d", i)
		assert.Equal(t, find(onPrimary), got, "query %d", i)
	}

	// Services, operations (all kinds and one kind), dependencies.
	services, err := onStandby.Services(ctx)
	require.NoError(t, err)
	primaryServices, err := onPrimary.Services(ctx)
	require.NoError(t, err)
	assert.Equal(t, primaryServices, services)
	assert.Subset(t, services, []string{"backend", "cart", "frontend"})
	for _, kind := range []string{"", "server", "client"} {
		ops, err := onStandby.Operations(ctx, "backend", kind)
		require.NoError(t, err)
		primaryOps, err := onPrimary.Operations(ctx, "backend", kind)
		require.NoError(t, err)
		assert.Equal(t, primaryOps, ops, "kind %q", kind)
		assert.NotEmpty(t, ops, "kind %q", kind)
	}
	deps, err := onStandby.Dependencies(ctx, now.Add(-time.Hour), now)
	require.NoError(t, err)
	primaryDeps, err := onPrimary.Dependencies(ctx, now.Add(-time.Hour), now)
	require.NoError(t, err)
	assert.Equal(t, primaryDeps, deps)
	assert.ElementsMatch(t, []traceread.Dependency{{Parent: "frontend", Child: "backend", Calls: 1}, {Parent: "frontend", Child: "cart", Calls: 1}}, deps)
}
