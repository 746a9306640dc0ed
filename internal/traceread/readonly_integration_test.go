package traceread_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// TestReadOnly runs every finder on connections whose transactions are read
// only, as on a hot standby: the Reader writes nothing (no temporary table,
// no function with side effects), so a read replica serves it.
func TestReadOnly(t *testing.T) {
	ctx := context.Background()
	pool, name := prepared(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	write(t, pool, name, makeTrace(1,
		spanSpec{service: "frontend", name: "GET /", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-time.Minute), dur: time.Second,
			attrs: map[string]any{"http.status_code": 200}},
		spanSpec{service: "backend", name: "handle", kind: ptrace.SpanKindServer, id: 2, parent: 1, start: now.Add(-time.Minute), dur: time.Millisecond},
	))

	pc, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["default_transaction_read_only"] = "on"
	ro, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	defer ro.Close()
	_, err = ro.Exec(ctx, "CREATE TEMPORARY TABLE proof (x int)")
	require.Error(t, err, "the pool's transactions are read only")

	r := traceread.New(ro, name, traceread.Limits{})
	got := collect(t, func(emit func(ptrace.Traces) error) error {
		return r.GetTraces(ctx, []traceread.TraceRef{{ID: traceID(1)}}, emit)
	})
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].SpanCount())
	q := traceread.TraceQuery{Service: "frontend", StartMin: now.Add(-time.Hour), StartMax: now, Attributes: map[string]string{"http.status_code": "200"}}
	found, err := r.FindTraceIDs(ctx, q)
	require.NoError(t, err)
	assert.Len(t, found, 1)
	require.NoError(t, r.FindTraces(ctx, q, func(ptrace.Traces) error { return nil }))
	services, err := r.Services(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"backend", "frontend"}, services)
	_, err = r.Operations(ctx, "frontend", "server")
	require.NoError(t, err)
	deps, err := r.Dependencies(ctx, now.Add(-time.Hour), now)
	require.NoError(t, err)
	assert.Equal(t, []traceread.Dependency{{Parent: "frontend", Child: "backend", Calls: 1}}, deps)
}
