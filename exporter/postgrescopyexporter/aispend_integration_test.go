package postgrescopyexporter

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// The price file of the AI spend tests: gpt-4o changes price at noon of the
// test day, claude-sonnet-4* is a pattern with cache rates, o3-mini has no
// reasoning price (reasoning tokens then cost the output price).
const testPrices = `prices:
  - provider: openai
    model: gpt-4o
    input: 2.50
    output: 10.00
    cache_read: 1.25
    valid_to: {{noon}}
  - provider: openai
    model: gpt-4o
    input: 2.00
    output: 8.00
    cache_read: 1.00
    valid_from: {{noon}}
  - provider: anthropic
    model: claude-sonnet-4*
    input: 3.00
    output: 15.00
    cache_read: 0.30
    cache_write: 3.75
  - model: o3-mini
    input: 1.10
    output: 4.40
`

// startTracesExporter starts a traces exporter of cfg and returns it.
func startTracesExporter(t *testing.T, cfg *Config) exporter.Traces {
	t.Helper()
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	return te
}

// otlpInto is an OTLP/HTTP endpoint that hands what it receives to te, so
// that the OpenTelemetry Go SDK's own OTLP exporter produces the data.
func otlpInto(t *testing.T, te exporter.Traces) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req := ptraceotlp.NewExportRequest()
		if err := req.UnmarshalProto(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if err := te.ConsumeTraces(r.Context(), req.Traces()); err != nil {
			t.Errorf("consume: %v", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, _ := ptraceotlp.NewExportResponse().MarshalProto()
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(resp)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/traces"
}

// sdkTracer is a tracer of the SDK for one team's service, exporting
// synchronously (each span on End) through OTLP/HTTP to endpoint.
func sdkTracer(t *testing.T, endpoint, service, team string) trace.Tracer {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(endpoint),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	require.NoError(t, err)
	res := resource.NewSchemaless(semconv.ServiceName(service), attribute.String("team", team))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	t.Cleanup(func() { require.NoError(t, tp.Shutdown(context.Background())) })
	return tp.Tracer("genai-test")
}

// call records one GenAI call as the conventions describe it: a CLIENT span
// named "{operation} {model}" with the usage attributes.
func call(tr trace.Tracer, kind trace.SpanKind, at time.Time, attrs ...attribute.KeyValue) {
	_, span := tr.Start(context.Background(), "chat", trace.WithSpanKind(kind), trace.WithTimestamp(at),
		trace.WithAttributes(append([]attribute.KeyValue{semconv.GenAIOperationNameChat}, attrs...)...))
	span.End(trace.WithTimestamp(at.Add(800 * time.Millisecond)))
}

func aiSpendConfig(t *testing.T, noon time.Time) (*Config, string) {
	cfg, schemaName := testConfig(t)
	file := filepath.Join(t.TempDir(), "prices.yaml")
	prices := []byte(strings.ReplaceAll(testPrices, "{{noon}}", noon.Format(time.RFC3339)))
	require.NoError(t, os.WriteFile(file, prices, 0o600))
	cfg.Pricing.File = file
	cfg.CostAttribution.Dimensions = []DimensionConfig{{Name: "team", From: []string{"span:team", "resource:team"}}}
	// The tests write yesterday's spans after the start's maintenance has
	// rolled up to now: the late window must reach back over them.
	cfg.CostAttribution.LateWindow = 48 * time.Hour
	require.NoError(t, cfg.Validate())
	require.NoError(t, confmap.Validate(cfg))
	return cfg, schemaName
}

func maintainNow(t *testing.T, pool *pgxpool.Pool, schemaName string, retention time.Duration) []schema.Action {
	t.Helper()
	actions, err := schema.Maintain(context.Background(), pool, schemaName,
		schema.Partitioning{Interval: 24 * time.Hour, Premake: 1, Retention: retention})
	require.NoError(t, err)
	return actions
}

// recordSDKCalls makes the GenAI calls of TestAISpendFromSDKSpans on day,
// through the SDK's OTLP exporter to endpoint.
func recordSDKCalls(t *testing.T, endpoint string, day time.Time) {
	a := sdkTracer(t, endpoint, "assistant", "a")
	b := sdkTracer(t, endpoint, "search", "b")
	openai, anthropic := semconv.GenAIProviderNameOpenAI, semconv.GenAIProviderNameAnthropic

	// Team a. gpt-4o at 09:00, before the price change:
	//   (400000-100000)×2.50 + 100000×1.25 + 50000×10.00 = 1.375 USD
	call(a, trace.SpanKindClient, day.Add(9*time.Hour), openai, semconv.GenAIRequestModel("gpt-4o"), semconv.GenAIResponseModel("gpt-4o"),
		semconv.GenAIUsageInputTokens(400000), semconv.GenAIUsageCacheReadInputTokens(100000), semconv.GenAIUsageOutputTokens(50000),
		semconv.GenAIConversationID("conv-1"))
	// The same call at 15:00, after: 300000×2.00 + 100000×1.00 + 50000×8.00 = 1.100 USD
	call(a, trace.SpanKindClient, day.Add(15*time.Hour), openai, semconv.GenAIRequestModel("gpt-4o"), semconv.GenAIResponseModel("gpt-4o"),
		semconv.GenAIUsageInputTokens(400000), semconv.GenAIUsageCacheReadInputTokens(100000), semconv.GenAIUsageOutputTokens(50000),
		semconv.GenAIConversationID("conv-1"))
	// claude-sonnet-4-5 by pattern, cache read and write:
	//   (200000-80000-20000)×3.00 + 80000×0.30 + 20000×3.75 + 10000×15.00 = 0.549 USD
	call(a, trace.SpanKindClient, day.Add(10*time.Hour), anthropic, semconv.GenAIRequestModel("claude-sonnet-4-5"), semconv.GenAIResponseModel("claude-sonnet-4-5-20250929"),
		semconv.GenAIUsageInputTokens(200000), semconv.GenAIUsageCacheReadInputTokens(80000),
		semconv.GenAIUsageCacheCreationInputTokens(20000), semconv.GenAIUsageOutputTokens(10000), semconv.GenAIAgentName("planner"))
	// An LLM proxy's SERVER span repeating a call's totals: not a call.
	call(a, trace.SpanKindServer, day.Add(9*time.Hour), openai, semconv.GenAIResponseModel("gpt-4o"),
		semconv.GenAIUsageInputTokens(400000), semconv.GenAIUsageOutputTokens(50000))

	// Team b. A provider-reported cost wins over the catalog (0.0035 here).
	call(b, trace.SpanKindClient, day.Add(11*time.Hour), openai, semconv.GenAIResponseModel("gpt-4o"),
		semconv.GenAIUsageInputTokens(1000), semconv.GenAIUsageOutputTokens(100), attribute.Float64("gen_ai.usage.cost", 0.5))
	// OpenInference's keys, after noon: 100000×2.00 + 10000×8.00 = 0.280 USD
	call(b, trace.SpanKindInternal, day.Add(16*time.Hour), attribute.String("llm.provider", "openai"), attribute.String("llm.model_name", "gpt-4o"),
		attribute.Int("llm.token_count.prompt", 100000), attribute.Int("llm.token_count.completion", 10000))
	// Reasoning tokens without a reasoning price cost the output price:
	//   10000×1.10 + (20000-15000)×4.40 + 15000×4.40 = 0.099 USD
	call(b, trace.SpanKindClient, day.Add(13*time.Hour), openai, semconv.GenAIResponseModel("o3-mini"),
		semconv.GenAIUsageInputTokens(10000), semconv.GenAIUsageOutputTokens(20000), attribute.Int("gen_ai.usage.reasoning.output_tokens", 15000))
	// No price, no reported cost: unpriced, twice.
	for _, h := range []int{13, 14} {
		call(b, trace.SpanKindClient, day.Add(time.Duration(h)*time.Hour), openai, semconv.GenAIResponseModel("mystery-1"),
			semconv.GenAIUsageInputTokens(5000), semconv.GenAIUsageOutputTokens(500))
	}

}

// TestAISpendFromSDKSpans: spans made by the OpenTelemetry Go SDK with the
// GenAI convention attributes only (tokens, models; no cost), plus a few with
// a provider-reported cost, priced from a price file: per team, model and
// day the cost is the hand-computed sum exactly, unpriced calls are counted
// apart, cached tokens cost the cache rate and are not counted again at the
// input rate, and the noon price change prices the morning and the
// afternoon differently.
func TestAISpendFromSDKSpans(t *testing.T) {
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1) // yesterday: every hour closed
	noon := day.Add(12 * time.Hour)
	cfg, schemaName := aiSpendConfig(t, noon)
	te := startTracesExporter(t, cfg)
	endpoint := otlpInto(t, te)
	recordSDKCalls(t, endpoint, day)

	pool := pgtest.Pool(t)
	ctx := context.Background()
	q := func(sql string) string {
		return strings.ReplaceAll(sql, "S.", pgx.Identifier{schemaName}.Sanitize()+".")
	}

	// Each call's price: the noon change splits the two identical calls.
	var morning, afternoon, mSource string
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT trim_scale(cost)::text, cost_source FROM S.gen_ai_calls
WHERE model = 'gpt-4o' AND start_time = $1`), day.Add(9*time.Hour)).Scan(&morning, &mSource))
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT trim_scale(cost)::text FROM S.gen_ai_calls
WHERE model = 'gpt-4o' AND start_time = $1`), day.Add(15*time.Hour)).Scan(&afternoon))
	assert.Equal(t, "1.375", morning, "09:00 at the morning prices")
	assert.Equal(t, "catalog", mSource)
	assert.Equal(t, "1.1", afternoon, "15:00 at the prices valid from noon")

	// The rollup, by maintenance, answers per team, model and day.
	maintainNow(t, pool, schemaName, 0)
	type group struct {
		cost                               string
		calls, reported, catalog, unpriced int64
		input, uncached, cacheRead, output int64
	}
	read := func(table string) map[[2]string]group {
		rows, err := pool.Query(ctx, q(`SELECT dims ->> 'team', model, trim_scale(sum(cost))::text, sum(calls)::bigint,
  sum(reported_calls)::bigint, sum(catalog_calls)::bigint, sum(unpriced_calls)::bigint, sum(input_tokens)::bigint,
  sum(uncached_input_tokens)::bigint, sum(cache_read_tokens)::bigint, sum(output_tokens)::bigint
FROM S.`+table+` WHERE hour >= $1 AND hour < $2 GROUP BY 1, 2`), day, day.Add(24*time.Hour))
		require.NoError(t, err)
		out := map[[2]string]group{}
		for rows.Next() {
			var team, model string
			var g group
			require.NoError(t, rows.Scan(&team, &model, &g.cost, &g.calls, &g.reported, &g.catalog, &g.unpriced,
				&g.input, &g.uncached, &g.cacheRead, &g.output))
			out[[2]string{team, model}] = g
		}
		require.NoError(t, rows.Err())
		return out
	}
	want := map[[2]string]group{
		{"a", "gpt-4o"}:                     {cost: "2.475", calls: 2, catalog: 2, input: 800000, uncached: 600000, cacheRead: 200000, output: 100000},
		{"a", "claude-sonnet-4-5-20250929"}: {cost: "0.549", calls: 1, catalog: 1, input: 200000, uncached: 100000, cacheRead: 80000, output: 10000},
		{"b", "gpt-4o"}:                     {cost: "0.78", calls: 2, reported: 1, catalog: 1, input: 101000, uncached: 101000, output: 10100},
		{"b", "o3-mini"}:                    {cost: "0.099", calls: 1, catalog: 1, input: 10000, uncached: 10000, output: 20000},
		{"b", "mystery-1"}:                  {cost: "0", calls: 2, unpriced: 2, input: 10000, uncached: 10000, output: 1000},
	}
	assert.Equal(t, want, read("ai_spend_hourly"), "the rollup")
	assert.Equal(t, want, read("ai_spend"), "the rollup through the ai_spend view")

	var total string
	require.NoError(t, pool.QueryRow(ctx, q(`SELECT trim_scale(sum(cost))::text FROM S.ai_spend WHERE hour >= $1 AND hour < $2`),
		day, day.Add(24*time.Hour)).Scan(&total))
	assert.Equal(t, "3.903", total, "2.475 + 0.549 + 0.78 + 0.099: 3.90 USD to the cent")
}

// genaiCall is one GenAI client span in pdata.
type genaiCall struct {
	at          time.Time
	team, model string
	in, cached  int64
	out         int64
}

func genaiTraces(calls ...genaiCall) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "assistant")
	ss := rs.ScopeSpans().AppendEmpty()
	for i, c := range calls {
		s := ss.Spans().AppendEmpty()
		s.SetName("chat " + c.model)
		s.SetKind(ptrace.SpanKindClient)
		s.SetTraceID(pcommon.TraceID{9, byte(i >> 8), byte(i), byte(c.at.Unix())})
		s.SetSpanID(pcommon.SpanID{9, byte(i >> 8), byte(i)})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(c.at))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(c.at.Add(time.Second)))
		a := s.Attributes()
		a.PutStr("gen_ai.operation.name", "chat")
		a.PutStr("gen_ai.provider.name", "openai")
		a.PutStr("gen_ai.response.model", c.model)
		a.PutStr("team", c.team)
		a.PutInt("gen_ai.usage.input_tokens", c.in)
		a.PutInt("gen_ai.usage.cache_read.input_tokens", c.cached)
		a.PutInt("gen_ai.usage.output_tokens", c.out)
	}
	return td
}

// spendAnswer is "cost per team and model per day": calls, tokens, cost.
type spendAnswer map[[3]string][4]string

// rawAnswer asks the raw spans (through gen_ai_calls) for the hours before
// until; rollupAnswer asks the rollup table; viewAnswer the ai_spend view.
func rawAnswer(t *testing.T, pool *pgxpool.Pool, schemaName string, until time.Time) spendAnswer {
	return answer(t, pool, `SELECT date_trunc('day', start_time, 'UTC')::date::text, dims ->> 'team', model,
  count(*)::text, sum(input_tokens)::text, sum(output_tokens)::text, trim_scale(sum(cost))::text
FROM `+pgx.Identifier{schemaName, "gen_ai_calls"}.Sanitize()+` WHERE start_time < $1 GROUP BY 1, 2, 3`, until)
}

// spendGroups counts the (UTC day, team, model) groups of the calls from
// since until until.
func spendGroups(calls []genaiCall, until, since time.Time) int {
	groups := map[[3]string]bool{}
	for _, c := range calls {
		if c.at.Before(until) && !c.at.Before(since) {
			groups[[3]string{c.at.UTC().Format(time.DateOnly), c.team, c.model}] = true
		}
	}
	return len(groups)
}

func rollupAnswer(t *testing.T, pool *pgxpool.Pool, schemaName, table string, until time.Time) spendAnswer {
	return answer(t, pool, `SELECT date_trunc('day', hour, 'UTC')::date::text, dims ->> 'team', model,
  sum(calls)::text, sum(input_tokens)::text, sum(output_tokens)::text, trim_scale(sum(cost))::text
FROM `+pgx.Identifier{schemaName, table}.Sanitize()+` WHERE hour < $1 GROUP BY 1, 2, 3`, until)
}

func answer(t *testing.T, pool *pgxpool.Pool, sql string, until time.Time) spendAnswer {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql, until)
	require.NoError(t, err)
	out := spendAnswer{}
	for rows.Next() {
		var k [3]string
		var v [4]string
		require.NoError(t, rows.Scan(&k[0], &k[1], &k[2], &v[0], &v[1], &v[2], &v[3]))
		out[k] = v
	}
	require.NoError(t, rows.Err())
	return out
}

// TestAISpendRollupEqualsRaw: the rollup kept by postgrescopy_maintain gives
// the raw spans' answer, after late spans arrive for hours it already rolled
// up, and still after retention has dropped the raw partitions; the open hour
// is read live.
func TestAISpendRollupEqualsRaw(t *testing.T) {
	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	old := today.AddDate(0, 0, -3)
	cfg, schemaName := aiSpendConfig(t, today.Add(12*time.Hour))
	// A late window reaching past the retention: the maintenance must still
	// not recompute the hours retention emptied.
	cfg.CostAttribution.LateWindow = 120 * time.Hour
	te := startTracesExporter(t, cfg)
	pool := pgtest.Pool(t)
	ctx := context.Background()
	s := pgx.Identifier{schemaName}.Sanitize()
	// A partition for three days ago, which retention will drop.
	_, err := pool.Exec(ctx, `CREATE TABLE `+s+`.spans_old PARTITION OF `+s+`.spans_rows FOR VALUES FROM ('`+
		old.Format(time.RFC3339)+`') TO ('`+old.AddDate(0, 0, 1).Format(time.RFC3339)+`')`)
	require.NoError(t, err)

	var calls []genaiCall
	for i, at := range []time.Time{old.Add(10 * time.Hour), old.Add(11 * time.Hour), old.Add(23 * time.Hour),
		today.Add(-15 * time.Hour), today.Add(-14*time.Hour + 30*time.Minute), now.Add(-3 * time.Hour), now.Add(-2 * time.Hour)} {
		for j, team := range []string{"a", "b"} {
			calls = append(calls, genaiCall{at: at, team: team, model: []string{"gpt-4o", "o3-mini"}[(i+j)%2],
				in: int64(1000 * (i + 1)), cached: int64(100 * j), out: int64(10 * (i + j + 1))})
		}
	}
	require.NoError(t, te.ConsumeTraces(ctx, genaiTraces(calls...)))

	// Spans older than the late window are rolled up by hand (a replay);
	// the maintenance does the rest.
	_, err = pool.Exec(ctx, `SELECT `+s+`.postgrescopy_ai_rollup($1, $2)`, old, old.AddDate(0, 0, 1))
	require.NoError(t, err)
	maintainNow(t, pool, schemaName, 0)
	hour := now.Truncate(time.Hour)
	raw := rawAnswer(t, pool, schemaName, hour)
	// 3 days × 2 teams × 2 models, or 2 days in the first hours of a UTC
	// day, when the calls of a few hours ago fall on the day before.
	require.Len(t, raw, spendGroups(calls, hour, time.Time{}), "days × 2 teams × 2 models")
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend_hourly", hour))

	// Late spans: an hour of yesterday and an hour of today, both rolled up.
	lateCalls := []genaiCall{{at: today.Add(-14 * time.Hour), team: "a", model: "gpt-4o", in: 7777, out: 77},
		{at: now.Add(-2 * time.Hour), team: "c", model: "gpt-4o", in: 5555, cached: 5000, out: 55}}
	require.NoError(t, te.ConsumeTraces(ctx, genaiTraces(lateCalls...)))
	raw = rawAnswer(t, pool, schemaName, hour)
	require.NotEqual(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend_hourly", hour), "the late spans are not rolled up yet")
	maintainNow(t, pool, schemaName, 0)
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend_hourly", hour), "after late spans")
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend", hour), "the ai_spend view")

	// The open hour is not rolled up; ai_spend reads it live.
	require.NoError(t, te.ConsumeTraces(ctx, genaiTraces(genaiCall{at: now, team: "a", model: "gpt-4o", in: 10, out: 1})))
	maintainNow(t, pool, schemaName, 0)
	far := now.Add(time.Hour)
	live := rawAnswer(t, pool, schemaName, far)
	assert.Equal(t, live, rollupAnswer(t, pool, schemaName, "ai_spend", far), "ai_spend includes the open hour")
	assert.NotEqual(t, live, rollupAnswer(t, pool, schemaName, "ai_spend_hourly", far), "the rollup holds closed hours only")

	// Retention drops the partition of three days ago; the rollup keeps its
	// answer.
	actions := maintainNow(t, pool, schemaName, 48*time.Hour)
	dropped := false
	for _, a := range actions {
		dropped = dropped || (a.Action == "dropped" && a.Partition == "spans_old")
	}
	require.True(t, dropped, "retention dropped the old partition: %v", actions)
	maintainNow(t, pool, schemaName, 48*time.Hour) // and runs again
	after := rawAnswer(t, pool, schemaName, hour)
	require.Len(t, after, spendGroups(append(calls, lateCalls...), hour, old.AddDate(0, 0, 1)), "the raw spans lost the old day (4 groups)")
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend_hourly", hour), "the rollup after the drop")
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend", hour), "ai_spend after the drop")
}
