package schema_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

var distributeRe = regexp.MustCompile(`\('(\w+)', (?:'[^']*'|series|NULL), (?:NULL|'(\w+)')\)`)

func TestCitusDDL(t *testing.T) {
	ddl := schema.CitusDDL("otel")
	got := map[string]string{}
	for _, m := range distributeRe.FindAllStringSubmatch(ddl, -1) {
		got[m[1]] = m[2]
	}
	// Every signal table is distributed, spans by trace_id and logs by shard
	// key together, the metric tables by shard key together.
	// What is distributed are the stored tables under the views.
	for _, tbl := range tables.Tables[:tables.NumSignalTables] {
		_, ok := got[tbl.Store]
		assert.True(t, ok, "%s is distributed", tbl.Store)
	}
	assert.Len(t, got, tables.NumSignalTables, "nothing else is distributed")
	assert.Equal(t, "", got["spans_rows"])
	assert.Equal(t, "spans_rows", got["logs_rows"])
	assert.Equal(t, "", got["metrics_gauge_rows"])
	for _, m := range []string{"metrics_sum", "metrics_histogram", "metrics_exponential_histogram", "metrics_summary"} {
		assert.Equal(t, "metrics_gauge_rows", got[m+"_rows"])
	}
	assert.Contains(t, ddl, "dist := CASE WHEN t.tbl = 'spans_rows' THEN 'trace_id' ELSE 'shard_key' END;")
	assert.Contains(t, ddl, "create_distributed_table(format('%I.%I', s, t.tbl), dist,")
	assert.Contains(t, ddl, "ARRAY['ledger', 'rejects', 'quarantine', 'schema_version', 'model_prices', 'contexts']")
	assert.Contains(t, ddl, `PERFORM "otel".postgrescopy_views();`, "the views show shard_key")
	assert.Contains(t, ddl, "s      constant text := 'otel';")
	assert.Len(t, schema.Statements(ddl), 1, "one DO block: one message")
}

// TestCitusIndexesKeepNoUniqueness: Citus refuses unique indexes that do not
// include the distribution column; the query index set has none.
func TestCitusIndexesKeepNoUniqueness(t *testing.T) {
	for _, name := range schema.IndexNames() {
		assert.NotContains(t, name, "unique")
	}
	assert.NotRegexp(t, `(?i)create unique`, schema.CitusDDL("otel"))
}

// citusPool connects to the Citus coordinator of pgtest.CitusURL (skipped
// without one: make test starts one where the citus extension is installed).
func citusPool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	url := pgtest.CitusURL(t)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	require.NoError(t, pool.Ping(context.Background()))
	return pool
}

// citusSchema is a fresh schema name on the coordinator, dropped at the end.
func citusSchema(t *testing.T, pool *pgxpool.Pool) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "pgct_citus_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	return name
}

func withConn(t *testing.T, pool *pgxpool.Pool, f func(*pgx.Conn) error) error {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	return f(conn.Conn())
}

// distColumn is how Citus distributes table: its distribution column ("" for
// a reference table), its colocation group and its method.
type distColumn struct {
	column     string
	colocation int
	method     string
}

func distribution(t *testing.T, pool *pgxpool.Pool, schemaName, table string) distColumn {
	t.Helper()
	var d distColumn
	err := pool.QueryRow(context.Background(), `SELECT coalesce(column_to_column_name(logicalrelid, partkey), ''), colocationid, partmethod::text
FROM pg_dist_partition WHERE logicalrelid = $1::regclass`, schema.Qualified(schemaName, tables.StoreName(table))).Scan(&d.column, &d.colocation, &d.method)
	require.NoError(t, err, "%s is distributed", table)
	return d
}

// earlierDistribution is the distribute.sql this project ran on a schema at
// version v (testdata/citus/distribute_vN.sql, the first N >= v), or "" for
// the versions after the last of those files: this binary's Distribute.
func earlierDistribution(t *testing.T, v int) string {
	t.Helper()
	files, err := filepath.Glob("testdata/citus/distribute_v*.sql")
	require.NoError(t, err)
	best, file := 0, ""
	for _, f := range files {
		n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(filepath.Base(f), "distribute_v"), ".sql"))
		require.NoError(t, err, f)
		if n >= v && (best == 0 || n < best) {
			best, file = n, f
		}
	}
	if file == "" {
		return ""
	}
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	return string(b)
}

// runScript runs a distribute.sql in one transaction as the exporter of its
// time did: one statement per message, in sequential mode.
func runScript(ctx context.Context, pool *pgxpool.Pool, sql string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL "+schema.CitusModifyMode+" TO 'sequential'"); err != nil {
			return err
		}
		for _, stmt := range schema.Statements(sql) {
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("%s: %w", firstLineOf(stmt), err)
			}
		}
		return nil
	})
}

func firstLineOf(stmt string) string {
	for _, l := range strings.Split(stmt, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "--") {
			return l
		}
	}
	return ""
}

// redistribute runs what Distribute's refusal of an earlier release's
// distribution says, table by table, until it accepts (as an operator would).
func redistribute(t *testing.T, ctx context.Context, pool *pgxpool.Pool, name string, tries int) error {
	t.Helper()
	var err error
	for range tries {
		err = withConn(t, pool, func(c *pgx.Conn) error { return schema.Distribute(ctx, c, name) })
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || !strings.Contains(pgErr.Message, "an earlier postgrescopy distributed it") {
			return err
		}
		cmds, ok := strings.CutPrefix(pgErr.Hint, "redistribute it once, as its owner, in a maintenance window: ")
		require.True(t, ok, pgErr.Hint)
		for _, stmt := range schema.Statements(cmds) {
			_, err := pool.Exec(ctx, stmt)
			require.NoError(t, err, stmt)
		}
	}
	return err
}

// TestCitusIntegration runs against a real Citus coordinator (with workers)
// when POSTGRESCOPY_CITUS_URL names one.
func TestCitusIntegration(t *testing.T) {
	pool := citusPool(t)
	ctx := context.Background()

	t.Run("distributes_every_table", func(t *testing.T) {
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
			if _, err := schema.Migrate(ctx, c, name); err != nil {
				return err
			}
			if err := schema.SetIndexes(ctx, c, name, true); err != nil {
				return err
			}
			if err := schema.Distribute(ctx, c, name); err != nil {
				return err
			}
			return schema.Distribute(ctx, c, name) // idempotent
		}))
		spans := distribution(t, pool, name, "spans")
		assert.Equal(t, "trace_id", spans.column)
		logs := distribution(t, pool, name, "logs")
		assert.Equal(t, "shard_key", logs.column)
		assert.Equal(t, spans.colocation, logs.colocation, "a trace's spans and logs are colocated")
		gauge := distribution(t, pool, name, "metrics_gauge")
		assert.Equal(t, "shard_key", gauge.column)
		for _, m := range []string{"metrics_sum", "metrics_histogram", "metrics_exponential_histogram", "metrics_summary"} {
			assert.Equal(t, gauge, distribution(t, pool, name, m))
		}
		for _, ref := range []string{"ledger", "rejects", "quarantine", "schema_version", "model_prices", "contexts"} {
			assert.Equal(t, "n", distribution(t, pool, name, ref).method, "%s is a reference table", ref)
		}
	})

	t.Run("restart_on_the_distributed_schema", func(t *testing.T) {
		// What every start does (Migrate, SetIndexes, Distribute), three
		// times: the first distributes, the next find it done.
		name := citusSchema(t, pool)
		for i := range 3 {
			require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
				if _, err := schema.Migrate(ctx, c, name); err != nil {
					return err
				}
				if err := schema.SetIndexes(ctx, c, name, true); err != nil {
					return err
				}
				return schema.Distribute(ctx, c, name)
			}), "start %d", i+1)
		}
		assert.Equal(t, "trace_id", distribution(t, pool, name, "spans").column)
	})

	t.Run("a_capture_trigger_made_on_the_distributed_table_goes", func(t *testing.T) {
		// Made by hand (Citus allows it with citus.enable_unsafe_triggers):
		// the next start drops it with the setting on for that statement.
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
			if _, err := schema.Migrate(ctx, c, name); err != nil {
				return err
			}
			return schema.Distribute(ctx, c, name)
		}))
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL citus.enable_unsafe_triggers = on"); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, "CREATE TRIGGER postgrescopy_ai_capture AFTER INSERT ON "+schema.Qualified(name, "spans_rows")+
				" REFERENCING NEW TABLE AS postgrescopy_new_spans FOR EACH STATEMENT EXECUTE FUNCTION "+schema.Qualified(name, "postgrescopy_ai_capture")+"()")
			return err
		}))
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error { return schema.Distribute(ctx, c, name) }))
		var triggers int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal",
			schema.Qualified(name, "spans_rows")).Scan(&triggers))
		assert.Zero(t, triggers)
	})

	t.Run("every_migration_on_a_schema_distributed_at_each_earlier_version", func(t *testing.T) {
		// A schema this project distributed at version v (with its
		// distribute.sql of then, testdata/citus), holding a span and a log
		// of one trace written at version 1, is migrated to the latest
		// version and distributed by this binary; a restart then does
		// nothing more, the old rows read as they were written and new ones
		// are written.
		for v := 1; v < schema.Latest(); v++ {
			t.Run(fmt.Sprintf("version_%d", v), func(t *testing.T) {
				name := citusSchema(t, pool)
				require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
					_, err := schema.MigrateTo(ctx, c, name, 1)
					return err
				}))
				_, err := pool.Exec(ctx, `INSERT INTO `+schema.Qualified(name, "spans")+` (start_time, start_time_frac_ns, end_time, duration_ns,
trace_id, span_id, flags, service_name, span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count,
dropped_links_count, resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES (now(), 0, now(), 1000, '0a000000-0000-0000-0000-000000000001', 1, 0, 'old', 'old span', 'Internal', 'Unset', '{"k": 1}', 0, 0, 0,
'{"service.name": "old"}', '{}', 0, 0)`)
				require.NoError(t, err)
				_, err = pool.Exec(ctx, `INSERT INTO `+schema.Qualified(name, "logs")+` ("timestamp", timestamp_frac_ns, observed_timestamp,
observed_timestamp_frac_ns, trace_id, flags, severity_number, service_name, body, log_attributes, dropped_attributes_count, resource_attributes,
scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES (now(), 0, now(), 0, '0a000000-0000-0000-0000-000000000001', 0, 9, 'old', '"old log"', '{}', 0, '{"service.name": "old"}', '{}', 0, 0)`)
				require.NoError(t, err)
				require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
					if _, err := schema.MigrateTo(ctx, c, name, v); err != nil {
						return err
					}
					if v < 3 {
						return nil // today's index set is on the stored tables of version 3
					}
					return schema.SetIndexes(ctx, c, name, true)
				}))
				if old := earlierDistribution(t, v); old != "" {
					if v >= 5 && v <= 7 {
						// That script distributed spans_rows before dropping
						// the capture trigger, which Citus refuses: an
						// operator dropped it first.
						_, err := pool.Exec(ctx, "DROP TRIGGER postgrescopy_ai_capture ON "+schema.Qualified(name, "spans_rows"))
						require.NoError(t, err)
					}
					require.NoError(t, runScript(ctx, pool, schema.Render(old, name)), "distribute at version %d", v)
				} else {
					require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error { return schema.Distribute(ctx, c, name) }))
				}

				for start := range 2 {
					require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
						res, err := schema.Migrate(ctx, c, name)
						if err != nil {
							return err
						}
						if start == 0 {
							assert.Equal(t, schema.Result{From: v, To: schema.Latest(), LZ4: res.LZ4}, res)
						}
						return schema.SetIndexes(ctx, c, name, true)
					}), "start %d: migrate from version %d", start+1, v)
					// Version 1 distributed logs by trace_id and the metric
					// tables by metric_name: refused with the commands that
					// redistribute them, which are run.
					require.NoError(t, redistribute(t, ctx, pool, name, tables.NumSignalTables+1), "start %d: distribute", start+1)
				}
				assert.Equal(t, "trace_id", distribution(t, pool, name, "spans").column)
				for _, tbl := range []string{"logs", "metrics_gauge", "metrics_sum", "metrics_histogram", "metrics_exponential_histogram", "metrics_summary"} {
					assert.Equal(t, "shard_key", distribution(t, pool, name, tbl).column, tbl)
				}
				for _, ref := range []string{"ledger", "rejects", "quarantine", "schema_version", "model_prices", "contexts"} {
					assert.Equal(t, "n", distribution(t, pool, name, ref).method, "%s is a reference table", ref)
				}
				var spanName, svc, body string
				require.NoError(t, pool.QueryRow(ctx, "SELECT s.span_name, s.service_name, l.body #>> '{}' FROM "+schema.Qualified(name, "spans")+" s JOIN "+
					schema.Qualified(name, "logs")+" l ON l.shard_key = s.trace_id AND l.trace_id = s.trace_id").Scan(&spanName, &svc, &body))
				assert.Equal(t, []string{"old span", "old", "old log"}, []string{spanName, svc, body}, "the rows written at version 1")

				layout := tables.DefaultLayout().WithShardKey()
				var b rows.Batch
				b.SetLayout(layout)
				td := ptrace.NewTraces()
				ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
				for i := range 10 {
					sp := ss.AppendEmpty()
					sp.SetName("new")
					sp.SetTraceID(pcommon.TraceID{0x0b, byte(i), 15: 1})
					sp.SetStartTimestamp(pcommon.NewTimestampFromTime(time.Now()))
					sp.SetEndTimestamp(pcommon.NewTimestampFromTime(time.Now()))
				}
				b.AddTraces(td)
				_, err = pgwrite.NewLayoutWriter(pool, name, layout).Write(ctx, &b)
				require.NoError(t, err)
				var n int
				require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(name, "spans")+" WHERE span_name = 'new'").Scan(&n))
				assert.Equal(t, 10, n, "this binary writes to the migrated schema")
			})
		}
	})

	t.Run("indexes_enabled_after_distribution", func(t *testing.T) {
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
			if _, err := schema.Migrate(ctx, c, name); err != nil {
				return err
			}
			if err := schema.SetIndexes(ctx, c, name, false); err != nil {
				return err
			}
			if err := schema.Distribute(ctx, c, name); err != nil {
				return err
			}
			return schema.SetIndexes(ctx, c, name, true)
		}))
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = ANY($2)",
			name, schema.IndexNames()).Scan(&n))
		assert.Equal(t, len(schema.IndexNames()), n, "every index of the set is on its distributed parent")
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error { return schema.SetIndexes(ctx, c, name, false) }))
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = ANY($2)",
			name, schema.IndexNames()).Scan(&n))
		assert.Zero(t, n, "indexes: false drops them again")
	})

	t.Run("later_migrations_on_distributed_tables", func(t *testing.T) {
		// Migration 2 creates an index on spans, migration 3 renames every
		// signal table to <table>_rows under a view: both applied after an
		// older release distributed spans (by trace_id, as every release
		// did).
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
			if _, err := schema.MigrateTo(ctx, c, name, 1); err != nil {
				return err
			}
			if _, err := c.Exec(ctx, "SELECT create_distributed_table($1, 'trace_id')", schema.Qualified(name, "spans")); err != nil {
				return err
			}
			res, err := schema.Migrate(ctx, c, name)
			assert.Equal(t, schema.Latest(), res.To)
			if err != nil {
				return err
			}
			return schema.Distribute(ctx, c, name)
		}))
		var brin bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = $1 AND indexname = 'spans_start_time_brin')",
			name).Scan(&brin))
		assert.True(t, brin)
		assert.Equal(t, "trace_id", distribution(t, pool, name, "spans").column, "the renamed table stays distributed")
		assert.Equal(t, "shard_key", distribution(t, pool, name, "logs").column)
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(name, "spans")+" s JOIN "+
			schema.Qualified(name, "logs")+" l ON l.shard_key = s.trace_id AND l.trace_id = s.trace_id").Scan(&n))
		assert.Zero(t, n, "the views over the distributed tables answer")
	})

	t.Run("existing_rows_with_null_trace_ids", func(t *testing.T) {
		// Rows written before distribution: logs outside a trace have a NULL
		// trace_id, which no distribution column may hold.
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error { _, err := schema.Migrate(ctx, c, name); return err }))
		var b rows.Batch
		ld := plog.NewLogs()
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
		for i := range 20 {
			l := lr.AppendEmpty()
			l.SetTimestamp(pcommon.NewTimestampFromTime(time.Now()))
			l.Body().SetInt(int64(i))
			if i%2 == 0 {
				l.SetTraceID(pcommon.TraceID{1, byte(i)})
			}
		}
		b.AddLogs(ld)
		td := ptrace.NewTraces()
		ss := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans()
		sp := ss.AppendEmpty()
		sp.SetName("old")
		sp.SetTraceID(pcommon.TraceID{1, 0})
		ss.AppendEmpty().SetName("no trace") // invalid OTLP, stored on one node
		b.AddTraces(td)
		_, err := pgwrite.NewWriter(pool, name).Write(ctx, &b)
		require.NoError(t, err)

		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error { return schema.Distribute(ctx, c, name) }))
		var logs, nullTrace, spans int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*), count(*) FILTER (WHERE trace_id IS NULL) FROM "+schema.Qualified(name, "logs")).Scan(&logs, &nullTrace))
		assert.Equal(t, 20, logs, "every row kept")
		assert.Equal(t, 10, nullTrace, "an absent trace id stays NULL: it is not made up")
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(name, "spans")).Scan(&spans))
		assert.Equal(t, 1, spans)
		var moved int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(name, "rejects")+
			" WHERE table_name = 'spans' AND sqlstate = '22004' AND row_json->>'span_name' = 'no trace'").Scan(&moved))
		assert.Equal(t, 1, moved, "a span without a trace id cannot be distributed by it: it is kept in rejects")
		assert.Equal(t, "shard_key", distribution(t, pool, name, "logs").column)
		assert.Equal(t, "trace_id", distribution(t, pool, name, "spans").column)
		var colocated int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM `+schema.Qualified(name, "logs")+` l JOIN `+
			schema.Qualified(name, "spans")+` s ON l.shard_key = s.trace_id AND s.trace_id = l.trace_id`).Scan(&colocated))
		assert.Equal(t, 1, colocated, "an old log of a trace joins its old span on its shard key, colocated")
		for _, local := range []string{"spans_default", "logs_default"} {
			var size int64
			require.NoError(t, pool.QueryRow(ctx, "SELECT pg_relation_size($1)", schema.Qualified(name, local)).Scan(&size))
			assert.Zero(t, size, "%s: the rows are on the shards, no copy is left in the coordinator's own table", local)
		}
	})

	t.Run("distribution_by_an_earlier_release_is_refused_with_the_commands", func(t *testing.T) {
		// What an earlier postgrescopy did: spans and logs by trace_id, the
		// metric tables by metric_name.
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error { _, err := schema.Migrate(ctx, c, name); return err }))
		// Those releases came before the AI spend capture trigger (version
		// 5), and Citus distributes no table with triggers.
		_, err := pool.Exec(ctx, "DROP TRIGGER postgrescopy_ai_capture ON "+schema.Qualified(name, "spans_rows"))
		require.NoError(t, err)
		_, err = pool.Exec(ctx, "SELECT "+schema.Qualified(name, "postgrescopy_partition_triggers")+"()")
		require.NoError(t, err)
		old := map[string][2]string{"spans": {"trace_id", "none"}, "logs": {"trace_id", "spans"}, "metrics_gauge": {"metric_name", "none"},
			"metrics_sum": {"metric_name", "metrics_gauge"}, "metrics_histogram": {"metric_name", "metrics_gauge"},
			"metrics_exponential_histogram": {"metric_name", "metrics_gauge"}, "metrics_summary": {"metric_name", "metrics_gauge"}}
		for _, tbl := range []string{"spans", "logs", "metrics_gauge", "metrics_sum", "metrics_histogram", "metrics_exponential_histogram", "metrics_summary"} {
			colocate := old[tbl][1]
			if colocate != "none" {
				colocate = schema.Qualified(name, tables.StoreName(colocate))
			}
			_, err := pool.Exec(ctx, "SELECT create_distributed_table($1, $2, colocate_with => $3)", schema.Qualified(name, tables.StoreName(tbl)), old[tbl][0], colocate)
			require.NoError(t, err)
		}
		_, err = pool.Exec(ctx, "INSERT INTO "+schema.Qualified(name, "logs_rows")+` ("timestamp", timestamp_frac_ns, observed_timestamp, observed_timestamp_frac_ns,
trace_id, flags, severity_number, log_attributes, dropped_attributes_count, resource_attributes, scope_attributes,
resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES (now(), 0, now(), 0, '00000000-0000-0000-0000-000000000000', 0, 9, '{}', 0, '{}', '{}', 0, 0)`)
		require.NoError(t, err)
		// Distribute refuses, table by table, with the commands that fix it;
		// run them as an operator would, until it accepts.
		for range len(old) + 1 {
			err = withConn(t, pool, func(c *pgx.Conn) error { return schema.Distribute(ctx, c, name) })
			if err == nil {
				break
			}
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Contains(t, pgErr.Message, "an earlier postgrescopy distributed it")
			cmds, ok := strings.CutPrefix(pgErr.Hint, "redistribute it once, as its owner, in a maintenance window: ")
			require.True(t, ok, pgErr.Hint)
			for _, stmt := range schema.Statements(cmds) {
				_, err := pool.Exec(ctx, stmt)
				require.NoError(t, err, stmt)
			}
		}
		require.NoError(t, err)
		for tbl := range old {
			want := "shard_key"
			if tbl == "spans" {
				want = "trace_id"
			}
			assert.Equal(t, want, distribution(t, pool, name, tbl).column, tbl)
		}
		assert.Equal(t, distribution(t, pool, name, "spans").colocation, distribution(t, pool, name, "logs").colocation)
		var nullTrace int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(name, "logs")+" WHERE trace_id IS NULL").Scan(&nullTrace))
		assert.Equal(t, 1, nullTrace, "the nil uuid an earlier release stored is NULL again")
	})

	t.Run("maintain_on_distributed_tables", func(t *testing.T) {
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
			if _, err := schema.Migrate(ctx, c, name); err != nil {
				return err
			}
			return schema.Distribute(ctx, c, name)
		}))
		hourly := schema.Partitioning{Interval: time.Hour, Premake: 2}
		actions, err := schema.Maintain(ctx, pool, name, hourly)
		require.NoError(t, err)
		var created []string
		for _, a := range actions {
			require.NotEqual(t, "skipped", a.Action, "%s: %s", a.Partition, a.Detail)
			if a.Action == "created" {
				created = append(created, a.Partition)
			}
		}
		assert.Len(t, created, tables.NumSignalTables*4, "the hour before now, now and 2 ahead, for every table")
		var distributed int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1 AND c.relname = ANY($2)`, name, created).Scan(&distributed))
		assert.Equal(t, len(created), distributed, "every partition made is distributed with its parent")

		_, err = pool.Exec(ctx, "CREATE TABLE "+schema.Qualified(name, "spans_p20200101_0000")+" PARTITION OF "+
			schema.Qualified(name, "spans_rows")+" FOR VALUES FROM ('2020-01-01 00:00+00') TO ('2020-01-01 01:00+00')")
		require.NoError(t, err)
		hourly.Retention = 24 * time.Hour
		actions, err = schema.Maintain(ctx, pool, name, hourly)
		require.NoError(t, err)
		assert.Contains(t, actions, schema.Action{Action: "dropped", Partition: "spans_p20200101_0000"})
		var gone bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT to_regclass($1) IS NULL", schema.Qualified(name, "spans_p20200101_0000")).Scan(&gone))
		assert.True(t, gone, "the expired partition and its shards are dropped")
	})

	t.Run("far_future_rows_move_into_their_partition", func(t *testing.T) {
		// As on one PostgreSQL (TestFarFutureRowsMoveIntoTheirPartition):
		// the workers refuse a partition whose range has rows in their
		// default shards too.
		name := citusSchema(t, pool)
		require.NoError(t, withConn(t, pool, func(c *pgx.Conn) error {
			if _, err := schema.Migrate(ctx, c, name); err != nil {
				return err
			}
			if err := schema.SetIndexes(ctx, c, name, true); err != nil {
				return err
			}
			return schema.Distribute(ctx, c, name)
		}))
		_, err := schema.Maintain(ctx, pool, name, daily)
		require.NoError(t, err)
		today := time.Now().UTC().Truncate(24 * time.Hour)
		day6, day7 := today.Add(6*24*time.Hour), today.Add(7*24*time.Hour)
		at := map[string]time.Time{"a": day6, "b": day6.Add(12 * time.Hour), "c": day7.Add(-time.Microsecond), "next": day7,
			"zero": time.Unix(0, 0), "2200": time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)}
		i := 0
		for n, ts := range at {
			i++
			_, err := pool.Exec(ctx, q(name, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, trace_id, flags,
  span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES ($1, 0, $1, 0, $3::uuid, 0, $2, 'Internal', 'Unset', '{}', 0, 0, 0, '{}', '{}', 0, 0)`), ts, n, fmt.Sprintf("0c000000-0000-0000-0000-%012d", i))
			require.NoError(t, err)
		}
		reach := daily
		reach.Premake = 6
		actions, err := schema.Maintain(ctx, pool, name, reach)
		require.NoError(t, err)
		part := "spans_p" + day6.Format("20060102") + "_0000"
		assert.Contains(t, actions, schema.Action{Action: "created", Partition: part, Detail: "3 rows moved from spans_default"})
		spans := func(rel string) map[string]int {
			rows, err := pool.Query(ctx, q(name, `SELECT span_name FROM S.`+rel))
			require.NoError(t, err)
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			require.NoError(t, err)
			out := map[string]int{}
			for _, n := range got {
				out[n]++
			}
			return out
		}
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, spans(part))
		assert.Equal(t, map[string]int{"next": 1, "zero": 1, "2200": 1}, spans("spans_default"))
		var distributed bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass)",
			schema.Qualified(name, part)).Scan(&distributed))
		assert.True(t, distributed, "%s is distributed with its parent", part)

		reach.Retention = 48 * time.Hour
		actions, err = schema.Maintain(ctx, pool, name, reach)
		require.NoError(t, err)
		assert.Contains(t, actions, schema.Action{Action: "expired", Partition: "spans_default", Detail: "2 rows"}, "the zero time and the year 2200")
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "next": 1}, spans("spans_rows"))
	})
}
