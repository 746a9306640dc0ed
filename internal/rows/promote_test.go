package rows

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

func TestConvert(t *testing.T) {
	str := pcommon.NewValueStr
	i := pcommon.NewValueInt
	d := pcommon.NewValueDouble
	b := pcommon.NewValueBool
	slice := pcommon.NewValueSlice()
	slice.Slice().AppendEmpty().SetStr("x")
	bytes := pcommon.NewValueBytes()
	bytes.Bytes().FromRaw([]byte{1})
	// want is nil for NULL (a misfit), else the value as the column holds it.
	tests := []struct {
		name string
		kind tables.Kind
		v    pcommon.Value
		want any
	}{
		{"text from string", tables.KindText, str("gpt-4o"), "gpt-4o"},
		{"text from int", tables.KindText, i(42), int64(42)},
		{"text from double", tables.KindText, d(3.5), 3.5},
		{"text from bool", tables.KindText, b(true), int64(1)},
		{"text from slice misfits", tables.KindText, slice, nil},
		{"text from bytes misfits", tables.KindText, bytes, nil},
		{"bigint from int", tables.KindInt64, i(-7), int64(-7)},
		{"bigint from string", tables.KindInt64, str(" 123 "), int64(123)},
		{"bigint from integral string", tables.KindInt64, str("1e3"), int64(1000)},
		{"bigint from integral double", tables.KindInt64, d(3), int64(3)},
		{"bigint from fractional double misfits", tables.KindInt64, d(3.7), nil},
		{"bigint from fractional string misfits", tables.KindInt64, str("3.7"), nil},
		{"bigint from text misfits", tables.KindInt64, str("abc"), nil},
		{"bigint from huge double misfits", tables.KindInt64, d(1e19), nil},
		{"bigint from NaN misfits", tables.KindInt64, d(math.NaN()), nil},
		{"bigint from bool misfits", tables.KindInt64, b(true), nil},
		{"double from double", tables.KindFloat64, d(0.0125), 0.0125},
		{"double from int", tables.KindFloat64, i(2), 2.0},
		{"double from string", tables.KindFloat64, str("0.5"), 0.5},
		{"double from text misfits", tables.KindFloat64, str("cheap"), nil},
		{"double from NaN misfits", tables.KindFloat64, d(math.NaN()), nil},
		{"double from Inf string misfits", tables.KindFloat64, str("Inf"), nil},
		{"bool from bool", tables.KindBool, b(false), int64(0)},
		{"bool from string", tables.KindBool, str("true"), int64(1)},
		{"bool from FALSE", tables.KindBool, str("FALSE"), int64(0)},
		{"bool from int 1", tables.KindBool, i(1), int64(1)},
		{"bool from int 2 misfits", tables.KindBool, i(2), nil},
		{"bool from yes misfits", tables.KindBool, str("yes"), nil},
		{"timestamptz from int ns", tables.KindTimestamptz, i(1_700_000_000_123_456_789), int64(1_700_000_000_123_456)},
		{"timestamptz from RFC 3339", tables.KindTimestamptz, str("2024-05-01T12:00:00.5+02:00"), int64(1714557600_500_000)},
		{"timestamptz from ns string", tables.KindTimestamptz, str("1700000000000000000"), int64(1_700_000_000_000_000)},
		{"timestamptz before 1970", tables.KindTimestamptz, str("1969-12-31T23:59:59Z"), int64(-1_000_000)},
		{"timestamptz from negative int misfits", tables.KindTimestamptz, i(-1), nil},
		{"timestamptz from date misfits", tables.KindTimestamptz, str("2024-05-01"), nil},
		{"timestamptz from double misfits", tables.KindTimestamptz, d(1.7e18), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := convert(tt.kind, tt.v)
			if tt.want == nil {
				assert.False(t, got.ok, "%+v", got)
				return
			}
			require.True(t, got.ok)
			switch w := tt.want.(type) {
			case string:
				assert.Equal(t, w, got.s)
			case int64:
				assert.Equal(t, w, got.i)
			case float64:
				assert.Equal(t, w, got.f)
			}
		})
	}
}

// row encodes one span (or log record, when log is true) with layout l and
// returns its columns as the rejects table would render them.
func row(t *testing.T, l *tables.Layout, res, attrs map[string]any, log bool) map[string]any {
	t.Helper()
	var b Batch
	b.SetLayout(l)
	idx := tables.IdxSpans
	if log {
		idx = tables.IdxLogs
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		require.NoError(t, rl.Resource().Attributes().FromRaw(res))
		require.NoError(t, rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Attributes().FromRaw(attrs))
		b.AddLogs(ld)
	} else {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		require.NoError(t, rs.Resource().Attributes().FromRaw(res))
		require.NoError(t, rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().Attributes().FromRaw(attrs))
		b.AddTraces(td)
	}
	_, err := b.Data(idx)
	require.NoError(t, err, "the row has the layout's field count")
	js, ok := AppendLayoutRowJSON(nil, l, idx, b.Tuples(idx, 0, 1))
	require.True(t, ok)
	var out map[string]any
	require.NoError(t, json.Unmarshal(js, &out), string(js))
	// The row's context, as the view joins it.
	require.Equal(t, 1, b.Rows(tables.IdxContexts))
	cjs, ok := AppendLayoutRowJSON(nil, l, tables.IdxContexts, b.Tuples(tables.IdxContexts, 0, 1))
	require.True(t, ok)
	var c map[string]any
	require.NoError(t, json.Unmarshal(cjs, &c), string(cjs))
	require.Equal(t, c[tables.ContextID], out[tables.ContextID])
	for k, v := range c {
		out[k] = v
	}
	return out
}

func TestPromotedFallbackOrder(t *testing.T) {
	l, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	// The deprecated names fill the columns when the current ones are absent.
	r := row(t, l, nil, map[string]any{"gen_ai.system": "openai", "gen_ai.usage.prompt_tokens": 10,
		"gen_ai.usage.completion_tokens": "5", "cost_usd": 0.25}, false)
	assert.Equal(t, "openai", r["gen_ai_provider_name"])
	assert.EqualValues(t, 10, r["gen_ai_input_tokens"])
	assert.EqualValues(t, 5, r["gen_ai_output_tokens"])
	assert.EqualValues(t, 0.25, r["gen_ai_cost_usd"])
	assert.Nil(t, r["gen_ai_request_model"], "absent everywhere: NULL")

	// The first key present wins over a later one, even a misfit: the
	// column never mixes the standard value with a vendor's.
	r = row(t, l, nil, map[string]any{"gen_ai.provider.name": "anthropic", "gen_ai.system": "openai",
		"gen_ai.usage.input_tokens": "many", "gen_ai.usage.prompt_tokens": 10}, false)
	assert.Equal(t, "anthropic", r["gen_ai_provider_name"])
	assert.Nil(t, r["gen_ai_input_tokens"], "the first key decides; its misfit is NULL")
	attrs := r["span_attributes"].(map[string]any)
	assert.Equal(t, "many", attrs["gen_ai.usage.input_tokens"], "without remove the JSONB keeps everything")
}

func TestPromotedRemove(t *testing.T) {
	l, err := tables.NewLayout([]tables.Promoted{
		{Column: "user_id", Kind: tables.KindText, Traces: true, Logs: true, Remove: true,
			From: []tables.Source{{Scope: tables.ScopeSpan, Key: "enduser.id"}, {Scope: tables.ScopeLog, Key: "user.id"}, {Scope: tables.ScopeResource, Key: "user.id"}}},
		{Column: "tokens", Kind: tables.KindInt64, Traces: true, Remove: true, From: []tables.Source{{Scope: tables.ScopeSpan, Key: "tokens"}}},
	})
	require.NoError(t, err)

	r := row(t, l, map[string]any{"user.id": "r1", "host": "h"}, map[string]any{"enduser.id": "u1", "tokens": "x", "k": 1}, false)
	assert.Equal(t, "u1", r["user_id"])
	assert.Equal(t, map[string]any{"tokens": "x", "k": 1.0}, r["span_attributes"], "the stored key goes, the misfit stays")
	assert.Equal(t, map[string]any{"user.id": "r1", "host": "h"}, r["resource_attributes"], "the resource key did not fill the column")

	r = row(t, l, map[string]any{"user.id": "r1", "host": "h"}, map[string]any{"k": 1}, false)
	assert.Equal(t, "r1", r["user_id"])
	assert.Equal(t, map[string]any{"host": "h"}, r["resource_attributes"], "the resource key filled it and goes")

	r = row(t, l, map[string]any{"user.id": "r1"}, map[string]any{"user.id": "l1", "enduser.id": "no"}, true)
	assert.Equal(t, "l1", r["user_id"], "log keys serve logs; span keys do not")
	assert.Equal(t, map[string]any{"enduser.id": "no"}, r["log_attributes"])
	assert.Equal(t, map[string]any{"user.id": "r1"}, r["resource_attributes"])
	assert.NotContains(t, r, "tokens", "a traces-only column is not on logs")
}

func TestNewLayout(t *testing.T) {
	before := len(tables.Tables[tables.IdxSpans].Columns)
	l, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	assert.Len(t, tables.Tables[tables.IdxSpans].Columns, before, "the built-in tables are not changed")
	assert.Len(t, l.Table(tables.IdxSpans).Columns, before+12)
	assert.Equal(t, "gen_ai_cost_usd", l.Promoted(tables.IdxSpans)[6])
	assert.Empty(t, l.Promoted(tables.IdxLogs), "the preset is on spans only")

	for name, p := range map[string]tables.Promoted{
		"built-in":      {Column: "trace_id", Kind: tables.KindText, Traces: true, From: []tables.Source{{Scope: tables.ScopeSpan, Key: "a"}}},
		"kind":          {Column: "c", Kind: tables.KindJSONB, Traces: true, From: []tables.Source{{Scope: tables.ScopeSpan, Key: "a"}}},
		"no table":      {Column: "c", Kind: tables.KindText, From: []tables.Source{{Scope: tables.ScopeSpan, Key: "a"}}},
		"no key":        {Column: "c", Kind: tables.KindText, Traces: true},
		"other signal":  {Column: "c", Kind: tables.KindText, Traces: true, From: []tables.Source{{Scope: tables.ScopeLog, Key: "a"}}},
		"logs unserved": {Column: "c", Kind: tables.KindText, Traces: true, Logs: true, From: []tables.Source{{Scope: tables.ScopeSpan, Key: "a"}}},
	} {
		_, err := tables.NewLayout([]tables.Promoted{p})
		assert.Error(t, err, name)
	}
}

// TestPromotedAllocs: promoting costs no allocation per span once the
// batch's buffers have grown.
func TestPromotedAllocs(t *testing.T) {
	l, err := tables.NewLayout(append(tables.GenAI(), tables.Promoted{Column: "ns", Kind: tables.KindText, Traces: true, Remove: true,
		From: []tables.Source{{Scope: tables.ScopeResource, Key: "service.namespace"}}}))
	require.NoError(t, err)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.namespace", "shop")
	spans := rs.ScopeSpans().AppendEmpty().Spans()
	for i := 0; i < 50; i++ {
		a := spans.AppendEmpty().Attributes()
		a.PutStr("gen_ai.request.model", "gpt-4o")
		a.PutInt("gen_ai.usage.input_tokens", int64(i))
		a.PutStr("gen_ai.usage.output_tokens", "12")
		a.PutDouble("gen_ai.usage.cost", 0.01)
		a.PutStr("http.route", "/v1/chat")
	}
	var b Batch
	b.SetLayout(l)
	b.AddTraces(td)
	allocs := testing.AllocsPerRun(20, func() {
		b.Reset()
		b.AddTraces(td)
	})
	assert.Zero(t, allocs)
}

// TestPromotedRepeatedKey: with a key repeated in a span's attributes (OTLP
// allows it on the wire), its first entry decides, as pcommon.Map.Get would
// read it, wherever the keys stand in the map.
func TestPromotedRepeatedKey(t *testing.T) {
	l, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"attributes":[
		{"key":"llm.provider","value":{"stringValue":"third"}},
		{"key":"gen_ai.system","value":{}},
		{"key":"gen_ai.system","value":{"stringValue":"second"}},
		{"key":"gen_ai.usage.input_tokens","value":{"intValue":"7"}},
		{"key":"gen_ai.usage.input_tokens","value":{"intValue":"8"}}]}]}]}]}`))
	require.NoError(t, err)
	require.Equal(t, 5, td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).Attributes().Len())
	var b Batch
	b.SetLayout(l)
	b.AddTraces(td)
	js, ok := AppendLayoutRowJSON(nil, l, tables.IdxSpans, b.Tuples(tables.IdxSpans, 0, 1))
	require.True(t, ok)
	var r map[string]any
	require.NoError(t, json.Unmarshal(js, &r), string(js))
	assert.Equal(t, "third", r["gen_ai_provider_name"], "gen_ai.system's first entry is empty: the next key decides")
	assert.EqualValues(t, 7, r["gen_ai_input_tokens"], "the first of a repeated key")
}

// TestContextIDCached: rows reuse the context id of the row before while
// nothing it is made from changed; every row's id must still be the one a
// fresh batch gives it alone — across resources and scopes whose JSON has the
// same length, and rows that alternate between removing a promoted resource
// key and not.
func TestContextIDCached(t *testing.T) {
	// Two removable resource keys of one length: rows that drop one or the
	// other get resource documents of the same length.
	l, err := tables.NewLayout([]tables.Promoted{
		{Column: "user_id", Kind: tables.KindText, Traces: true, Remove: true,
			From: []tables.Source{{Scope: tables.ScopeSpan, Key: "enduser.id"}, {Scope: tables.ScopeResource, Key: "usr1"}}},
		{Column: "team", Kind: tables.KindText, Traces: true, Remove: true,
			From: []tables.Source{{Scope: tables.ScopeSpan, Key: "team"}, {Scope: tables.ScopeResource, Key: "team"}}},
	})
	require.NoError(t, err)
	td := ptrace.NewTraces()
	for _, svc := range []string{"aaaa", "bbbb"} {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", svc)
		rs.Resource().Attributes().PutStr("usr1", "u-"+svc)
		rs.Resource().Attributes().PutStr("team", "t-"+svc)
		for _, scope := range []string{"s1", "s2"} {
			ss := rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName(scope)
			for i := range 4 {
				sp := ss.Spans().AppendEmpty()
				sp.SetName(svc + scope)
				// Which resource keys the row drops: both, usr1, team, both.
				switch i {
				case 1:
					sp.Attributes().PutStr("team", "x") // the resource's team stays
				case 2:
					sp.Attributes().PutStr("enduser.id", "e") // its usr1 stays
				}
			}
		}
	}
	ctxID := func(b *Batch, row int) any {
		js, ok := AppendLayoutRowJSON(nil, l, tables.IdxSpans, b.Tuples(tables.IdxSpans, row, row+1))
		require.True(t, ok)
		var r map[string]any
		require.NoError(t, json.Unmarshal(js, &r))
		return r[tables.ContextID]
	}
	var all Batch
	all.SetLayout(l)
	all.AddTraces(td)
	row, ids := 0, map[any]bool{}
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, sp := range ss.Spans().All() {
				one := ptrace.NewTraces()
				ors := one.ResourceSpans().AppendEmpty()
				rs.Resource().CopyTo(ors.Resource())
				oss := ors.ScopeSpans().AppendEmpty()
				ss.Scope().CopyTo(oss.Scope())
				sp.CopyTo(oss.Spans().AppendEmpty())
				var alone Batch
				alone.SetLayout(l)
				alone.AddTraces(one)
				want := ctxID(&alone, 0)
				assert.Equal(t, want, ctxID(&all, row), "row %d", row)
				ids[want] = true
				row++
			}
		}
	}
	assert.Len(t, ids, 12, "2 resources × 2 scopes × 3 sets of dropped keys")
	assert.Equal(t, 12, all.Rows(tables.IdxContexts))
}
