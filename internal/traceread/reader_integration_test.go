package traceread_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// TestGetTracesRoundTrip writes the fixture with every OTel field set (long
// attributes, events, links, resources and scopes) and reads each trace back
// by id: every span comes back as it went in, under the documented stand-ins.
func TestGetTracesRoundTrip(t *testing.T) {
	ctx := context.Background()
	pool, name := prepared(t)
	td := rowstest.Traces()
	want := ptrace.NewTraces()
	td.CopyTo(want)
	rowstest.NormTraces(want)
	write(t, pool, name, td)

	r := traceread.New(pool, name, traceread.Limits{})
	var traces []pcommon.TraceID
	seen := map[pcommon.TraceID]bool{}
	for _, rs := range want.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				if id := s.TraceID(); !id.IsEmpty() && !seen[id] {
					seen[id] = true
					traces = append(traces, id)
				}
			}
		}
	}
	require.Len(t, traces, 2)
	for _, id := range traces {
		got := collect(t, func(emit func(ptrace.Traces) error) error {
			return r.GetTraces(ctx, []traceread.TraceRef{{ID: id}}, emit)
		})
		require.Len(t, got, 1, "a small trace is one part")
		assert.Equal(t, flat(t, only(want, id)), flat(t, got...))
	}

	// Time bounds keep the spans that start within them.
	first := only(want, traces[0]).ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0)
	start := first.StartTimestamp().AsTime()
	got := collect(t, func(emit func(ptrace.Traces) error) error {
		return r.GetTraces(ctx, []traceread.TraceRef{{ID: traces[0], Start: start.Add(-time.Microsecond), End: start.Add(time.Microsecond)}}, emit)
	})
	require.Len(t, got, 1)
	assert.Equal(t, 1, got[0].SpanCount())
	got = collect(t, func(emit func(ptrace.Traces) error) error {
		return r.GetTraces(ctx, []traceread.TraceRef{{ID: traces[0], Start: start.Add(time.Hour)}}, emit)
	})
	assert.Empty(t, got, "no span of the trace starts after the bound")
	got = collect(t, func(emit func(ptrace.Traces) error) error {
		return r.GetTraces(ctx, []traceread.TraceRef{{ID: traceID(99)}}, emit)
	})
	assert.Empty(t, got, "an unknown trace emits nothing")
}

// TestGetTracesLimits checks the per-request limits: the number of trace ids,
// the spans per trace, and the parts a large trace is emitted in.
func TestGetTracesLimits(t *testing.T) {
	ctx := context.Background()
	pool, name := prepared(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	var specs []spanSpec
	for i := range 40 {
		specs = append(specs, spanSpec{service: "svc", name: "op", id: byte(i + 1), start: now.Add(time.Duration(i) * time.Millisecond),
			dur: time.Millisecond, attrs: map[string]any{"payload": strings.Repeat("p", 300)}})
	}
	write(t, pool, name, makeTrace(1, specs...))

	r := traceread.New(pool, name, traceread.Limits{MaxTraceIDs: 2, MaxSpansPerTrace: 30, ChunkBytes: 4096})
	err := r.GetTraces(ctx, []traceread.TraceRef{{ID: traceID(1)}, {ID: traceID(2)}, {ID: traceID(3)}}, func(ptrace.Traces) error { return nil })
	require.ErrorIs(t, err, traceread.ErrTooManyTraceIDs)

	got := collect(t, func(emit func(ptrace.Traces) error) error {
		return r.GetTraces(ctx, []traceread.TraceRef{{ID: traceID(1)}}, emit)
	})
	require.Greater(t, len(got), 1, "a trace over ChunkBytes comes in parts")
	n := 0
	var last pcommon.Timestamp
	for _, part := range got {
		for _, rs := range part.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					n++
					require.Equal(t, traceID(1), s.TraceID())
					require.GreaterOrEqual(t, s.StartTimestamp(), last, "parts in start order")
					last = s.StartTimestamp()
				}
			}
		}
	}
	assert.Equal(t, 30, n, "MaxSpansPerTrace spans, the earliest")
	assert.Equal(t, pcommon.NewTimestampFromTime(now.Add(29*time.Millisecond)), last)
}

// TestFind writes a few traces across three services and checks each finder
// and each condition of a search.
func TestFind(t *testing.T) {
	ctx := context.Background()
	pool, name := prepared(t)
	now := time.Now().UTC().Truncate(time.Millisecond)
	// Trace 1: frontend (server) → backend (client → server) → db (client).
	write(t, pool, name, makeTrace(1,
		spanSpec{service: "frontend", name: "GET /", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-50 * time.Minute), dur: 300 * time.Millisecond,
			attrs: map[string]any{"http.status_code": 200, "http.route": "/"}, resAttrs: map[string]any{"deployment.environment": "prod"}},
		spanSpec{service: "frontend", name: "call backend", kind: ptrace.SpanKindClient, id: 2, parent: 1, start: now.Add(-50 * time.Minute), dur: 200 * time.Millisecond},
		spanSpec{service: "backend", name: "handle", kind: ptrace.SpanKindServer, id: 3, parent: 2, start: now.Add(-50 * time.Minute), dur: 150 * time.Millisecond,
			attrs: map[string]any{"long": strings.Repeat("x", 301)}},
		spanSpec{service: "db", name: "SELECT", kind: ptrace.SpanKindClient, id: 4, parent: 3, start: now.Add(-50 * time.Minute), dur: 20 * time.Millisecond, errored: true},
	))
	// Trace 2: frontend → backend, later, faster, in staging.
	write(t, pool, name, makeTrace(2,
		spanSpec{service: "frontend", name: "GET /", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-10 * time.Minute), dur: 30 * time.Millisecond,
			attrs: map[string]any{"http.status_code": 404}, resAttrs: map[string]any{"deployment.environment": "staging"}},
		spanSpec{service: "backend", name: "handle", kind: ptrace.SpanKindServer, id: 2, parent: 1, start: now.Add(-10 * time.Minute), dur: 10 * time.Millisecond},
	))
	// Trace 3: frontend only, two hours ago.
	write(t, pool, name, makeTrace(3,
		spanSpec{service: "frontend", name: "GET /health", kind: ptrace.SpanKindServer, id: 1, start: now.Add(-2 * time.Hour), dur: time.Millisecond},
	))
	r := traceread.New(pool, name, traceread.Limits{MaxTraces: 2})
	hour := traceread.TraceQuery{StartMin: now.Add(-time.Hour), StartMax: now}

	find := func(q traceread.TraceQuery) []pcommon.TraceID {
		t.Helper()
		found, err := r.FindTraceIDs(ctx, q)
		require.NoError(t, err)
		return ids(found)
	}
	with := func(f func(q *traceread.TraceQuery)) traceread.TraceQuery {
		q := hour
		f(&q)
		return q
	}
	t1, t2, t3 := traceID(1), traceID(2), traceID(3)
	assert.Equal(t, []pcommon.TraceID{t2, t1}, find(with(func(q *traceread.TraceQuery) { q.Service = "frontend" })), "most recent first")
	assert.Equal(t, []pcommon.TraceID{t2, t1}, find(with(func(q *traceread.TraceQuery) { q.Service = "frontend"; q.Limit = 5 })), "capped by MaxTraces")
	assert.Equal(t, []pcommon.TraceID{t2}, find(with(func(q *traceread.TraceQuery) { q.Service = "frontend"; q.Limit = 1 })))
	assert.Equal(t, []pcommon.TraceID{t1, t3}, find(traceread.TraceQuery{Service: "frontend", StartMin: now.Add(-3 * time.Hour), StartMax: now.Add(-20 * time.Minute), Limit: 5}), "the time range")
	assert.Equal(t, []pcommon.TraceID{t1}, find(with(func(q *traceread.TraceQuery) { q.Service = "db" })))
	assert.Equal(t, []pcommon.TraceID{t1}, find(with(func(q *traceread.TraceQuery) { q.Service = "frontend"; q.Operation = "call backend" })))
	assert.Empty(t, find(with(func(q *traceread.TraceQuery) { q.Service = "db"; q.Operation = "handle" })), "service and operation on one span")
	assert.Equal(t, []pcommon.TraceID{t3}, find(traceread.TraceQuery{Service: "frontend", StartMin: now.Add(-3 * time.Hour), StartMax: now.Add(-time.Hour)}))
	assert.Equal(t, []pcommon.TraceID{t1}, find(with(func(q *traceread.TraceQuery) {
		q.Service = "frontend"
		q.Attributes = map[string]string{"http.status_code": "200"}
	})), "an int attribute matches its text")
	assert.Equal(t, []pcommon.TraceID{t2}, find(with(func(q *traceread.TraceQuery) {
		q.Attributes = map[string]string{"deployment.environment": "staging"}
	})), "a resource attribute")
	assert.Equal(t, []pcommon.TraceID{t1}, find(with(func(q *traceread.TraceQuery) {
		q.Attributes = map[string]string{"long": strings.Repeat("x", 301)}
	})), "a long attribute, stored apart")
	assert.Empty(t, find(with(func(q *traceread.TraceQuery) {
		q.Attributes = map[string]string{"http.status_code": "200", "deployment.environment": "staging"}
	})), "every attribute must match")
	assert.Equal(t, []pcommon.TraceID{t1}, find(with(func(q *traceread.TraceQuery) {
		q.Attributes = map[string]string{"error": "true"}
	})), "error=true is the Error status")
	assert.Equal(t, []pcommon.TraceID{t1}, find(with(func(q *traceread.TraceQuery) { q.Service = "backend"; q.DurationMin = 100 * time.Millisecond })))
	assert.Equal(t, []pcommon.TraceID{t2}, find(with(func(q *traceread.TraceQuery) { q.Service = "backend"; q.DurationMax = 100 * time.Millisecond })))
	assert.Empty(t, find(with(func(q *traceread.TraceQuery) { q.Service = "nobody" })))
	assert.Empty(t, find(with(func(q *traceread.TraceQuery) {
		q.Service = "front\x00end\xff"
		q.Attributes = map[string]string{"nul\x00": "\xfe"}
	})), "NUL and invalid UTF-8 in a search match nothing, and fail nothing")

	found, err := r.FindTraceIDs(ctx, with(func(q *traceread.TraceQuery) { q.Service = "db" }))
	require.NoError(t, err)
	require.Len(t, found, 1)
	assert.Equal(t, now.Add(-50*time.Minute), found[0].Start.UTC())
	assert.Equal(t, now.Add(-50*time.Minute+20*time.Millisecond), found[0].End.UTC())

	// FindTraces returns the traces whole: the backend search finds trace 1
	// by one span and returns its four.
	got := collect(t, func(emit func(ptrace.Traces) error) error {
		return r.FindTraces(ctx, with(func(q *traceread.TraceQuery) { q.Service = "db" }), emit)
	})
	require.Len(t, got, 1)
	assert.Equal(t, 4, got[0].SpanCount())

	services, err := r.Services(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"backend", "db", "frontend"}, services)

	ops, err := r.Operations(ctx, "frontend", "")
	require.NoError(t, err)
	assert.Equal(t, []traceread.Operation{{Name: "GET /", SpanKind: "server"}, {Name: "GET /health", SpanKind: "server"}, {Name: "call backend", SpanKind: "client"}}, ops)
	ops, err = r.Operations(ctx, "frontend", "client")
	require.NoError(t, err)
	assert.Equal(t, []traceread.Operation{{Name: "call backend", SpanKind: "client"}}, ops)
	ops, err = r.Operations(ctx, "frontend", "bogus")
	require.NoError(t, err)
	assert.Empty(t, ops)

	deps, err := r.Dependencies(ctx, now.Add(-time.Hour), now)
	require.NoError(t, err)
	assert.Equal(t, []traceread.Dependency{{Parent: "backend", Child: "db", Calls: 1}, {Parent: "frontend", Child: "backend", Calls: 2}}, deps)
	deps, err = r.Dependencies(ctx, now.Add(-20*time.Minute), now)
	require.NoError(t, err)
	assert.Equal(t, []traceread.Dependency{{Parent: "frontend", Child: "backend", Calls: 1}}, deps)
}
