package traceread_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// TestCitus reads from a schema distributed on Citus as the exporter
// distributes it (spans by trace_id): the round trip of a trace by id, which
// runs on one shard, the searches, the services, the operations and the
// dependencies, whose join on the trace id runs shard by shard.
func TestCitus(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.CitusURL(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "pgct_citus_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	require.NoError(t, schema.Distribute(ctx, conn.Conn(), name))
	conn.Release()

	// The fixture's traces, every field set.
	fixture := only(rowstest.Traces(), pcommon.TraceID{0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36})
	require.Positive(t, fixture.SpanCount())
	want := ptrace.NewTraces()
	fixture.CopyTo(want)
	rowstest.NormTraces(want)
	write(t, pool, name, fixture)
	now := time.Now().UTC().Truncate(time.Millisecond)
	write(t, pool, name, makeTrace(1,
		spanSpec{service: "frontend", name: "GET /", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-time.Minute), dur: time.Second,
			attrs: map[string]any{"http.status_code": 500}},
		spanSpec{service: "backend", name: "handle", kind: ptrace.SpanKindServer, id: 2, parent: 1, start: now.Add(-time.Minute), dur: time.Millisecond},
	))
	write(t, pool, name, makeTrace(2,
		spanSpec{service: "frontend", name: "GET /", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-2 * time.Minute), dur: time.Second,
			attrs: map[string]any{"http.status_code": 200}},
	))

	r := traceread.New(pool, name, traceread.Limits{})
	id := fixture.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).TraceID()
	got := collect(t, func(emit func(ptrace.Traces) error) error {
		return r.GetTraces(ctx, []traceread.TraceRef{{ID: id}}, emit)
	})
	assert.Equal(t, flat(t, want), flat(t, got...), "the round trip on Citus")

	// A trace by id is one shard: the router plans a single task.
	var lines []string
	rows, err := pool.Query(ctx, "EXPLAIN SELECT * FROM "+schema.Qualified(name, "spans")+" WHERE trace_id = $1", id[:])
	require.NoError(t, err)
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	plan := strings.Join(lines, "\n")
	assert.Contains(t, plan, "Task Count: 1", plan)

	found, err := r.FindTraceIDs(ctx, traceread.TraceQuery{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now})
	require.NoError(t, err)
	assert.Equal(t, []pcommon.TraceID{traceID(1), traceID(2)}, ids(found))
	found, err = r.FindTraceIDs(ctx, traceread.TraceQuery{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now,
		Attributes: map[string]string{"http.status_code": "500"}})
	require.NoError(t, err)
	assert.Equal(t, []pcommon.TraceID{traceID(1)}, ids(found))
	traces := collect(t, func(emit func(ptrace.Traces) error) error {
		return r.FindTraces(ctx, traceread.TraceQuery{Service: "backend", StartMin: now.Add(-time.Hour), StartMax: now}, emit)
	})
	require.Len(t, traces, 1)
	assert.Equal(t, 2, traces[0].SpanCount())

	services, err := r.Services(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"backend", "checkout", "frontend"}, services)
	ops, err := r.Operations(ctx, "frontend", "server")
	require.NoError(t, err)
	assert.Equal(t, []traceread.Operation{{Name: "GET /", SpanKind: "server"}}, ops)
	deps, err := r.Dependencies(ctx, now.Add(-time.Hour), now)
	require.NoError(t, err)
	assert.Equal(t, []traceread.Dependency{{Parent: "frontend", Child: "backend", Calls: 1}}, deps)
}
