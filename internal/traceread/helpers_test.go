package traceread_test

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// prepared returns a pool and a fresh schema, migrated, with the index set.
func prepared(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	return pool, name
}

// write stores td as the exporter does.
func write(t *testing.T, pool *pgxpool.Pool, name string, td ptrace.Traces) {
	t.Helper()
	var b rows.Batch
	b.AddTraces(td)
	_, err := pgwrite.NewWriter(pool, name).Write(context.Background(), &b)
	require.NoError(t, err)
}

// flat is a canonical form of traces that does not depend on how spans are
// grouped under resources and scopes, nor on the order of map keys: one
// OTLP/JSON document per span (with its resource and scope), sorted.
func flat(t *testing.T, tds ...ptrace.Traces) []string {
	t.Helper()
	var out []string
	for _, td := range tds {
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					one := ptrace.NewTraces()
					r := one.ResourceSpans().AppendEmpty()
					rs.Resource().CopyTo(r.Resource())
					r.SetSchemaUrl(rs.SchemaUrl())
					sc := r.ScopeSpans().AppendEmpty()
					ss.Scope().CopyTo(sc.Scope())
					sc.SetSchemaUrl(ss.SchemaUrl())
					s.CopyTo(sc.Spans().AppendEmpty())
					b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(one)
					require.NoError(t, err)
					out = append(out, canonicalJSON(t, b))
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// canonicalJSON re-encodes an OTLP/JSON document with every key/value list
// sorted by key (encoding/json sorts object keys).
func canonicalJSON(t *testing.T, doc []byte) string {
	t.Helper()
	var x any
	require.NoError(t, json.Unmarshal(doc, &x))
	var walk func(field string, x any) any
	walk = func(field string, x any) any {
		switch x := x.(type) {
		case map[string]any:
			for k, v := range x {
				x[k] = walk(k, v)
			}
		case []any:
			for i := range x {
				x[i] = walk(field, x[i])
			}
			if field == "attributes" || field == "values" {
				slices.SortFunc(x, func(a, b any) int {
					ka, _ := a.(map[string]any)["key"].(string)
					kb, _ := b.(map[string]any)["key"].(string)
					switch {
					case ka < kb:
						return -1
					case ka > kb:
						return 1
					}
					return 0
				})
			}
		}
		return x
	}
	b, err := json.Marshal(walk("", x))
	require.NoError(t, err)
	return string(b)
}

// only keeps the spans of td in trace id.
func only(td ptrace.Traces, id pcommon.TraceID) ptrace.Traces {
	out := ptrace.NewTraces()
	td.CopyTo(out)
	out.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
		rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
			ss.Spans().RemoveIf(func(s ptrace.Span) bool { return s.TraceID() != id })
			return ss.Spans().Len() == 0
		})
		return rs.ScopeSpans().Len() == 0
	})
	return out
}

// collect gathers what a Reader emits.
func collect(t *testing.T, run func(emit func(ptrace.Traces) error) error) []ptrace.Traces {
	t.Helper()
	var out []ptrace.Traces
	require.NoError(t, run(func(td ptrace.Traces) error {
		out = append(out, td)
		return nil
	}))
	return out
}

// ids returns the trace ids found, in order.
func ids(found []traceread.FoundTrace) []pcommon.TraceID {
	out := make([]pcommon.TraceID, len(found))
	for i, f := range found {
		out[i] = f.ID
	}
	return out
}

// spanSpec describes one span of a test trace.
type spanSpec struct {
	service, name string
	kind          ptrace.SpanKind
	id, parent    byte
	start         time.Time
	dur           time.Duration
	attrs         map[string]any
	resAttrs      map[string]any
	errored       bool
}

func traceID(n byte) pcommon.TraceID {
	return pcommon.TraceID{0xaa, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, n}
}
func spanID(n byte) pcommon.SpanID {
	if n == 0 {
		return pcommon.SpanID{}
	}
	return pcommon.SpanID{0xbb, 1, 2, 3, 4, 5, 6, n}
}

// makeTrace builds a trace of the given spans, one resource per span.
func makeTrace(trace byte, specs ...spanSpec) ptrace.Traces {
	td := ptrace.NewTraces()
	for _, sp := range specs {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", sp.service)
		_ = rs.Resource().Attributes().FromRaw(merge(map[string]any{"service.name": sp.service}, sp.resAttrs))
		ss := rs.ScopeSpans().AppendEmpty()
		ss.Scope().SetName("test")
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(traceID(trace))
		s.SetSpanID(spanID(sp.id))
		s.SetParentSpanID(spanID(sp.parent))
		s.SetName(sp.name)
		s.SetKind(sp.kind)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(sp.start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(sp.start.Add(sp.dur)))
		_ = s.Attributes().FromRaw(sp.attrs)
		if sp.errored {
			s.Status().SetCode(ptrace.StatusCodeError)
		}
	}
	return td
}

func merge(a, b map[string]any) map[string]any {
	for k, v := range b {
		a[k] = v
	}
	return a
}
