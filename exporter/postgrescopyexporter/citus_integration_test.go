package postgrescopyexporter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap/zapcore"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// citusConfig is a direct-write config with distribution: citus into a fresh
// schema on the coordinator of pgtest.CitusURL (skipped without one).
func citusConfig(t *testing.T) (*Config, string, *pgxpool.Pool) {
	return citusConfigAt(t, pgtest.CitusURL(t))
}

// citusConfigAt is citusConfig on the coordinator at url.
func citusConfigAt(t *testing.T, url string) (*Config, string, *pgxpool.Pool) {
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "pgct_citus_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	cfg := defaultConfig()
	cfg.Endpoint = configopaque.String(url)
	cfg.Schema = name
	cfg.Distribution = distributionCitus
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	cfg.RetryConfig.Enabled = false
	return cfg, name, pool
}

func count(t *testing.T, pool *pgxpool.Pool, sql string) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql).Scan(&n))
	return n
}

// poisonSpans is n spans of n/5 traces; those at bad are named "poison".
func poisonSpans(n int, bad func(i int) bool) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "citus")
	ss := rs.ScopeSpans().AppendEmpty()
	now := time.Now()
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetName("op")
		if bad(i) {
			s.SetName("poison")
		}
		s.SetTraceID(pcommon.TraceID{7, byte(i / 5 >> 8), byte(i / 5), 15: 1})
		s.SetSpanID(pcommon.SpanID{2, byte(i >> 8), byte(i), 7: 1})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		s.Attributes().PutInt("i", int64(i))
	}
	return td
}

// every9th marks 55 of 500 spans.
func every9th(i int) bool { return i%9 == 4 && i < 495 }

// shardCounts is the row count of every shard of table.
func shardCounts(t *testing.T, pool *pgxpool.Pool, schemaName, table string) []int {
	rows, err := pool.Query(context.Background(), "SELECT result FROM run_command_on_shards($1, 'SELECT count(*) FROM %s')",
		schema.Qualified(schemaName, tables.StoreName(table)))
	require.NoError(t, err)
	defer rows.Close()
	var out []int
	for rows.Next() {
		var s string
		require.NoError(t, rows.Scan(&s))
		var n int
		_, err := fmt.Sscan(s, &n)
		require.NoError(t, err, "shard result %q", s)
		out = append(out, n)
	}
	require.NoError(t, rows.Err())
	return out
}

// TestCitusIntegration runs the exporter against a real Citus coordinator
// with workers when POSTGRESCOPY_CITUS_URL names one.
func TestCitusIntegration(t *testing.T) {
	ctx := context.Background()
	poison := func(t *testing.T, pool *pgxpool.Pool, name string) {
		_, err := pool.Exec(ctx, "ALTER TABLE "+schema.Qualified(name, "spans_rows")+" ADD CONSTRAINT no_poison CHECK (span_name <> 'poison')")
		require.NoError(t, err)
	}
	checkRejects := func(t *testing.T, pool *pgxpool.Pool, name string) {
		assert.Equal(t, 445, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")))
		assert.Equal(t, 445, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")+" WHERE span_name = 'op'"))
		assert.Equal(t, 55, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "rejects")+
			" WHERE table_name = 'spans' AND row_json->>'span_name' = 'poison'"))
		var code, msg string
		require.NoError(t, pool.QueryRow(ctx, "SELECT sqlstate, error FROM "+schema.Qualified(name, "rejects")+" LIMIT 1").Scan(&code, &msg))
		assert.Equal(t, "23514", code, "the worker's own reason: %s", msg)
		assert.Contains(t, msg, "no_poison")
	}

	t.Run("restart_on_the_distributed_schema", func(t *testing.T) {
		// The first start distributes the schema; a restart finds it
		// distributed and writes on.
		cfg, name, pool := citusConfig(t)
		for i := range 3 {
			set, logs := observedSettings()
			e, err := newExporter(cfg, set)
			require.NoError(t, err)
			require.NoError(t, e.start(ctx, componenttest.NewNopHost()), "start %d", i+1)
			require.NoError(t, pusher(e, request.Traces)(ctx, request.New(request.Traces, makeTraces(10, fmt.Sprintf("run%d", i)))))
			require.NoError(t, e.shutdown(ctx))
			assert.Zero(t, logs.FilterLevelExact(zapcore.ErrorLevel).Len(), "start %d", i+1)
		}
		assert.Equal(t, 30, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")))
	})

	t.Run("replicas_starting_together_and_one_later", func(t *testing.T) {
		// Redis mode: two replicas start at once on a new schema (one
		// distributes it, the other waits for the migration lock and finds
		// it done), and a third starts once they run.
		cfg, name, pool := citusConfig(t)
		_, prefix := testRedis(t)
		replica := func(consumer string) *Config {
			c := *cfg
			return withRedis(&c, prefix, consumer)
		}
		var wg sync.WaitGroup
		started := make([]exporter.Traces, 2)
		errs := make([]error, 2)
		for i := range started {
			wg.Add(1)
			go func() {
				defer wg.Done()
				te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), replica(fmt.Sprintf("c%d", i+1)))
				if err == nil {
					err = te.Start(ctx, componenttest.NewNopHost())
				}
				started[i], errs[i] = te, err
			}()
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "replica c%d", i+1)
			te := started[i]
			t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
		}
		third, _ := startTraces(t, replica("c3"))
		for i, te := range append(started, third) {
			require.NoError(t, te.ConsumeTraces(ctx, makeTraces(10, fmt.Sprintf("replica%d", i+1))))
		}
		require.Eventually(t, func() bool { return count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")) == 30 },
			10*time.Second, 20*time.Millisecond)
		assert.Equal(t, 3, count(t, pool, "SELECT count(DISTINCT service_name) FROM "+schema.Qualified(name, "spans")))
	})

	t.Run("refused_rows_direct", func(t *testing.T) {
		cfg, name, pool := citusConfig(t)
		set, logs := observedSettings()
		e, err := newExporter(cfg, set)
		require.NoError(t, err)
		require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
		t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
		poison(t, pool, name)
		begin := time.Now()
		err = pusher(e, request.Traces)(ctx, request.New(request.Traces, poisonSpans(500, every9th)))
		took := time.Since(begin)
		require.NoError(t, err, "refused rows are isolated, not retried")
		t.Logf("500 spans, 55 refused by a CHECK on the distributed table: isolated in %v", took)
		assert.Less(t, took, 5*time.Second)
		checkRejects(t, pool, name)
		assert.Zero(t, logs.FilterMessage("PostgreSQL refused the batch's data; dropping it").Len())
	})

	t.Run("span_without_trace_id_is_rejected", func(t *testing.T) {
		// spans are distributed by trace_id: a span without one (invalid
		// OTLP) has no shard; it is kept in rejects, its batch lands.
		cfg, name, pool := citusConfig(t)
		e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
		require.NoError(t, err)
		require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
		t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
		td := poisonSpans(20, func(int) bool { return false })
		td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(7).SetTraceID(pcommon.TraceID{})
		require.NoError(t, pusher(e, request.Traces)(ctx, request.New(request.Traces, td)))
		assert.Equal(t, 19, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")))
		assert.Equal(t, 1, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "rejects")+
			" WHERE table_name = 'spans' AND (row_json->'span_attributes'->>'i')::int = 7"))
	})

	t.Run("refused_rows_redis", func(t *testing.T) {
		cfg, name, pool := citusConfig(t)
		rdb, prefix := testRedis(t)
		withRedis(cfg, prefix, "c1")
		te, _ := startTraces(t, cfg)
		poison(t, pool, name)
		begin := time.Now()
		require.NoError(t, te.ConsumeTraces(ctx, poisonSpans(500, every9th)))
		q := "SELECT (SELECT count(*) FROM " + schema.Qualified(name, "spans") + ") + (SELECT count(*) FROM " + schema.Qualified(name, "rejects") + ")"
		require.Eventually(t, func() bool { return count(t, pool, q) == 500 }, 10*time.Second, 20*time.Millisecond)
		took := time.Since(begin)
		t.Logf("Redis mode: 500 spans, 55 refused, written and isolated %v after the push", took)
		assert.Less(t, took, 5*time.Second)
		checkRejects(t, pool, name)
		require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 5*time.Second, 20*time.Millisecond,
			"the entry is acknowledged and gone: no retry loop")
	})

	t.Run("migration_step_failure_is_named", func(t *testing.T) {
		cfg, name, pool := citusConfig(t)
		refuseMigration2(t, pool, name, true)
		set, logs := observedSettings()
		e, err := newExporter(cfg, set)
		require.NoError(t, err)
		err = e.start(ctx, componenttest.NewNopHost())
		require.ErrorContains(t, err, "apply migration 002_ai_spend.sql: statement")
		require.ErrorContains(t, err, "model_prices_model_idx")
		require.Zero(t, logs.FilterMessageSnippet("not reachable").Len())
		require.NoError(t, e.shutdown(ctx))
	})

	t.Run("ai_spend_rolls_up_on_distributed_spans", func(t *testing.T) {
		cfg, name, pool := citusConfig(t)
		now := time.Now().UTC()
		file := filepath.Join(t.TempDir(), "prices.yaml")
		require.NoError(t, os.WriteFile(file, []byte(strings.ReplaceAll(testPrices, "{{noon}}", now.Add(-48*time.Hour).Format(time.RFC3339))), 0o600))
		cfg.Pricing.File = file
		cfg.CostAttribution.Dimensions = []DimensionConfig{{Name: "team", From: []string{"span:team"}}}
		cfg.CostAttribution.LateWindow = 48 * time.Hour
		e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
		require.NoError(t, err)
		require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
		t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
		hourAgo := now.Truncate(time.Hour).Add(-30 * time.Minute)
		require.NoError(t, pusher(e, request.Traces)(ctx, request.New(request.Traces, genaiTraces(
			genaiCall{at: hourAgo, team: "a", model: "gpt-4o", in: 1000, out: 100},
			genaiCall{at: hourAgo, team: "b", model: "o3-mini", in: 2000, cached: 500, out: 200},
			genaiCall{at: hourAgo.Add(time.Minute), team: "a", model: "gpt-4o", in: 10, out: 1}))))
		actions := maintainNow(t, pool, name, 0)
		var rolled bool
		for _, a := range actions {
			rolled = rolled || a.Action == "rolled_up"
		}
		assert.True(t, rolled, "postgrescopy_maintain rolled up the spend: %v", actions)
		until := now.Truncate(time.Hour)
		raw := rawAnswer(t, pool, name, until)
		assert.Len(t, raw, 2)
		assert.Equal(t, raw, rollupAnswer(t, pool, name, "ai_spend_hourly", until), "the rollup is the raw answer")
	})

	t.Run("retried_batch_is_recognised", func(t *testing.T) {
		cfg, name, pool := citusConfig(t)
		set, logs := observedSettings()
		e, err := newExporter(cfg, set)
		require.NoError(t, err)
		require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
		t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
		req := request.New(request.Traces, makeTraces(20, "retry"))
		push := pusher(e, request.Traces)
		require.NoError(t, push(ctx, req))
		require.NoError(t, push(ctx, req), "the ledger's shard-suffixed key conflict is a committed batch")
		assert.Equal(t, 20, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")))
		assert.Equal(t, 1, logs.FilterMessage("parts already committed; not writing them again").Len())
		assert.Zero(t, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "rejects")))
	})

	t.Run("every_table_spreads_and_a_trace_stays_on_one_shard", func(t *testing.T) {
		cfg, name, pool := citusConfig(t)
		e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
		require.NoError(t, err)
		require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
		t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
		now := pcommon.NewTimestampFromTime(time.Now())

		// 1,000 traces of 4 spans, each with one log of its trace.
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty()
		ld := plog.NewLogs()
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for tr := range 1000 {
			id := pcommon.TraceID{9, byte(tr >> 8), byte(tr), 15: 3}
			for s := range 4 {
				sp := ss.Spans().AppendEmpty()
				sp.SetName("op")
				sp.SetTraceID(id)
				sp.SetSpanID(pcommon.SpanID{1, byte(tr >> 8), byte(tr), byte(s)})
				sp.SetStartTimestamp(now)
				sp.SetEndTimestamp(now)
			}
			l := lr.AppendEmpty()
			l.SetTimestamp(now)
			l.SetTraceID(id)
			l.Body().SetStr("in trace")
		}
		// 4,000 logs outside any trace.
		ld2 := plog.NewLogs()
		lr2 := ld2.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for i := range 4000 {
			l := lr2.AppendEmpty()
			l.SetTimestamp(now)
			l.Body().SetStr(fmt.Sprintf("no trace %d", i))
		}
		// One metric name, 4,000 series.
		md := pmetric.NewMetrics()
		g := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
		g.SetName("requests_in_flight")
		points := g.SetEmptyGauge().DataPoints()
		for i := range 4000 {
			dp := points.AppendEmpty()
			dp.SetTimestamp(now)
			dp.SetIntValue(int64(i))
			dp.Attributes().PutInt("series", int64(i))
		}
		require.NoError(t, pusher(e, request.Traces)(ctx, request.New(request.Traces, td)))
		require.NoError(t, pusher(e, request.Logs)(ctx, request.New(request.Logs, ld)))
		require.NoError(t, pusher(e, request.Logs)(ctx, request.New(request.Logs, ld2)))
		require.NoError(t, pusher(e, request.Metrics)(ctx, request.New(request.Metrics, md)))

		for table, total := range map[string]int{"spans": 4000, "logs": 5000, "metrics_gauge": 4000} {
			counts := shardCounts(t, pool, name, table)
			require.NotEmpty(t, counts)
			sum, most := 0, 0
			for _, n := range counts {
				sum += n
				most = max(most, n)
			}
			require.Equal(t, total, sum, table)
			mean := float64(sum) / float64(len(counts))
			t.Logf("%s: %d rows over %d shards, largest %d, mean %.1f", table, sum, len(counts), most, mean)
			assert.LessOrEqual(t, float64(most), 2*mean, "%s: the largest shard holds at most twice the mean", table)
		}

		// A trace's spans and logs are on one shard, and its lookup is routed
		// to that shard alone: spans by trace_id as on one node, logs with
		// the shard key as well.
		trace := "09000100000000000000000000000003"
		for table, where := range map[string]string{"spans": "trace_id = $1", "logs": "shard_key = $1 AND trace_id = $1"} {
			rows, err := pool.Query(ctx, "EXPLAIN SELECT * FROM "+schema.Qualified(name, table)+" WHERE "+where, trace)
			require.NoError(t, err)
			var plan []string
			for rows.Next() {
				var line string
				require.NoError(t, rows.Scan(&line))
				plan = append(plan, line)
			}
			require.NoError(t, rows.Err())
			assert.Contains(t, strings.Join(plan, "\n"), "Task Count: 1", "%s: a trace lookup is single-shard", table)
		}
		assert.Equal(t, 4, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "spans")+" s JOIN "+schema.Qualified(name, "logs")+
			" l ON l.shard_key = s.trace_id AND l.trace_id = s.trace_id WHERE s.trace_id = '"+trace+"'"),
			"a trace's 4 spans each join its log, on one shard")

		// queries/ runs unchanged on the distributed tables.
		files, err := filepath.Glob("../../queries/*.sql")
		require.NoError(t, err)
		require.NotEmpty(t, files)
		for _, f := range files {
			sql, err := os.ReadFile(f)
			require.NoError(t, err)
			rows, err := pool.Query(ctx, strings.ReplaceAll(string(sql), "otel.", pgx.Identifier{name}.Sanitize()+"."))
			require.NoError(t, err, f)
			for rows.Next() {
			}
			assert.NoError(t, rows.Err(), f)
		}
		assert.Zero(t, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "logs")+" WHERE trace_id = '00000000-0000-0000-0000-000000000000'"),
			"an absent trace id is not stored as the nil uuid")
		assert.Equal(t, 4000, count(t, pool, "SELECT count(*) FROM "+schema.Qualified(name, "logs")+" WHERE trace_id IS NULL"))
	})
}
