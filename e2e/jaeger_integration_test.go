package e2e

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// jaegerBinary is the Jaeger built by `make tools`; without it the test
// fails, as every missing tool does.
func jaegerBinary(t testing.TB) string {
	t.Helper()
	return tool(t, "POSTGRESCOPY_JAEGER", "../.bin/jaeger", "make tools")
}

// jaegerSpan is one span the test sends.
type jaegerSpan struct {
	service, name string
	kind          ptrace.SpanKind
	trace         pcommon.TraceID
	id, parent    byte
	offset, dur   time.Duration
	attrs         map[string]any
	errored       bool
}

func jaegerSpanID(n byte) pcommon.SpanID {
	if n == 0 {
		return pcommon.SpanID{}
	}
	return pcommon.SpanID{0x5e, 0x11, 0, 0, 0, 0, 0, n}
}

// jaegerTraces builds the spans, one resource per service, with an event
// and a link on the first.
func jaegerTraces(base time.Time, specs []jaegerSpan) ptrace.Traces {
	td := ptrace.NewTraces()
	scopes := map[string]ptrace.ScopeSpans{}
	for i, sp := range specs {
		ss, ok := scopes[sp.service]
		if !ok {
			rs := td.ResourceSpans().AppendEmpty()
			rs.Resource().Attributes().PutStr("service.name", sp.service)
			rs.Resource().Attributes().PutStr("deployment.environment", "e2e")
			ss = rs.ScopeSpans().AppendEmpty()
			ss.Scope().SetName("e2e.jaeger")
			ss.Scope().SetVersion("1.0.0")
			scopes[sp.service] = ss
		}
		s := ss.Spans().AppendEmpty()
		s.SetTraceID(sp.trace)
		s.SetSpanID(jaegerSpanID(sp.id))
		s.SetParentSpanID(jaegerSpanID(sp.parent))
		s.SetName(sp.name)
		s.SetKind(sp.kind)
		start := base.Add(sp.offset)
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(sp.dur)))
		_ = s.Attributes().FromRaw(sp.attrs)
		if sp.errored {
			s.Status().SetCode(ptrace.StatusCodeError)
			s.Status().SetMessage("card declined")
		}
		if i == 0 {
			ev := s.Events().AppendEmpty()
			ev.SetName("cache miss")
			ev.SetTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Millisecond)))
			ev.Attributes().PutStr("cache.key", "cart:42")
			l := s.Links().AppendEmpty()
			l.SetTraceID(pcommon.TraceID{0x11})
			l.SetSpanID(pcommon.SpanID{0x22})
			l.Attributes().PutBool("sampled", true)
		}
	}
	return td
}

// jaegerFlat is the canonical form of spans that the comparison uses: one
// OTLP/JSON document per span with its resource and scope, attributes
// sorted, documents sorted. Grouping under resources and scopes is not part
// of what a trace means.
func jaegerFlat(t *testing.T, td ptrace.Traces) []string {
	t.Helper()
	var out []string
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
				sortAttributes(one)
				b, err := (&ptrace.JSONMarshaler{}).MarshalTraces(one)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, string(b))
			}
		}
	}
	sort.Strings(out)
	return out
}

// sortAttributes orders every attribute map of td by key.
func sortAttributes(td ptrace.Traces) {
	sortMap := func(m pcommon.Map) {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range m.All() {
				if !yield(k) {
					return
				}
			}
		})
		old := pcommon.NewMap()
		m.MoveTo(old)
		for _, k := range keys {
			v, _ := old.Get(k)
			v.CopyTo(m.PutEmpty(k))
		}
	}
	for _, rs := range td.ResourceSpans().All() {
		sortMap(rs.Resource().Attributes())
		for _, ss := range rs.ScopeSpans().All() {
			sortMap(ss.Scope().Attributes())
			for _, s := range ss.Spans().All() {
				sortMap(s.Attributes())
				for _, e := range s.Events().All() {
					sortMap(e.Attributes())
				}
				for _, l := range s.Links().All() {
					sortMap(l.Attributes())
				}
			}
		}
	}
}

// jaegerConfig is the configuration of a Jaeger that reads the remote
// storage at storageAddr and serves its query API on queryHTTP and
// queryGRPC; its pipeline does nothing (nop), its own metrics are off.
func jaegerConfig(storageAddr, queryHTTP, queryGRPC string) map[string]any {
	return map[string]any{
		"extensions": map[string]any{
			"jaeger_query": map[string]any{
				"storage": map[string]any{"traces": "postgres"},
				"http":    map[string]any{"endpoint": queryHTTP},
				"grpc":    map[string]any{"endpoint": queryGRPC},
			},
			"jaeger_storage": map[string]any{"backends": map[string]any{"postgres": map[string]any{
				"grpc": map[string]any{"endpoint": storageAddr, "tls": map[string]any{"insecure": true}},
			}}},
		},
		"receivers": map[string]any{"nop": map[string]any{}},
		"exporters": map[string]any{"nop": map[string]any{}},
		"service": map[string]any{
			"extensions": []string{"jaeger_storage", "jaeger_query"},
			"pipelines":  map[string]any{"traces": map[string]any{"receivers": []string{"nop"}, "exporters": []string{"nop"}}},
			"telemetry":  map[string]any{"metrics": map[string]any{"level": "none"}},
		},
	}
}

// getJSON fetches url from Jaeger's query API and decodes its JSON into v.
func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %s", u, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("GET %s: %v: %s", u, err, b)
	}
}

// v3Traces decodes an /api/v3/traces answer ({"result": TracesData}, one
// per line when streamed) into traces.
func v3Traces(t *testing.T, u string) ptrace.Traces {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %v %s: %s", u, err, resp.Status, b)
	}
	all := ptrace.NewTraces()
	dec := json.NewDecoder(strings.NewReader(string(b)))
	for dec.More() {
		var chunk struct {
			Result json.RawMessage `json:"result"`
		}
		if err := dec.Decode(&chunk); err != nil {
			t.Fatalf("GET %s: %v: %s", u, err, b)
		}
		td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(chunk.Result)
		if err != nil {
			t.Fatalf("GET %s: OTLP/JSON: %v: %s", u, err, chunk.Result)
		}
		td.ResourceSpans().MoveAndAppendTo(all.ResourceSpans())
	}
	return all
}

// TestJaegerReadsStoredTraces sends traces through the distribution into
// PostgreSQL, runs the real Jaeger (its jaeger_storage extension with a grpc
// backend pointed at the distribution's jaeger_remote_storage extension)
// and checks what Jaeger's HTTP API returns against what was sent: a trace
// by id, the search by service (v3) and by service and tag (the UI's API),
// the services, the operations and the dependencies.
func TestJaegerReadsStoredTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs Jaeger")
	}
	jaeger := jaegerBinary(t)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ep := newEndpoints(t)
	free := ports.FreeT(t, 3)
	storageAddr := "127.0.0.1:" + strconv.Itoa(free[0])
	queryHTTP := "127.0.0.1:" + strconv.Itoa(free[1])
	queryGRPC := "127.0.0.1:" + strconv.Itoa(free[2])

	cfg := collectorConfig(ep, map[string]any{"postgrescopy": pgExporter(pgtest.URL(), schema)}, "info")
	cfg["extensions"].(map[string]any)["jaeger_remote_storage"] = map[string]any{
		"endpoint": pgtest.URL(),
		"schema":   schema,
		"grpc":     map[string]any{"endpoint": storageAddr},
	}
	svc := cfg["service"].(map[string]any)
	svc["extensions"] = append(svc["extensions"].([]string), "jaeger_remote_storage")
	c := startCollector(t, ep, cfg)

	now := time.Now().UTC().Truncate(time.Microsecond)
	base := now.Add(-5 * time.Minute)
	traceA := pcommon.TraceID{0x7a, 0xe9, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0a}
	traceB := pcommon.TraceID{0x7a, 0xe9, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x0b}
	long := strings.Repeat("SELECT 1; ", 40) // stored apart from the jsonb (a long attribute)
	specs := []jaegerSpan{
		{service: "frontend", name: "GET /checkout", kind: ptrace.SpanKindServer, trace: traceA, id: 1, dur: 120 * time.Millisecond,
			attrs: map[string]any{"http.route": "/checkout", "http.status_code": 200}},
		{service: "frontend", name: "call payments", kind: ptrace.SpanKindClient, trace: traceA, id: 2, parent: 1, offset: 5 * time.Millisecond, dur: 100 * time.Millisecond},
		{service: "payments", name: "charge", kind: ptrace.SpanKindServer, trace: traceA, id: 3, parent: 2, offset: 7 * time.Millisecond, dur: 90 * time.Millisecond,
			attrs: map[string]any{"payment.amount": 12.5}},
		{service: "ledger-db", name: "INSERT ledger", kind: ptrace.SpanKindClient, trace: traceA, id: 4, parent: 3, offset: 10 * time.Millisecond, dur: 30 * time.Millisecond,
			attrs: map[string]any{"db.statement": long}},
		{service: "frontend", name: "GET /checkout", kind: ptrace.SpanKindServer, trace: traceB, id: 1, offset: time.Minute, dur: 40 * time.Millisecond,
			attrs: map[string]any{"http.route": "/checkout", "http.status_code": 500}, errored: true},
		{service: "payments", name: "charge", kind: ptrace.SpanKindServer, trace: traceB, id: 2, parent: 1, offset: time.Minute + 2*time.Millisecond, dur: 30 * time.Millisecond,
			errored: true},
	}
	sent := jaegerTraces(base, specs)
	sendTraces(t, ep.grpc, [][]ptrace.Traces{{sent}})
	if t.Failed() {
		t.FailNow()
	}
	waitRows(t, c, pool, schema, map[string]int64{"spans": int64(len(specs))}, 30*time.Second)

	j := startBinary(t, jaeger, endpoints{}, writeConfig(t, t.TempDir(), jaegerConfig(storageAddr, queryHTTP, queryGRPC)))
	waitPort(t, j, queryHTTP, 60*time.Second)
	api := "http://" + queryHTTP

	want := func(id pcommon.TraceID) ptrace.Traces {
		out := ptrace.NewTraces()
		sent.CopyTo(out)
		out.ResourceSpans().RemoveIf(func(rs ptrace.ResourceSpans) bool {
			rs.ScopeSpans().RemoveIf(func(ss ptrace.ScopeSpans) bool {
				ss.Spans().RemoveIf(func(s ptrace.Span) bool { return s.TraceID() != id })
				return ss.Spans().Len() == 0
			})
			return rs.ScopeSpans().Len() == 0
		})
		return out
	}
	compare := func(what string, want, got []string) {
		t.Helper()
		if !slices.Equal(want, got) {
			t.Errorf("%s: Jaeger returned\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}

	t.Run("trace by id", func(t *testing.T) {
		got := v3Traces(t, api+"/api/v3/traces/"+hex.EncodeToString(traceA[:])+"?raw_traces=true")
		compare("trace A", jaegerFlat(t, want(traceA)), jaegerFlat(t, got))
	})

	t.Run("search by service", func(t *testing.T) {
		q := url.Values{
			"query.service_name":   {"payments"},
			"query.start_time_min": {now.Add(-time.Hour).Format(time.RFC3339Nano)},
			"query.start_time_max": {now.Format(time.RFC3339Nano)},
			"query.num_traces":     {"20"},
			"query.raw_traces":     {"true"},
		}
		got := v3Traces(t, api+"/api/v3/traces?"+q.Encode())
		both := want(traceA)
		want(traceB).ResourceSpans().MoveAndAppendTo(both.ResourceSpans())
		compare("traces of payments, whole", jaegerFlat(t, both), jaegerFlat(t, got))

		q.Set("query.operation_name", "charge")
		q.Set("query.duration_min", "50ms")
		got = v3Traces(t, api+"/api/v3/traces?"+q.Encode())
		compare("payments charge over 50ms", jaegerFlat(t, want(traceA)), jaegerFlat(t, got))
	})

	t.Run("search by service and tag", func(t *testing.T) {
		// The UI's API (and Grafana's Jaeger data source) searches by tags.
		var res struct {
			Data []struct {
				TraceID string `json:"traceID"`
				Spans   []struct {
					OperationName string `json:"operationName"`
				} `json:"spans"`
			} `json:"data"`
		}
		q := url.Values{
			"service": {"frontend"},
			"tags":    {`{"http.status_code":"500"}`},
			"start":   {strconv.FormatInt(now.Add(-time.Hour).UnixMicro(), 10)},
			"end":     {strconv.FormatInt(now.UnixMicro(), 10)},
			"limit":   {"20"},
		}
		getJSON(t, api+"/api/traces?"+q.Encode(), &res)
		if len(res.Data) != 1 || res.Data[0].TraceID != hex.EncodeToString(traceB[:]) || len(res.Data[0].Spans) != 2 {
			t.Errorf("frontend with http.status_code=500: %+v, want trace B (%x) with its 2 spans", res.Data, traceB)
		}
		q.Set("tags", `{"error":"true"}`)
		q.Set("service", "payments")
		getJSON(t, api+"/api/traces?"+q.Encode(), &res)
		if len(res.Data) != 1 || res.Data[0].TraceID != hex.EncodeToString(traceB[:]) {
			t.Errorf("payments with error=true: %+v, want trace B", res.Data)
		}
		q.Set("tags", `{"db.statement":"`+long+`"}`)
		q.Set("service", "ledger-db")
		getJSON(t, api+"/api/traces?"+q.Encode(), &res)
		if len(res.Data) != 1 || res.Data[0].TraceID != hex.EncodeToString(traceA[:]) {
			t.Errorf("ledger-db by its long db.statement: %+v, want trace A", res.Data)
		}
	})

	t.Run("services", func(t *testing.T) {
		var res struct {
			Services []string `json:"services"`
		}
		getJSON(t, api+"/api/v3/services", &res)
		if want := []string{"frontend", "ledger-db", "payments"}; !slices.Equal(res.Services, want) {
			t.Errorf("services: %v, want %v", res.Services, want)
		}
	})

	t.Run("operations", func(t *testing.T) {
		var res struct {
			Operations []struct {
				Name     string `json:"name"`
				SpanKind string `json:"spanKind"`
			} `json:"operations"`
		}
		getJSON(t, api+"/api/v3/operations?service=frontend", &res)
		got := fmt.Sprint(res.Operations)
		if want := "[{GET /checkout server} {call payments client}]"; got != want {
			t.Errorf("operations of frontend: %s, want %s", got, want)
		}
		getJSON(t, api+"/api/v3/operations?service=frontend&span_kind=client", &res)
		got = fmt.Sprint(res.Operations)
		if want := "[{call payments client}]"; got != want {
			t.Errorf("client operations of frontend: %s, want %s", got, want)
		}
	})

	t.Run("dependencies", func(t *testing.T) {
		var res struct {
			Data []struct {
				Parent    string `json:"parent"`
				Child     string `json:"child"`
				CallCount int    `json:"callCount"`
			} `json:"data"`
		}
		q := url.Values{
			"endTs":    {strconv.FormatInt(now.UnixMilli(), 10)},
			"lookback": {strconv.FormatInt(time.Hour.Milliseconds(), 10)},
		}
		getJSON(t, api+"/api/dependencies?"+q.Encode(), &res)
		sort.Slice(res.Data, func(i, j int) bool {
			return res.Data[i].Parent+res.Data[i].Child < res.Data[j].Parent+res.Data[j].Child
		})
		got := fmt.Sprint(res.Data)
		if want := "[{frontend payments 2} {payments ledger-db 1}]"; got != want {
			t.Errorf("dependencies: %s, want %s", got, want)
		}
	})

	j.stop(t)
	c.stop(t)
}
