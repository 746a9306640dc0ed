package rows_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/rows/rowstest"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestRoundTrip writes pdata with every OTel field set through Batch and
// Writer into a real PostgreSQL, rebuilds the pdata from the columns alone and
// requires it to equal the original once the documented stand-ins (bytes as
// base64, NaN/±Inf as strings, NUL and invalid UTF-8 as U+FFFD) are applied.
// The comparison goes through the OTLP/JSON form of both sides, so a field the
// encoder drops, or a value whose type changes, shows up as a difference at
// its path; TestRoundTripFixtureIsComplete makes sure every field is set.
func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	migrate(t, pool, name)

	td, ld, md := rowstest.Traces(), rowstest.Logs(), rowstest.Metrics()
	// Keep pristine copies: the encoder must not modify its input either.
	tdWant, ldWant, mdWant := ptrace.NewTraces(), plog.NewLogs(), pmetric.NewMetrics()
	td.CopyTo(tdWant)
	ld.CopyTo(ldWant)
	md.CopyTo(mdWant)

	var b rows.Batch
	b.AddTraces(td)
	b.AddLogs(ld)
	b.AddMetrics(md)
	res, err := pgwrite.NewWriter(pool, name).Write(ctx, &b)
	require.NoError(t, err)
	require.Len(t, res, tables.NumSignalTables, "every table gets rows: %+v", res)

	t.Run("traces", func(t *testing.T) {
		got := readTraces(t, pool, name)
		rowstest.NormTraces(tdWant)
		compareOTLP(t, tracesJSON(t, tdWant), tracesJSON(t, got))
	})
	t.Run("logs", func(t *testing.T) {
		got := readLogs(t, pool, name)
		rowstest.NormLogs(ldWant)
		compareOTLP(t, logsJSON(t, ldWant), logsJSON(t, got))
	})
	t.Run("metrics", func(t *testing.T) {
		got := readMetrics(t, pool, name)
		rowstest.NormMetrics(mdWant)
		compareOTLP(t, metricsJSON(t, mdWant), metricsJSON(t, got))
	})
}

// TestRoundTripFixtureIsComplete guards the round trip against a fixture that
// leaves a field at its default: OTLP/JSON omits defaults, so a field missing
// here would also be missing from both sides of the comparison and a dropped
// column would go unnoticed.
func TestRoundTripFixtureIsComplete(t *testing.T) {
	have := map[string]bool{}
	for _, doc := range [][]byte{
		tracesJSON(t, rowstest.Traces()), logsJSON(t, rowstest.Logs()), metricsJSON(t, rowstest.Metrics()),
	} {
		collectPaths("", decodeTree(t, doc), have)
	}
	// Every field of every OTLP message that pdata exposes, as JSON paths.
	res := []string{"resource.attributes", "resource.droppedAttributesCount", "schemaUrl"}
	scope := []string{"scope.name", "scope.version", "scope.attributes", "scope.droppedAttributesCount", "schemaUrl"}
	var want []string
	add := func(prefix string, fields ...string) {
		for _, f := range fields {
			want = append(want, prefix+"."+f)
		}
	}
	add("resourceSpans", res...)
	add("resourceSpans.scopeSpans", scope...)
	add("resourceSpans.scopeSpans.spans", "traceId", "spanId", "parentSpanId", "traceState", "flags",
		"name", "kind", "startTimeUnixNano", "endTimeUnixNano", "attributes", "droppedAttributesCount",
		"events", "droppedEventsCount", "links", "droppedLinksCount", "status.code", "status.message")
	add("resourceSpans.scopeSpans.spans.events", "timeUnixNano", "name", "attributes", "droppedAttributesCount")
	add("resourceSpans.scopeSpans.spans.links", "traceId", "spanId", "traceState", "flags", "attributes", "droppedAttributesCount")
	add("resourceLogs", res...)
	add("resourceLogs.scopeLogs", scope...)
	add("resourceLogs.scopeLogs.logRecords", "timeUnixNano", "observedTimeUnixNano", "traceId", "spanId",
		"flags", "severityNumber", "severityText", "eventName", "attributes", "droppedAttributesCount",
		"body.kvlistValue", "body.stringValue", "body.bytesValue", "body.arrayValue", "body.intValue",
		"body.doubleValue", "body.boolValue")
	add("resourceMetrics", res...)
	add("resourceMetrics.scopeMetrics", scope...)
	m := "resourceMetrics.scopeMetrics.metrics"
	add(m, "name", "description", "unit", "metadata")
	point := []string{"timeUnixNano", "startTimeUnixNano", "attributes", "flags"}
	exemplar := []string{"exemplars.timeUnixNano", "exemplars.asInt", "exemplars.asDouble",
		"exemplars.traceId", "exemplars.spanId", "exemplars.filteredAttributes"}
	add(m+".gauge.dataPoints", append(point, append(exemplar, "asInt", "asDouble")...)...)
	add(m+".sum", "isMonotonic", "aggregationTemporality")
	add(m+".sum.dataPoints", append(point, append(exemplar, "asInt", "asDouble")...)...)
	add(m+".histogram", "aggregationTemporality")
	add(m+".histogram.dataPoints", append(point, append(exemplar, "count", "sum", "min", "max",
		"bucketCounts", "explicitBounds")...)...)
	add(m+".exponentialHistogram", "aggregationTemporality")
	add(m+".exponentialHistogram.dataPoints", append(point, append(exemplar, "count", "sum", "min", "max",
		"scale", "zeroCount", "zeroThreshold", "positive.offset", "positive.bucketCounts",
		"negative.offset", "negative.bucketCounts")...)...)
	add(m+".summary.dataPoints", append(point, "count", "sum", "quantileValues.quantile", "quantileValues.value")...)
	// Every attribute value type, nested too.
	attrs := "resourceSpans.scopeSpans.spans.attributes.value"
	add(attrs, "stringValue", "intValue", "doubleValue", "boolValue", "bytesValue",
		"arrayValue.values.kvlistValue.values.value.bytesValue", "kvlistValue.values.value.kvlistValue")
	for _, p := range want {
		require.Truef(t, have[p], "the fixture leaves %s at its default; set it", p)
	}
}

// TestCompareOTLPReportsLoss checks the comparison itself: a dropped field and
// an int that came back as a double must both be reported.
func TestCompareOTLPReportsLoss(t *testing.T) {
	want := decodeTree(t, []byte(`{"a":{"b":"1","c":[{"key":"x","value":{"intValue":"3"}}]}}`))
	for _, doc := range []string{
		`{"a":{"c":[{"key":"x","value":{"intValue":"3"}}]}}`,
		`{"a":{"b":"1","c":[{"key":"x","value":{"doubleValue":3}}]}}`,
		`{"a":{"b":"1","c":[]}}`,
	} {
		var diffs []string
		diffTree("", want, decodeTree(t, []byte(doc)), &diffs)
		require.NotEmpty(t, diffs, doc)
	}
	var diffs []string
	diffTree("", want, decodeTree(t, []byte(`{"a":{"c":[{"value":{"intValue":"3"},"key":"x"}],"b":"1"}}`)), &diffs)
	require.Empty(t, diffs)
}

func migrate(t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
}

// ---------------------------------------------------------------- decoding

// ctxCols are the contextColumns every table ends with.
type ctxCols struct {
	scopeName, scopeVersion pgtype.Text
	resAttrs, scopeAttrs    []byte
	resDropped, scopeDrop   int32
	resSchema, scopeSchema  pgtype.Text
	service                 pgtype.Text
}

const ctxSelect = `service_name, scope_name, scope_version, resource_attributes, scope_attributes,
	resource_dropped_attributes_count, scope_dropped_attributes_count, resource_schema_url, scope_schema_url`

func (c *ctxCols) dest() []any {
	return []any{&c.service, &c.scopeName, &c.scopeVersion, &c.resAttrs, &c.scopeAttrs,
		&c.resDropped, &c.scopeDrop, &c.resSchema, &c.scopeSchema}
}

func (c *ctxCols) resourceKey() string {
	return fmt.Sprintf("%s|%d|%s", c.resAttrs, c.resDropped, c.resSchema.String)
}

func (c *ctxCols) scopeKey() string {
	return fmt.Sprintf("%s|%s|%s|%d|%s", c.scopeName.String, c.scopeVersion.String, c.scopeAttrs, c.scopeDrop, c.scopeSchema.String)
}

func (c *ctxCols) fillResource(t *testing.T, r pcommon.Resource) string {
	fillMap(t, r.Attributes(), c.resAttrs)
	r.SetDroppedAttributesCount(uint32(c.resDropped))
	// service_name is derived from the resource, not an OTel field of its own.
	want := pgtype.Text{}
	if v, ok := r.Attributes().Get("service.name"); ok {
		want = pgtype.Text{String: v.AsString(), Valid: v.AsString() != ""}
	}
	require.Equal(t, want, c.service, "service_name")
	return c.resSchema.String
}

func (c *ctxCols) fillScope(t *testing.T, s pcommon.InstrumentationScope) string {
	s.SetName(c.scopeName.String)
	s.SetVersion(c.scopeVersion.String)
	fillMap(t, s.Attributes(), c.scopeAttrs)
	s.SetDroppedAttributesCount(uint32(c.scopeDrop))
	return c.scopeSchema.String
}

// grouper starts a new resource or scope whenever the context columns change
// from one row to the next, which rebuilds the fixture's nesting because rows
// are read back in fixture order.
type grouper struct {
	res, scope string
	started    bool
}

// step reports whether row c needs a new resource, and a new scope.
func (g *grouper) step(c *ctxCols) (newRes, newScope bool) {
	rk, sk := c.resourceKey(), c.scopeKey()
	newRes = !g.started || rk != g.res
	newScope = newRes || sk != g.scope
	g.res, g.scope, g.started = rk, sk, true
	return newRes, newScope
}

func nanos(t *testing.T, ts time.Time, frac int16) pcommon.Timestamp {
	t.Helper()
	require.True(t, frac >= 0 && frac < 1000, "frac_ns %d out of range", frac)
	return pcommon.Timestamp(uint64(ts.UnixMicro())*1000 + uint64(frac))
}

func traceID(t *testing.T, u pgtype.UUID) pcommon.TraceID {
	t.Helper()
	if !u.Valid {
		return pcommon.TraceID{}
	}
	require.NotEqual(t, [16]byte{}, u.Bytes, "an absent trace id must be NULL")
	return pcommon.TraceID(u.Bytes)
}

func spanID(t *testing.T, v pgtype.Int8) pcommon.SpanID {
	t.Helper()
	var id pcommon.SpanID
	if !v.Valid {
		return id
	}
	require.NotZero(t, v.Int64, "an absent span id must be NULL")
	binary.BigEndian.PutUint64(id[:], uint64(v.Int64))
	return id
}

func hexTraceID(t *testing.T, s string) pcommon.TraceID {
	t.Helper()
	var id pcommon.TraceID
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	require.Len(t, b, len(id))
	copy(id[:], b)
	return id
}

func hexSpanID(t *testing.T, s string) pcommon.SpanID {
	t.Helper()
	var id pcommon.SpanID
	b, err := hex.DecodeString(s)
	require.NoError(t, err)
	require.Len(t, b, len(id))
	copy(id[:], b)
	return id
}

// decodeJSON parses a stored document with UseNumber, so that numbers keep
// their text and the int/double convention can be applied.
func decodeJSON(t *testing.T, doc []byte) any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	var x any
	require.NoError(t, d.Decode(&x), "%s", doc)
	require.False(t, d.More(), "trailing data in %s", doc)
	return x
}

// strictDecode decodes a stored JSON object into a struct and refuses keys
// the struct does not know, so that an added field is noticed.
func strictDecode(t *testing.T, doc []byte, v any) {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	d.DisallowUnknownFields()
	require.NoError(t, d.Decode(v), "%s", doc)
}

// setValue is the inverse of jsonb.AppendValue under the documented
// conventions: a number with a decimal point or exponent is a double, any
// other number an int, null an empty value.
func setValue(t *testing.T, v pcommon.Value, x any) {
	t.Helper()
	switch x := x.(type) {
	case nil:
	case bool:
		v.SetBool(x)
	case string:
		v.SetStr(x)
	case json.Number:
		if strings.ContainsAny(string(x), ".eE") {
			f, err := strconv.ParseFloat(string(x), 64)
			require.NoError(t, err)
			v.SetDouble(f)
		} else {
			i, err := strconv.ParseInt(string(x), 10, 64)
			if err != nil {
				// Keep going so the diff shows where: an integral double
				// that lost its ".0" overflows here.
				t.Errorf("integer %s: %v", x, err)
				v.SetStr("unparsable integer " + string(x))
				return
			}
			v.SetInt(i)
		}
	case []any:
		s := v.SetEmptySlice()
		for _, e := range x {
			setValue(t, s.AppendEmpty(), e)
		}
	case map[string]any:
		setMap(t, v.SetEmptyMap(), x)
	default:
		t.Fatalf("unexpected JSON value %T", x)
	}
}

func setMap(t *testing.T, m pcommon.Map, x map[string]any) {
	t.Helper()
	for k, e := range x {
		setValue(t, m.PutEmpty(k), e)
	}
}

func fillMap(t *testing.T, m pcommon.Map, doc []byte) {
	t.Helper()
	obj, ok := decodeJSON(t, doc).(map[string]any)
	require.True(t, ok, "not a JSON object: %s", doc)
	setMap(t, m, obj)
}

// parseEnum maps an enum's String() form back to its value.
func parseEnum[E interface {
	~int32
	String() string
}](t *testing.T, s string) E {
	t.Helper()
	for i := int32(0); i < 64; i++ {
		if E(i).String() == s {
			return E(i)
		}
	}
	t.Fatalf("unknown enum text %q", s)
	return 0
}

func query(t *testing.T, pool *pgxpool.Pool, sql string) pgx.Rows {
	t.Helper()
	r, err := pool.Query(context.Background(), sql)
	require.NoError(t, err, sql)
	return r
}

func readTraces(t *testing.T, pool *pgxpool.Pool, name string) ptrace.Traces {
	td := ptrace.NewTraces()
	r := query(t, pool, `SELECT start_time, start_time_frac_ns, end_time, duration_ns,
		trace_id, span_id, parent_span_id, trace_state, flags, span_name, span_kind,
		status_code, status_message, span_attributes, events, links,
		dropped_attributes_count, dropped_events_count, dropped_links_count, `+ctxSelect+`
		FROM `+schema.Qualified(name, "spans")+` ORDER BY start_time, start_time_frac_ns`)
	defer r.Close()
	var g grouper
	var rs ptrace.ResourceSpans
	var ss ptrace.ScopeSpans
	for r.Next() {
		var (
			start, end              time.Time
			frac                    int16
			dur                     int64
			tid                     pgtype.UUID
			sid, psid               pgtype.Int8
			state, statusMsg        pgtype.Text
			flags                   int32
			spanName, kind, status  string
			attrs, events, links    []byte
			dAttrs, dEvents, dLinks int32
			c                       ctxCols
		)
		dest := append([]any{&start, &frac, &end, &dur, &tid, &sid, &psid, &state, &flags,
			&spanName, &kind, &status, &statusMsg, &attrs, &events, &links,
			&dAttrs, &dEvents, &dLinks}, c.dest()...)
		require.NoError(t, r.Scan(dest...))

		newRes, newScope := g.step(&c)
		if newRes {
			rs = td.ResourceSpans().AppendEmpty()
			rs.SetSchemaUrl(c.fillResource(t, rs.Resource()))
		}
		if newScope {
			ss = rs.ScopeSpans().AppendEmpty()
			ss.SetSchemaUrl(c.fillScope(t, ss.Scope()))
		}

		s := ss.Spans().AppendEmpty()
		startNs := nanos(t, start, frac)
		endNs := pcommon.Timestamp(int64(startNs) + dur)
		require.Equal(t, int64(uint64(endNs)/1000), end.UnixMicro(), "end_time agrees with start + duration")
		s.SetStartTimestamp(startNs)
		s.SetEndTimestamp(endNs)
		s.SetTraceID(traceID(t, tid))
		s.SetSpanID(spanID(t, sid))
		s.SetParentSpanID(spanID(t, psid))
		s.TraceState().FromRaw(state.String)
		s.SetFlags(uint32(flags))
		s.SetName(spanName)
		s.SetKind(parseEnum[ptrace.SpanKind](t, kind))
		s.Status().SetCode(parseEnum[ptrace.StatusCode](t, status))
		s.Status().SetMessage(statusMsg.String)
		fillMap(t, s.Attributes(), attrs)
		s.SetDroppedAttributesCount(uint32(dAttrs))
		s.SetDroppedEventsCount(uint32(dEvents))
		s.SetDroppedLinksCount(uint32(dLinks))

		// NULL stands for no events or links; an empty array is not written.
		require.False(t, events != nil && string(events) == "[]", "empty events must be NULL")
		if events != nil {
			var evs []struct {
				TimeUnixNano           uint64          `json:"time_unix_nano"`
				Name                   string          `json:"name"`
				Attributes             json.RawMessage `json:"attributes"`
				DroppedAttributesCount uint32          `json:"dropped_attributes_count"`
			}
			strictDecode(t, events, &evs)
			for _, x := range evs {
				ev := s.Events().AppendEmpty()
				ev.SetTimestamp(pcommon.Timestamp(x.TimeUnixNano))
				ev.SetName(x.Name)
				fillMap(t, ev.Attributes(), x.Attributes)
				ev.SetDroppedAttributesCount(x.DroppedAttributesCount)
			}
		}
		if links != nil {
			var ls []struct {
				TraceID                string          `json:"trace_id"`
				SpanID                 string          `json:"span_id"`
				TraceState             string          `json:"trace_state"`
				Flags                  uint32          `json:"flags"`
				Attributes             json.RawMessage `json:"attributes"`
				DroppedAttributesCount uint32          `json:"dropped_attributes_count"`
			}
			strictDecode(t, links, &ls)
			for _, x := range ls {
				l := s.Links().AppendEmpty()
				l.SetTraceID(hexTraceID(t, x.TraceID))
				l.SetSpanID(hexSpanID(t, x.SpanID))
				l.TraceState().FromRaw(x.TraceState)
				l.SetFlags(x.Flags)
				fillMap(t, l.Attributes(), x.Attributes)
				l.SetDroppedAttributesCount(x.DroppedAttributesCount)
			}
		}
	}
	require.NoError(t, r.Err())
	return td
}

func readLogs(t *testing.T, pool *pgxpool.Pool, name string) plog.Logs {
	ld := plog.NewLogs()
	r := query(t, pool, `SELECT "timestamp", timestamp_frac_ns, observed_timestamp, observed_timestamp_frac_ns,
		trace_id, span_id, flags, severity_number, severity_text, body, event_name,
		log_attributes, dropped_attributes_count, `+ctxSelect+`
		FROM `+schema.Qualified(name, "logs")+` ORDER BY "timestamp", timestamp_frac_ns`)
	defer r.Close()
	var g grouper
	var rl plog.ResourceLogs
	var sl plog.ScopeLogs
	for r.Next() {
		var (
			ts, obs            time.Time
			tsFrac, obsFrac    int16
			tid                pgtype.UUID
			sid                pgtype.Int8
			flags, sev, dAttrs int32
			sevText, event     pgtype.Text
			body, attrs        []byte
			c                  ctxCols
		)
		dest := append([]any{&ts, &tsFrac, &obs, &obsFrac, &tid, &sid, &flags, &sev, &sevText,
			&body, &event, &attrs, &dAttrs}, c.dest()...)
		require.NoError(t, r.Scan(dest...))

		newRes, newScope := g.step(&c)
		if newRes {
			rl = ld.ResourceLogs().AppendEmpty()
			rl.SetSchemaUrl(c.fillResource(t, rl.Resource()))
		}
		if newScope {
			sl = rl.ScopeLogs().AppendEmpty()
			sl.SetSchemaUrl(c.fillScope(t, sl.Scope()))
		}

		l := sl.LogRecords().AppendEmpty()
		l.SetTimestamp(nanos(t, ts, tsFrac))
		l.SetObservedTimestamp(nanos(t, obs, obsFrac))
		l.SetTraceID(traceID(t, tid))
		l.SetSpanID(spanID(t, sid))
		l.SetFlags(plog.LogRecordFlags(uint32(flags)))
		l.SetSeverityNumber(plog.SeverityNumber(sev))
		l.SetSeverityText(sevText.String)
		if body != nil { // NULL is the empty body
			setValue(t, l.Body(), decodeJSON(t, body))
		}
		l.SetEventName(event.String)
		fillMap(t, l.Attributes(), attrs)
		l.SetDroppedAttributesCount(uint32(dAttrs))
	}
	require.NoError(t, r.Err())
	return ld
}

// metricRow is one data point read back from any metric table: its metric's
// identity, and how to add it to a metric of the right type.
type metricRow struct {
	time      pcommon.Timestamp
	ctx       ctxCols
	key       string
	newMetric func(m pmetric.Metric)
	addPoint  func(m pmetric.Metric)
}

// metricHead holds the metricColumns every metric table starts with.
type metricHead struct {
	ts                         time.Time
	tsFrac                     int16
	start                      pgtype.Timestamptz
	startFrac                  pgtype.Int2
	name                       string
	desc, unit                 pgtype.Text
	metadata, attrs, exemplars []byte
	flags                      int32
}

const headSelect = `"time", time_frac_ns, start_time, start_time_frac_ns, metric_name, description,
	unit, metric_metadata, attributes, exemplars, flags`

func (h *metricHead) dest() []any {
	return []any{&h.ts, &h.tsFrac, &h.start, &h.startFrac, &h.name, &h.desc, &h.unit,
		&h.metadata, &h.attrs, &h.exemplars, &h.flags}
}

func (h *metricHead) setMetric(t *testing.T, m pmetric.Metric) {
	m.SetName(h.name)
	m.SetDescription(h.desc.String)
	m.SetUnit(h.unit.String)
	fillMap(t, m.Metadata(), h.metadata)
}

type dataPoint interface {
	Attributes() pcommon.Map
	SetTimestamp(pcommon.Timestamp)
	SetStartTimestamp(pcommon.Timestamp)
	SetFlags(pmetric.DataPointFlags)
}

func (h *metricHead) setPoint(t *testing.T, p dataPoint, ex func() pmetric.ExemplarSlice) {
	p.SetTimestamp(nanos(t, h.ts, h.tsFrac))
	require.Equal(t, h.start.Valid, h.startFrac.Valid, "start_time and its frac are NULL together")
	if h.start.Valid {
		p.SetStartTimestamp(nanos(t, h.start.Time, h.startFrac.Int16))
	}
	p.SetFlags(pmetric.DataPointFlags(uint32(h.flags)))
	fillMap(t, p.Attributes(), h.attrs)
	if h.exemplars == nil {
		return
	}
	require.NotNil(t, ex, "exemplars on a point type without them")
	var xs []struct {
		TimeUnixNano       uint64          `json:"time_unix_nano"`
		AsInt              *int64          `json:"as_int"`
		AsDouble           json.Number     `json:"as_double"`
		TraceID            *string         `json:"trace_id"`
		SpanID             *string         `json:"span_id"`
		FilteredAttributes json.RawMessage `json:"filtered_attributes"`
	}
	strictDecode(t, h.exemplars, &xs)
	for _, x := range xs {
		e := ex().AppendEmpty()
		e.SetTimestamp(pcommon.Timestamp(x.TimeUnixNano))
		switch {
		case x.AsInt != nil:
			e.SetIntValue(*x.AsInt)
		case x.AsDouble != "":
			f, err := strconv.ParseFloat(string(x.AsDouble), 64)
			require.NoError(t, err)
			e.SetDoubleValue(f)
		}
		if x.TraceID != nil {
			e.SetTraceID(hexTraceID(t, *x.TraceID))
		}
		if x.SpanID != nil {
			e.SetSpanID(hexSpanID(t, *x.SpanID))
		}
		fillMap(t, e.FilteredAttributes(), x.FilteredAttributes)
	}
}

func optFloat(v pgtype.Float8, set func(float64)) {
	if v.Valid {
		set(v.Float64)
	}
}

func u64s(v []int64) []uint64 {
	out := make([]uint64, len(v))
	for i, x := range v {
		out[i] = uint64(x)
	}
	return out
}

// readMetrics reads all five metric tables, orders the points by time (the
// fixture's order) and regroups them into resources, scopes and metrics.
func readMetrics(t *testing.T, pool *pgxpool.Pool, name string) pmetric.Metrics {
	var all []metricRow
	read := func(table, cols string, scan func(h *metricHead, c *ctxCols, r pgx.Rows) metricRow) {
		r := query(t, pool, `SELECT `+headSelect+`, `+cols+`, `+ctxSelect+` FROM `+schema.Qualified(name, table))
		defer r.Close()
		for r.Next() {
			h, c := &metricHead{}, &ctxCols{}
			row := scan(h, c, r)
			row.time = nanos(t, h.ts, h.tsFrac)
			row.ctx = *c
			row.key = table + "|" + h.name + "|" + h.desc.String + "|" + h.unit.String + "|" + string(h.metadata) + "|" + row.key
			all = append(all, row)
		}
		require.NoError(t, r.Err())
	}
	scanAll := func(r pgx.Rows, h *metricHead, c *ctxCols, mid ...any) {
		require.NoError(t, r.Scan(append(append(h.dest(), mid...), c.dest()...)...))
	}
	number := func(dp pmetric.NumberDataPoint, value pgtype.Float8, valueInt pgtype.Int8) {
		switch {
		case valueInt.Valid:
			require.True(t, value.Valid, "value is set beside value_int")
			require.Equal(t, float64(valueInt.Int64), value.Float64)
			dp.SetIntValue(valueInt.Int64)
		case value.Valid:
			dp.SetDoubleValue(value.Float64)
		}
	}

	read("metrics_gauge", "value, value_int", func(h *metricHead, c *ctxCols, r pgx.Rows) metricRow {
		var v pgtype.Float8
		var vi pgtype.Int8
		scanAll(r, h, c, &v, &vi)
		return metricRow{
			newMetric: func(m pmetric.Metric) { h.setMetric(t, m); m.SetEmptyGauge() },
			addPoint: func(m pmetric.Metric) {
				dp := m.Gauge().DataPoints().AppendEmpty()
				h.setPoint(t, dp, dp.Exemplars)
				number(dp, v, vi)
			},
		}
	})
	read("metrics_sum", "value, value_int, is_monotonic, aggregation_temporality", func(h *metricHead, c *ctxCols, r pgx.Rows) metricRow {
		var v pgtype.Float8
		var vi pgtype.Int8
		var mono bool
		var temp string
		scanAll(r, h, c, &v, &vi, &mono, &temp)
		return metricRow{
			key: fmt.Sprint(mono, temp),
			newMetric: func(m pmetric.Metric) {
				h.setMetric(t, m)
				s := m.SetEmptySum()
				s.SetIsMonotonic(mono)
				s.SetAggregationTemporality(parseEnum[pmetric.AggregationTemporality](t, temp))
			},
			addPoint: func(m pmetric.Metric) {
				dp := m.Sum().DataPoints().AppendEmpty()
				h.setPoint(t, dp, dp.Exemplars)
				number(dp, v, vi)
			},
		}
	})
	read("metrics_histogram", "count, sum, min, max, bucket_counts, explicit_bounds, aggregation_temporality", func(h *metricHead, c *ctxCols, r pgx.Rows) metricRow {
		var count int64
		var sum, lo, hi pgtype.Float8
		var buckets []int64
		var bounds []float64
		var temp string
		scanAll(r, h, c, &count, &sum, &lo, &hi, &buckets, &bounds, &temp)
		return metricRow{
			key: temp,
			newMetric: func(m pmetric.Metric) {
				h.setMetric(t, m)
				m.SetEmptyHistogram().SetAggregationTemporality(parseEnum[pmetric.AggregationTemporality](t, temp))
			},
			addPoint: func(m pmetric.Metric) {
				dp := m.Histogram().DataPoints().AppendEmpty()
				h.setPoint(t, dp, dp.Exemplars)
				dp.SetCount(uint64(count))
				optFloat(sum, dp.SetSum)
				optFloat(lo, dp.SetMin)
				optFloat(hi, dp.SetMax)
				dp.BucketCounts().FromRaw(u64s(buckets))
				dp.ExplicitBounds().FromRaw(bounds)
			},
		}
	})
	read("metrics_exponential_histogram", `count, sum, min, max, scale, zero_count, zero_threshold,
		positive_offset, positive_bucket_counts, negative_offset, negative_bucket_counts, aggregation_temporality`,
		func(h *metricHead, c *ctxCols, r pgx.Rows) metricRow {
			var count, zeroCount int64
			var sum, lo, hi pgtype.Float8
			var scale, posOff, negOff int32
			var zeroThreshold float64
			var pos, neg []int64
			var temp string
			scanAll(r, h, c, &count, &sum, &lo, &hi, &scale, &zeroCount, &zeroThreshold,
				&posOff, &pos, &negOff, &neg, &temp)
			return metricRow{
				key: temp,
				newMetric: func(m pmetric.Metric) {
					h.setMetric(t, m)
					m.SetEmptyExponentialHistogram().SetAggregationTemporality(parseEnum[pmetric.AggregationTemporality](t, temp))
				},
				addPoint: func(m pmetric.Metric) {
					dp := m.ExponentialHistogram().DataPoints().AppendEmpty()
					h.setPoint(t, dp, dp.Exemplars)
					dp.SetCount(uint64(count))
					optFloat(sum, dp.SetSum)
					optFloat(lo, dp.SetMin)
					optFloat(hi, dp.SetMax)
					dp.SetScale(scale)
					dp.SetZeroCount(uint64(zeroCount))
					dp.SetZeroThreshold(zeroThreshold)
					dp.Positive().SetOffset(posOff)
					dp.Positive().BucketCounts().FromRaw(u64s(pos))
					dp.Negative().SetOffset(negOff)
					dp.Negative().BucketCounts().FromRaw(u64s(neg))
				},
			}
		})
	read("metrics_summary", "count, sum, quantiles, quantile_values", func(h *metricHead, c *ctxCols, r pgx.Rows) metricRow {
		var count int64
		var sum float64
		var qs, vs []float64
		scanAll(r, h, c, &count, &sum, &qs, &vs)
		return metricRow{
			newMetric: func(m pmetric.Metric) { h.setMetric(t, m); m.SetEmptySummary() },
			addPoint: func(m pmetric.Metric) {
				dp := m.Summary().DataPoints().AppendEmpty()
				h.setPoint(t, dp, nil)
				dp.SetCount(uint64(count))
				dp.SetSum(sum)
				require.Len(t, vs, len(qs), "quantiles and quantile_values pair up")
				for i := range qs {
					qv := dp.QuantileValues().AppendEmpty()
					qv.SetQuantile(qs[i])
					qv.SetValue(vs[i])
				}
			},
		}
	})

	sort.SliceStable(all, func(i, j int) bool { return all[i].time < all[j].time })
	md := pmetric.NewMetrics()
	var g grouper
	var rm pmetric.ResourceMetrics
	var sm pmetric.ScopeMetrics
	var m pmetric.Metric
	lastKey := ""
	for i := range all {
		row := &all[i]
		newRes, newScope := g.step(&row.ctx)
		if newRes {
			rm = md.ResourceMetrics().AppendEmpty()
			rm.SetSchemaUrl(row.ctx.fillResource(t, rm.Resource()))
		}
		if newScope {
			sm = rm.ScopeMetrics().AppendEmpty()
			sm.SetSchemaUrl(row.ctx.fillScope(t, sm.Scope()))
		}
		if newScope || row.key != lastKey {
			m = sm.Metrics().AppendEmpty()
			row.newMetric(m)
			lastKey = row.key
		}
		row.addPoint(m)
	}
	return md
}

// ---------------------------------------------------------------- comparing

func tracesJSON(t *testing.T, td ptrace.Traces) []byte {
	b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(td)
	require.NoError(t, err)
	return b
}

func logsJSON(t *testing.T, ld plog.Logs) []byte {
	b, err := (&plog.JSONMarshaler{}).MarshalLogs(ld)
	require.NoError(t, err)
	return b
}

func metricsJSON(t *testing.T, md pmetric.Metrics) []byte {
	b, err := (&pmetric.JSONMarshaler{}).MarshalMetrics(md)
	require.NoError(t, err)
	return b
}

// decodeTree parses OTLP/JSON and sorts every key-value list by key: jsonb
// keeps object keys in its own order, and OTel gives attribute order no
// meaning.
func decodeTree(t *testing.T, doc []byte) any {
	t.Helper()
	return sortKeyValues("", decodeJSON(t, doc))
}

func sortKeyValues(field string, x any) any {
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			x[k] = sortKeyValues(k, v)
		}
	case []any:
		for i := range x {
			x[i] = sortKeyValues("", x[i])
		}
		switch field {
		case "attributes", "filteredAttributes", "metadata", "values":
			if isKeyValueList(x) {
				sort.SliceStable(x, func(i, j int) bool { return kvKeyOf(x[i]) < kvKeyOf(x[j]) })
			}
		}
	}
	return x
}

func isKeyValueList(x []any) bool {
	for _, e := range x {
		m, ok := e.(map[string]any)
		if !ok {
			return false
		}
		for k := range m {
			if k != "key" && k != "value" {
				return false
			}
		}
	}
	return true
}

// diffTree lists every leaf where got differs from want, by path.
func diffTree(path string, want, got any, out *[]string) {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: want object, got %#v", path, got))
			return
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range g {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		sort.Strings(sorted)
		for _, k := range sorted {
			wv, wok := w[k]
			gv, gok := g[k]
			switch {
			case !gok:
				*out = append(*out, fmt.Sprintf("%s.%s: missing, want %s", path, k, brief(wv)))
			case !wok:
				*out = append(*out, fmt.Sprintf("%s.%s: unexpected %s", path, k, brief(gv)))
			default:
				diffTree(path+"."+k, wv, gv, out)
			}
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			*out = append(*out, fmt.Sprintf("%s: want array, got %#v", path, got))
			return
		}
		if len(w) != len(g) {
			*out = append(*out, fmt.Sprintf("%s: want %d elements, got %d", path, len(w), len(g)))
		}
		for i := 0; i < len(w) && i < len(g); i++ {
			p := fmt.Sprintf("%s[%d]", path, i)
			if k := kvKeyOf(w[i]); k != "" {
				p = fmt.Sprintf("%s[%q]", path, k)
			}
			diffTree(p, w[i], g[i], out)
		}
	default:
		if !reflect.DeepEqual(want, got) {
			*out = append(*out, fmt.Sprintf("%s: want %s, got %s", path, brief(want), brief(got)))
		}
	}
}

func kvKeyOf(x any) string {
	m, ok := x.(map[string]any)
	if !ok {
		return ""
	}
	k, _ := m["key"].(string)
	return k
}

func brief(x any) string {
	b, _ := json.Marshal(x)
	if len(b) > 120 {
		return string(b[:120]) + "..."
	}
	return string(b)
}

func compareOTLP(t *testing.T, want, got []byte) {
	t.Helper()
	var diffs []string
	diffTree("", decodeTree(t, want), decodeTree(t, got), &diffs)
	for _, d := range diffs {
		t.Error(d)
	}
}

// collectPaths records every object key path of x, array indices dropped.
func collectPaths(prefix string, x any, into map[string]bool) {
	switch x := x.(type) {
	case map[string]any:
		for k, v := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			into[p] = true
			collectPaths(p, v, into)
		}
	case []any:
		for _, e := range x {
			collectPaths(prefix, e, into)
		}
	}
}
