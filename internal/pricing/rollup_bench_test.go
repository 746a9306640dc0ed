package pricing

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// The 30-day AI bill: cost per team and model per day.
const (
	benchRollupQuery = `SELECT date_trunc('day', hour, 'UTC') AS day, dims ->> 'team' AS team, model,
  sum(calls), sum(unpriced_calls), sum(input_tokens), sum(output_tokens), round(sum(cost), 2)
FROM S.ai_spend WHERE hour > now() - interval '30 days' AND hour <= now()
GROUP BY 1, 2, 3`
	benchRawQuery = `SELECT date_trunc('day', start_time, 'UTC') AS day, dims ->> 'team' AS team, model,
  count(*), count(*) FILTER (WHERE cost_source = 'unpriced'), sum(input_tokens), sum(output_tokens), round(sum(cost), 2)
FROM S.gen_ai_calls WHERE start_time > now() - interval '30 days' AND start_time <= now()
GROUP BY 1, 2, 3`
)

// BenchmarkAISpend30Days measures the 30-day bill on 1,000,000 GenAI spans
// (10 teams, 8 models, one unpriced), from the rollup (through the ai_spend
// view, so the open hour is read raw) and from the raw spans. It is not part
// of `make test`: run
//
//	go test -run '^$' -bench AISpend30Days -v ./internal/pricing/
//
// Building the data takes about a minute; the setup's timings are logged.
func BenchmarkAISpend30Days(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	name := pgtest.Schema(b, pool)
	q := func(sql string) string {
		return replaceSchema(sql, pgx.Identifier{name}.Sanitize())
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn.Conn(), name); err != nil {
		b.Fatal(err)
	}
	conn.Release()
	start := time.Now()
	setup := []string{
		// The genai preset's columns, as the exporter adds them.
		`ALTER TABLE S.spans ADD COLUMN gen_ai_provider_name text, ADD COLUMN gen_ai_operation_name text,
  ADD COLUMN gen_ai_request_model text, ADD COLUMN gen_ai_response_model text, ADD COLUMN gen_ai_input_tokens bigint,
  ADD COLUMN gen_ai_output_tokens bigint, ADD COLUMN gen_ai_cost_usd double precision,
  ADD COLUMN gen_ai_cache_read_input_tokens bigint, ADD COLUMN gen_ai_cache_creation_input_tokens bigint,
  ADD COLUMN gen_ai_reasoning_output_tokens bigint, ADD COLUMN gen_ai_conversation_id text, ADD COLUMN gen_ai_agent_name text`,
		`SELECT S.postgrescopy_ai_configure('[{"name": "team", "from": [{"scope": "span", "key": "team"}]}]', '6 hours')`,
		// Daily partitions over the 31 days.
		`DO $$ DECLARE d timestamptz; BEGIN
  FOR i IN -31..1 LOOP
    d := date_trunc('day', now(), 'UTC') + i * interval '1 day';
    EXECUTE format('CREATE TABLE IF NOT EXISTS S.%I PARTITION OF S.spans_rows FOR VALUES FROM (%L) TO (%L)',
                   'spans_p' || to_char(d AT TIME ZONE 'UTC', 'YYYYMMDD'), d, d + interval '1 day');
  END LOOP; END $$`,
		`INSERT INTO S.model_prices (provider, model, input_per_mtok, output_per_mtok, cache_read_per_mtok)
SELECT 'openai', 'model-' || m, 1 + m, 4 + 2 * m, 0.5 FROM generate_series(0, 6) m`,
		`INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags, span_name, span_kind, status_code,
  span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count, resource_attributes,
  scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count, service_name, trace_id, span_id,
  gen_ai_provider_name, gen_ai_operation_name, gen_ai_request_model, gen_ai_response_model, gen_ai_input_tokens,
  gen_ai_output_tokens, gen_ai_cache_read_input_tokens, gen_ai_conversation_id)
SELECT t, 0, t + interval '1 second', 1000000000, 0, 'chat model-' || (i % 8), 'Client', CASE WHEN i % 50 = 0 THEN 'Error' ELSE 'Ok' END,
  jsonb_build_object('team', 'team-' || (i % 10), 'gen_ai.operation.name', 'chat', 'gen_ai.provider.name', 'openai',
    'gen_ai.request.model', 'model-' || (i % 8), 'gen_ai.response.model', 'model-' || (i % 8),
    'gen_ai.usage.input_tokens', 1000 + i % 5000, 'gen_ai.usage.output_tokens', 100 + i % 700,
    'gen_ai.usage.cache_read.input_tokens', (i % 3) * 100, 'gen_ai.conversation.id', 'conv-' || (i % 20000)),
  0, 0, 0, '{"service.name": "assistant"}', '{}', 0, 0, 'assistant', md5(i::text)::uuid, i,
  'openai', 'chat', 'model-' || (i % 8), 'model-' || (i % 8), 1000 + i % 5000, 100 + i % 700, (i % 3) * 100, 'conv-' || (i % 20000)
FROM generate_series(1, 1000000) i, LATERAL (SELECT now() - (i * interval '30 days' / 1000000)) AS x(t)`,
		`ANALYZE S.spans`,
	}
	for _, s := range setup {
		if _, err := pool.Exec(ctx, q(s)); err != nil {
			b.Fatalf("setup: %v\n%s", err, s)
		}
	}
	b.Logf("1,000,000 spans written in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	// The first maintenance rolls up every closed hour.
	if _, err := schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: 24 * time.Hour, Premake: 1}); err != nil {
		b.Fatal(err)
	}
	b.Logf("first rollup (every closed hour of 30 days) in %s", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if _, err := schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: 24 * time.Hour, Premake: 1}); err != nil {
		b.Fatal(err)
	}
	b.Logf("a later maintenance run (6-hour late window) in %s", time.Since(start).Round(time.Millisecond))
	var buckets int64
	if err := pool.QueryRow(ctx, q(`SELECT count(*) FROM S.ai_spend_hourly`)).Scan(&buckets); err != nil {
		b.Fatal(err)
	}
	b.Logf("rollup rows: %d", buckets)

	run := func(sql string) time.Duration {
		t0 := time.Now()
		rows, err := pool.Query(ctx, q(sql))
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		if n < 300 {
			b.Fatalf("%d groups, want a row per day, team and model", n)
		}
		return time.Since(t0)
	}
	// One pass (it takes longer than the default benchtime): the rollup
	// query 30 times, the raw one 3 times, each after one warm-up run.
	for b.Loop() {
		for _, c := range []struct {
			name string
			sql  string
			runs int
		}{{"rollup", benchRollupQuery, 30}, {"raw", benchRawQuery, 3}} {
			run(c.sql)
			times := make([]time.Duration, c.runs)
			for i := range times {
				times[i] = run(c.sql)
			}
			sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(times[len(times)/2]), c.name+"-p50-ms")
			b.ReportMetric(ms(times[len(times)-1-len(times)/20]), c.name+"-p95-ms")
			b.Logf("%s: p50 %.1f ms, max %.1f ms over %d runs", c.name, ms(times[len(times)/2]), ms(times[len(times)-1]), c.runs)
		}
	}
}

func replaceSchema(sql, quoted string) string {
	out := make([]byte, 0, len(sql))
	for i := 0; i < len(sql); i++ {
		if sql[i] == 'S' && i+1 < len(sql) && sql[i+1] == '.' && (i == 0 || !isIdent(sql[i-1])) {
			out = append(out, quoted...)
			continue
		}
		out = append(out, sql[i])
	}
	return string(out)
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
