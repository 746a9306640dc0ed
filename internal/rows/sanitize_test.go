package rows_test

// One test per sanitization rule of docs/sanitization.md. They read the
// encoded rows back field by field; no server is needed (TestRoundTrip and
// pgwrite's tests show PostgreSQL accepting the same encoding).

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// fields returns row r of table i by column name (nil for NULL), after
// checking the whole batch.
func fields(t *testing.T, b *rows.Batch, lim rows.Limits, i, r int) map[string][]byte {
	t.Helper()
	require.NoError(t, checkBatch(b, lim))
	require.Greater(t, b.Rows(i), r)
	fs, ok := pgcopy.SplitRow(nil, b.Tuples(i, r, r+1))
	require.True(t, ok)
	out := map[string][]byte{}
	for j, c := range tables.Tables[i].Columns {
		out[c] = fs[j]
	}
	// The row's context, from the batch's dictionary rows: as the view
	// reads it.
	id := out[tables.ContextID]
	for k := range b.Rows(tables.IdxContexts) {
		cf, ok := pgcopy.SplitRow(nil, b.Tuples(tables.IdxContexts, k, k+1))
		require.True(t, ok)
		if string(cf[0]) == string(id) {
			for j, c := range tables.Tables[tables.IdxContexts].Columns[1:] {
				out[c] = cf[j+1]
			}
			return out
		}
	}
	require.Failf(t, "no context", "row %d of table %d references a context the batch lacks", r, i)
	return out
}

// doc decodes a jsonb field.
func doc(t *testing.T, f []byte) any {
	t.Helper()
	require.NotEmpty(t, f)
	var v any
	require.NoError(t, json.Unmarshal(f[1:], &v))
	return v
}

// merged decodes an attribute map's jsonb and adds its long strings'
// pairs (tables.LongSuffix), as the views read it.
func merged(t *testing.T, r map[string][]byte, col string) map[string]any {
	t.Helper()
	m := doc(t, r[col]).(map[string]any)
	pairs := textArray(t, r[col+tables.LongSuffix])
	require.Zero(t, len(pairs)%2, "key and value pairs")
	for i := 0; i < len(pairs); i += 2 {
		require.NotContains(t, m, pairs[i], "a key is in the jsonb or apart, not both")
		m[pairs[i]] = pairs[i+1]
	}
	return m
}

// textArray decodes a binary text[] field (nil: NULL).
func textArray(t *testing.T, f []byte) []string {
	t.Helper()
	if f == nil {
		return nil
	}
	out, ok := pgcopy.TextArrayValues(f)
	require.True(t, ok, "a binary text[]")
	return out
}

func float8(f []byte) float64 { return math.Float64frombits(binary.BigEndian.Uint64(f)) }
func int64At(f []byte) int64  { return int64(binary.BigEndian.Uint64(f)) }

// oneSpan returns traces with one span, for the test to fill.
func oneSpan() (ptrace.Traces, ptrace.Span) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetStartTimestamp(1_700_000_000_000_000_000)
	s.SetEndTimestamp(1_700_000_001_000_000_000)
	return td, s
}

func spanRow(t *testing.T, td ptrace.Traces, lim rows.Limits) map[string][]byte {
	t.Helper()
	var b rows.Batch
	b.SetLimits(lim)
	b.AddTraces(td)
	return fields(t, &b, lim, tables.IdxSpans, 0)
}

// Rule: NUL, which text and jsonb refuse, becomes U+FFFD in every text
// column, JSON key and JSON string.
func TestSanitizeNUL(t *testing.T) { testReplaced(t, "a\x00b") }

// Rule: each byte of invalid UTF-8 becomes U+FFFD, in the same places.
func TestSanitizeInvalidUTF8(t *testing.T) { testReplaced(t, "a\xffb") }

func testReplaced(t *testing.T, bad string) {
	const want = "a\uFFFDb"
	td, s := oneSpan()
	rs := td.ResourceSpans().At(0)
	rs.Resource().Attributes().PutStr("service.name", bad)
	rs.Resource().Attributes().PutStr(bad, bad)
	rs.SetSchemaUrl(bad)
	rs.ScopeSpans().At(0).Scope().SetName(bad)
	rs.ScopeSpans().At(0).Scope().SetVersion(bad)
	s.SetName(bad)
	s.TraceState().FromRaw(bad)
	s.Status().SetMessage(bad)
	s.Attributes().PutStr(bad, bad)
	s.Attributes().PutEmptySlice("list").AppendEmpty().SetStr(bad)
	ev := s.Events().AppendEmpty()
	ev.SetName(bad)
	l := s.Links().AppendEmpty()
	l.TraceState().FromRaw(bad)
	r := spanRow(t, td, rows.Limits{})
	for _, col := range []string{"service_name", "span_name", "trace_state", "status_message", "scope_name", "scope_version", "resource_schema_url"} {
		require.Equal(t, want, string(r[col]), col)
	}
	require.Equal(t, map[string]any{want: want, "list": []any{want}}, doc(t, r["span_attributes"]))
	require.Equal(t, want, doc(t, r["resource_attributes"]).(map[string]any)[want])
	require.Equal(t, want, doc(t, r["events"]).([]any)[0].(map[string]any)["name"])
	require.Equal(t, want, doc(t, r["links"]).([]any)[0].(map[string]any)["trace_state"])

	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetSeverityText(bad)
	lr.SetEventName(bad)
	lr.Body().SetEmptyMap().PutStr(bad, bad)
	var b rows.Batch
	b.AddLogs(ld)
	lf := fields(t, &b, rows.Limits{}, tables.IdxLogs, 0)
	require.Equal(t, want, string(lf["severity_text"]))
	require.Equal(t, want, string(lf["event_name"]))
	require.Equal(t, map[string]any{want: want}, doc(t, lf["body"]))

	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName(bad)
	m.SetDescription(bad)
	m.SetUnit(bad)
	m.Metadata().PutStr(bad, bad)
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1)
	b.Reset()
	b.AddMetrics(md)
	mf := fields(t, &b, rows.Limits{}, tables.IdxGauge, 0)
	for _, col := range []string{"metric_name", "description", "unit"} {
		require.Equal(t, want, string(mf[col]), col)
	}
	require.Equal(t, map[string]any{want: want}, doc(t, mf["metric_metadata"]))
}

// Rule: other control characters are valid text and JSON and are kept
// (escaped in JSON).
func TestSanitizeControlCharactersKept(t *testing.T) {
	td, s := oneSpan()
	s.SetName("tab\there\x01\x7f")
	s.Attributes().PutStr("k", "nl\n\x1f")
	r := spanRow(t, td, rows.Limits{})
	require.Equal(t, "tab\there\x01\x7f", string(r["span_name"]))
	require.Equal(t, map[string]any{"k": "nl\n\x1f"}, doc(t, r["span_attributes"]))
}

// Rule: float8 columns and arrays keep NaN and ±Inf; JSON, which has no such
// numbers, holds the strings "NaN", "Infinity" and "-Infinity".
func TestSanitizeNaNAndInfinity(t *testing.T) {
	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	g := sm.Metrics().AppendEmpty()
	g.SetName("g")
	dp := g.SetEmptyGauge().DataPoints().AppendEmpty()
	dp.SetDoubleValue(math.NaN())
	dp.Attributes().PutDouble("inf", math.Inf(1))
	dp.Attributes().PutDouble("ninf", math.Inf(-1))
	dp.Attributes().PutDouble("nan", math.NaN())
	ex := dp.Exemplars().AppendEmpty()
	ex.SetDoubleValue(math.Inf(-1))
	h := sm.Metrics().AppendEmpty()
	h.SetName("h")
	hp := h.SetEmptyHistogram().DataPoints().AppendEmpty()
	hp.SetSum(math.Inf(1))
	hp.SetMin(math.NaN())
	hp.BucketCounts().FromRaw([]uint64{1, 2})
	hp.ExplicitBounds().FromRaw([]float64{math.Inf(-1)})

	var b rows.Batch
	b.AddMetrics(md)
	gf := fields(t, &b, rows.Limits{}, tables.IdxGauge, 0)
	require.True(t, math.IsNaN(float8(gf["value"])))
	require.Equal(t, map[string]any{"inf": "Infinity", "ninf": "-Infinity", "nan": "NaN"}, doc(t, gf["attributes"]))
	require.Equal(t, "-Infinity", doc(t, gf["exemplars"]).([]any)[0].(map[string]any)["as_double"])

	hf := fields(t, &b, rows.Limits{}, tables.IdxHistogram, 0)
	require.True(t, math.IsInf(float8(hf["sum"]), 1))
	require.True(t, math.IsNaN(float8(hf["min"])))
	bounds := hf["explicit_bounds"]
	require.True(t, math.IsInf(float8(bounds[len(bounds)-8:]), -1), "arrays keep them too")
}

// Rule: bytes values become base64 strings in JSON.
func TestSanitizeBytes(t *testing.T) {
	td, s := oneSpan()
	s.Attributes().PutEmptyBytes("b").FromRaw([]byte{0, 0xff, 'x'})
	r := spanRow(t, td, rows.Limits{})
	require.Equal(t, map[string]any{"b": "AP94"}, doc(t, r["span_attributes"]))

	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetEmptyBytes().FromRaw([]byte("\x00\x01"))
	var b rows.Batch
	b.AddLogs(ld)
	require.Equal(t, "AAE=", doc(t, fields(t, &b, rows.Limits{}, tables.IdxLogs, 0)["body"]))
}

// Rule: OTLP times are unsigned nanoseconds since 1970, so none is before
// 1970 and the largest (2554-07-21) fits timestamptz; zero is stored as
// 1970-01-01 where a time is required and as NULL for a metric's unset
// start time. The sub-microsecond rest is kept in *_frac_ns.
func TestSanitizeTimestamps(t *testing.T) {
	unixEpochFromPG := int64(-946_684_800_000_000) // µs from 2000-01-01 back to 1970
	td, s := oneSpan()
	s.SetStartTimestamp(0)
	s.SetEndTimestamp(math.MaxUint64)
	r := spanRow(t, td, rows.Limits{})
	require.Equal(t, unixEpochFromPG, int64At(r["start_time"]))
	require.Equal(t, int64(math.MaxUint64/1000)+unixEpochFromPG, int64At(r["end_time"]))
	require.Equal(t, []byte{0, 0}, r["start_time_frac_ns"])

	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("g")
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetTimestamp(math.MaxUint64)
	var b rows.Batch
	b.AddMetrics(md)
	gf := fields(t, &b, rows.Limits{}, tables.IdxGauge, 0)
	require.Nil(t, gf["start_time"], "unset start: NULL")
	require.Nil(t, gf["start_time_frac_ns"])
	require.Equal(t, int16(math.MaxUint64%1000), int16(binary.BigEndian.Uint16(gf["time_frac_ns"])))

	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	b.Reset()
	b.AddLogs(ld)
	lf := fields(t, &b, rows.Limits{}, tables.IdxLogs, 0)
	require.Equal(t, unixEpochFromPG, int64At(lf["timestamp"]), "a log without time: 1970, kept")
	require.Equal(t, unixEpochFromPG, int64At(lf["observed_timestamp"]))
}

// Rule: an end before the start is kept as sent; duration_ns is negative,
// and clamped to bigint only past ±292 years.
func TestSanitizeEndBeforeStart(t *testing.T) {
	for _, tc := range []struct {
		start, end uint64
		want       int64
	}{
		{2000, 1000, -1000},
		{1000, 2000, 1000},
		{0, math.MaxUint64, math.MaxInt64},
		{math.MaxUint64, 0, math.MinInt64},
		{math.MaxUint64, math.MaxUint64 - 5, -5},
		{1 << 63, 0, math.MinInt64},
		{1<<63 - 1, 0, -(1<<63 - 1)},
	} {
		td, s := oneSpan()
		s.SetStartTimestamp(pcommon.Timestamp(tc.start))
		s.SetEndTimestamp(pcommon.Timestamp(tc.end))
		require.Equal(t, tc.want, int64At(spanRow(t, td, rows.Limits{})["duration_ns"]), "%d..%d", tc.start, tc.end)
	}
}

// Rule: an all-zero (absent) trace or span id is NULL; inside links JSON ids
// are hex strings, zero ones too; exemplars leave zero ids out.
func TestSanitizeIDs(t *testing.T) {
	td, s := oneSpan()
	s.Links().AppendEmpty()
	r := spanRow(t, td, rows.Limits{})
	require.Nil(t, r["trace_id"])
	require.Nil(t, r["span_id"])
	require.Nil(t, r["parent_span_id"])
	link := doc(t, r["links"]).([]any)[0].(map[string]any)
	require.Equal(t, strings.Repeat("0", 32), link["trace_id"])

	td, s = oneSpan()
	s.SetTraceID(pcommon.TraceID{15: 1})
	s.SetSpanID(pcommon.SpanID{7: 1})
	r = spanRow(t, td, rows.Limits{})
	require.Equal(t, append(make([]byte, 15), 1), r["trace_id"])
	require.Equal(t, int64(1), int64At(r["span_id"]))

	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("g")
	m.SetEmptyGauge().DataPoints().AppendEmpty().Exemplars().AppendEmpty().SetIntValue(1)
	var b rows.Batch
	b.AddMetrics(md)
	ex := doc(t, fields(t, &b, rows.Limits{}, tables.IdxGauge, 0)["exemplars"]).([]any)[0].(map[string]any)
	require.NotContains(t, ex, "trace_id")
	require.NotContains(t, ex, "span_id")
}

// Rule: an enum value without a name (newer than this pdata, or a bug) is
// stored as its number rather than lost.
func TestSanitizeUnknownEnums(t *testing.T) {
	td, s := oneSpan()
	s.SetKind(ptrace.SpanKind(42))
	s.Status().SetCode(ptrace.StatusCode(-3))
	r := spanRow(t, td, rows.Limits{})
	require.Equal(t, "42", string(r["span_kind"]))
	require.Equal(t, "-3", string(r["status_code"]))
	require.Equal(t, "Unspecified", string(spanRow(t, oneSpanTraces(), rows.Limits{})["span_kind"]))
}

func oneSpanTraces() ptrace.Traces { td, _ := oneSpan(); return td }

// Rule: nesting deeper than jsonb.MaxDepth becomes the TooDeep string.
func TestSanitizeDeepNesting(t *testing.T) {
	td, s := oneSpan()
	m := s.Attributes()
	for range 3 * jsonb.MaxDepth {
		m = m.PutEmptyMap("n")
	}
	r := spanRow(t, td, rows.Limits{})
	require.Contains(t, string(r["span_attributes"]), jsonb.TooDeep)
}

// Rule: a value over max_value_bytes is cut, between characters, with the
// marker at its end: text columns, JSON strings and keys, bytes' base64.
func TestSanitizeValueLimit(t *testing.T) {
	lim := rows.Limits{MaxValue: 100}
	long := strings.Repeat("é", 200) // 400 bytes
	td, s := oneSpan()
	s.SetName(long)
	s.Status().SetMessage(long)
	s.Attributes().PutStr("s", long)
	s.Attributes().PutStr(long, "key")
	s.Attributes().PutEmptyBytes("b").FromRaw(make([]byte, 300))
	s.Attributes().PutStr("short", "kept")
	r := spanRow(t, td, lim)
	marker := "[postgrescopy: truncated from 400 bytes]"
	for _, col := range []string{"span_name", "status_message"} {
		require.True(t, strings.HasSuffix(string(r[col]), marker), col)
		require.LessOrEqual(t, len(r[col]), 100)
		require.True(t, strings.HasPrefix(string(r[col]), "éé"), col)
	}
	attrs := merged(t, r, "span_attributes")
	require.True(t, strings.HasSuffix(attrs["s"].(string), marker))
	require.True(t, strings.HasSuffix(attrs["b"].(string), "[postgrescopy: truncated from 400 bytes]"), "300 bytes are 400 of base64")
	require.Equal(t, "kept", attrs["short"])
	var cutKey bool
	for k := range attrs {
		cutKey = cutKey || strings.HasSuffix(k, marker)
	}
	require.True(t, cutKey)

	// Log bodies likewise.
	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr(long)
	var b rows.Batch
	b.SetLimits(lim)
	b.AddLogs(ld)
	body := doc(t, fields(t, &b, lim, tables.IdxLogs, 0)["body"]).(string)
	require.True(t, strings.HasSuffix(body, marker))
}

// Rule: the top-level string values of span and log attributes longer than
// tables.LongString bytes are stored apart, cleaned like any text, in the
// map's _long column as key and value pairs; the views merge them back. A
// row cut to max_row_bytes keeps them in its jsonb, where the cut works.
func TestSanitizeLongStringsApart(t *testing.T) {
	at := strings.Repeat("a", tables.LongString)
	past := strings.Repeat("b", tables.LongString+1)
	dirty := strings.Repeat("x\x00\xff\"é", 100)
	td, s := oneSpan()
	s.Attributes().PutStr("at", at)
	s.Attributes().PutStr("past", past)
	s.Attributes().PutStr("dirty\x00", dirty)
	s.Attributes().PutEmptySlice("list").AppendEmpty().SetStr(past) // nested: stays
	s.Attributes().PutStr("promoted", past)
	s.Events().AppendEmpty().Attributes().PutStr("past", past) // not top level: stays
	r := spanRow(t, td, rows.Limits{})
	attrs := doc(t, r["span_attributes"]).(map[string]any)
	require.Equal(t, at, attrs["at"], "at the bound: in the jsonb")
	require.NotContains(t, attrs, "past")
	require.NotContains(t, attrs, "dirty\uFFFD")
	require.Equal(t, []any{past}, attrs["list"])
	cleaned := strings.ReplaceAll(strings.ReplaceAll(dirty, "\x00", "\uFFFD"), "\xff", "\uFFFD")
	require.Equal(t, []string{"past", past, "dirty\uFFFD", cleaned, "promoted", past}, textArray(t, r["span_attributes_long"]))
	require.Equal(t, past, doc(t, r["events"]).([]any)[0].(map[string]any)["attributes"].(map[string]any)["past"])

	// A refused row's rendering (rejects' row_json) holds them as an
	// array, which jsonb_populate_record reads into the text[].
	var rb rows.Batch
	rb.AddTraces(td)
	js, ok := rows.AppendRowJSON(nil, tables.IdxSpans, rb.Tuples(tables.IdxSpans, 0, 1))
	require.True(t, ok)
	var rendered map[string]any
	require.NoError(t, json.Unmarshal(js, &rendered))
	require.Equal(t, []any{"past", past, "dirty\uFFFD", cleaned, "promoted", past}, rendered["span_attributes_long"])

	// A row without long strings has NULL apart.
	td2, s2 := oneSpan()
	s2.Attributes().PutStr("at", at)
	require.Nil(t, spanRow(t, td2, rows.Limits{})["span_attributes_long"])

	// A promoted column that removes its key takes it from either place.
	lay, err := tables.NewLayout([]tables.Promoted{{Column: "p", Kind: tables.KindText, Traces: true, Remove: true,
		From: []tables.Source{{Scope: tables.ScopeSpan, Key: "promoted"}}}})
	require.NoError(t, err)
	var pb rows.Batch
	pb.SetLayout(lay)
	pb.AddTraces(td)
	pf, ok := pgcopy.SplitRow(nil, pb.Tuples(tables.IdxSpans, 0, 1))
	require.True(t, ok)
	long := pf[slices.Index(lay.Table(tables.IdxSpans).Columns, "span_attributes_long")]
	require.Equal(t, []string{"past", past, "dirty\uFFFD", cleaned}, textArray(t, long))
	require.Equal(t, past, string(pf[len(pf)-1]))

	// Logs likewise.
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.Attributes().PutStr("past", past)
	lr.Attributes().PutStr("short", "s")
	lr.Body().SetStr(past) // the body is not an attribute map
	var b rows.Batch
	b.AddLogs(ld)
	lf := fields(t, &b, rows.Limits{}, tables.IdxLogs, 0)
	require.Equal(t, map[string]any{"short": "s"}, doc(t, lf["log_attributes"]))
	require.Equal(t, []string{"past", past}, textArray(t, lf["log_attributes_long"]))
	require.Equal(t, past, doc(t, lf["body"]))

	// Over the row limit: written again with every value in the jsonb,
	// then cut there.
	lim := rows.Limits{MaxRow: 2000}
	td3, s3 := oneSpan()
	s3.Attributes().PutStr("huge", strings.Repeat("h", 5000))
	s3.Attributes().PutStr("past", past)
	r3 := spanRow(t, td3, lim)
	require.Nil(t, r3["span_attributes_long"])
	a3 := doc(t, r3["span_attributes"]).(map[string]any)
	require.Contains(t, a3, "huge")
	require.Contains(t, a3, jsonb.TruncatedKey, "cut where the jsonb holds it")
}

// Rule: a row over max_row_bytes has its text and jsonb values cut to a
// common share, the largest first, small ones kept whole; numbers, ids and
// arrays are never cut.
func TestSanitizeRowLimit(t *testing.T) {
	lim := rows.Limits{MaxValue: 1000, MaxRow: 4000}
	td, s := oneSpan()
	s.SetName("small name")
	s.SetTraceID(pcommon.TraceID{1, 15: 1})
	for i := range 100 {
		s.Attributes().PutStr(strings.Repeat("k", 3)+string(rune('A'+i%26))+strings.Repeat("x", i), strings.Repeat("v", 900))
	}
	for range 50 {
		s.Events().AppendEmpty().SetName(strings.Repeat("e", 500))
	}
	var b rows.Batch
	b.SetLimits(lim)
	b.AddTraces(td)
	r := fields(t, &b, lim, tables.IdxSpans, 0)
	require.LessOrEqual(t, len(b.Tuples(tables.IdxSpans, 0, 1)), 4000)
	require.Equal(t, "small name", string(r["span_name"]), "small values are kept whole")
	require.Equal(t, append([]byte{1}, append(make([]byte, 14), 1)...), r["trace_id"])
	attrs := doc(t, r["span_attributes"]).(map[string]any)
	require.Contains(t, attrs, jsonb.TruncatedKey)
	require.Greater(t, len(attrs), 1, "whole members kept before the marker")
	events := doc(t, r["events"]).([]any)
	require.True(t, strings.HasPrefix(events[len(events)-1].(string), "[postgrescopy: truncated from "))

	// Arrays are not cut: a histogram with many buckets stays whole even
	// over the limit, its other values shrunk as far as they go.
	md := pmetric.NewMetrics()
	m := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName(strings.Repeat("n", 900))
	hp := m.SetEmptyHistogram().DataPoints().AppendEmpty()
	hp.BucketCounts().FromRaw(make([]uint64, 1000))
	hp.Attributes().PutStr("a", strings.Repeat("v", 900))
	b.Reset()
	b.AddMetrics(md)
	hf := fields(t, &b, lim, tables.IdxHistogram, 0)
	require.Len(t, hf["bucket_counts"], 20+12*1000)
	require.LessOrEqual(t, len(hf["metric_name"]), minShare)
}

// TestLimitsKeepTheFastPathBytes: within the limits, a batch encodes to the
// same bytes with and without them.
func TestLimitsKeepTheFastPathBytes(t *testing.T) {
	td, s := oneSpan()
	s.SetName("op")
	s.Attributes().PutStr("k", strings.Repeat("v", 500))
	var plain, limited rows.Batch
	limited.SetLimits(rows.Limits{MaxValue: 64 << 10, MaxRow: 1 << 20})
	plain.AddTraces(td)
	limited.AddTraces(td)
	a, err := plain.Data(tables.IdxSpans)
	require.NoError(t, err)
	bb, err := limited.Data(tables.IdxSpans)
	require.NoError(t, err)
	require.Equal(t, a, bb)
}

// TestShardKeyForCitus: with the shard key (distribution: citus) an absent
// trace id stays NULL, the shard key is the trace id when there is one and a
// hash of the row otherwise; without it, the rows have no such column.
func TestShardKeyForCitus(t *testing.T) {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	lr.AppendEmpty().Body().SetStr("no trace")
	lr.AppendEmpty().Body().SetStr("no trace either")
	traced := lr.AppendEmpty()
	traced.SetTraceID(pcommon.TraceID{1, 2, 3})
	// Fields 1-4 are two timestamps and their rests (8+2+8+2 bytes with
	// their length words); the trace id follows.
	const traceOff = 2 + (4 + 8) + (4 + 2) + (4 + 8) + (4 + 2)
	for _, citus := range []bool{false, true} {
		var b rows.Batch
		layout := tables.DefaultLayout()
		if citus {
			layout = layout.WithShardKey()
		}
		b.SetLayout(layout)
		b.AddLogs(ld)
		var keys [][]byte
		for r := range 3 {
			row := b.Tuples(tables.IdxLogs, r, r+1)
			fields, ok := pgcopy.SplitRow(nil, row)
			if !ok {
				t.Fatal("row does not split")
			}
			if want := len(layout.Table(tables.IdxLogs).Columns); len(fields) != want {
				t.Fatalf("citus %v: %d fields, want %d", citus, len(fields), want)
			}
			n := int32(binary.BigEndian.Uint32(row[traceOff:]))
			if r < 2 && n != -1 {
				t.Fatalf("trace_id length %d, want NULL (-1): an absent trace id is not made up", n)
			}
			if citus {
				keys = append(keys, fields[len(fields)-1])
			}
		}
		if !citus {
			continue
		}
		if len(keys[0]) != 16 || bytes.Equal(keys[0], keys[1]) || bytes.Equal(keys[0], make([]byte, 16)) {
			t.Fatalf("logs outside a trace get distinct row-derived keys: %x %x", keys[0], keys[1])
		}
		if want := []byte{1, 2, 3, 15: 0}; !bytes.Equal(keys[2], want) {
			t.Fatalf("a traced log's key is its trace id: %x", keys[2])
		}
	}
}

// TestSeriesShardKey: a metric point's shard key follows its series: the
// same series at another time shares it, another series of the same name
// does not.
func TestSeriesShardKey(t *testing.T) {
	md := pmetric.NewMetrics()
	g := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	g.SetName("m")
	pts := g.SetEmptyGauge().DataPoints()
	for i, series := range []int64{1, 1, 2} {
		dp := pts.AppendEmpty()
		dp.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + i))
		dp.SetDoubleValue(float64(i))
		dp.Attributes().PutInt("series", series)
	}
	var b rows.Batch
	b.SetLayout(tables.DefaultLayout().WithShardKey())
	b.AddMetrics(md)
	var keys [][]byte
	for r := range 3 {
		fields, ok := pgcopy.SplitRow(nil, b.Tuples(tables.IdxGauge, r, r+1))
		if !ok {
			t.Fatal("row does not split")
		}
		keys = append(keys, fields[len(fields)-1])
	}
	if !bytes.Equal(keys[0], keys[1]) || bytes.Equal(keys[0], keys[2]) {
		t.Fatalf("series keys %x %x %x: want the first two equal, the third apart", keys[0], keys[1], keys[2])
	}
}
