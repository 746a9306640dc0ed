package rows

import (
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Objects are written with their keys in jsonb order, except in a row over
// the row limit: it is written again with every map's own order before it is
// shrunk, so a cut keeps what it kept before keys were ordered (the hostile
// corpus's huge-row case relies on it). Its bytes equal a batch's that never
// orders keys; a row within the limit differs from that only by key order.
func TestShrunkRowKeepsMapOrder(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "svc")
	rs.Resource().Attributes().PutStr("host", "h")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().Attributes().PutStr("scope.key", "s")
	ss.Scope().Attributes().PutStr("k", "s")
	small := ss.Spans().AppendEmpty()
	small.SetName("small")
	small.Attributes().PutStr("test.id", "small")
	small.Attributes().PutStr("a0", "v")
	huge := ss.Spans().AppendEmpty()
	huge.SetName("huge")
	huge.Attributes().PutStr("test.id", "huge")
	for i := range 10 {
		huge.Attributes().PutStr("a"+strconv.Itoa(i), strings.Repeat("v", 900))
	}
	after := ss.Spans().AppendEmpty()
	after.SetName("after")
	after.Attributes().PutStr("test.id", "after")
	after.Attributes().PutStr("a0", "v")

	lim := Limits{MaxValue: 1024, MaxRow: 4096}
	var ordered, unordered Batch
	ordered.SetLimits(lim)
	unordered.SetLimits(lim)
	unordered.ctx.json.Unordered = true
	ordered.AddTraces(td)
	unordered.AddTraces(td)
	o, u := &ordered.enc[tables.IdxSpans], &unordered.enc[tables.IdxSpans]
	require.NoError(t, o.Err())
	require.Equal(t, 3, o.Rows())

	require.Equal(t, u.Tuples(1, 2), o.Tuples(1, 2), "the shrunk row is written as if keys were never ordered")
	require.LessOrEqual(t, len(o.Tuples(1, 2)), lim.MaxRow)
	require.Contains(t, string(o.Tuples(1, 2)), `"test.id":"huge"`, "the cut keeps the map's first members")
	for _, i := range []int{0, 2} {
		or, un := string(o.Tuples(i, i+1)), string(u.Tuples(i, i+1))
		require.NotEqual(t, un, or, "row %d within the limit has its keys in jsonb order", i)
		require.Equal(t, len(un), len(or))
		require.Contains(t, or, `{"a0":"v","test.id":`)
	}
	// The context of the rows within the limit (the shrunk one has its own,
	// in its keys' own order).
	ctx := string(ordered.enc[tables.IdxContexts].Tuples(0, 1))
	require.Contains(t, ctx, `{"host":"h","service.name":"svc"}`, "the resource's keys too, also after a shrunk row")
	require.Contains(t, ctx, `{"k":"s","scope.key":"s"}`, "and the scope's")
}

// TestContextRowWithinRowLimit: a context over the row limit (a resource
// with a huge attribute) is shrunk like a row, and every row of its
// resource references the same context.
func TestContextRowWithinRowLimit(t *testing.T) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "svc")
	rs.Resource().Attributes().PutStr("huge", strings.Repeat("r", 20000))
	ss := rs.ScopeSpans().AppendEmpty()
	for range 3 {
		ss.Spans().AppendEmpty().SetName("op")
	}
	lim := Limits{MaxValue: 64 << 10, MaxRow: 4096}
	var b Batch
	b.SetLimits(lim)
	b.AddTraces(td)
	d := &b.enc[tables.IdxContexts]
	require.NoError(t, d.Err())
	require.Equal(t, 1, d.Rows(), "one context for the three rows")
	require.LessOrEqual(t, len(d.Tuples(0, 1)), lim.MaxRow)
	require.Contains(t, string(d.Tuples(0, 1)), `[postgrescopy: truncated from 20032 bytes]`, "cut with the marker")
	require.Equal(t, 3, b.enc[tables.IdxSpans].Rows())
}
