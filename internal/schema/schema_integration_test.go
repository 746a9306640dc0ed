package schema_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

func migrated(t *testing.T) (*pgxpool.Pool, string) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.Migrate(context.Background(), conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(context.Background(), conn.Conn(), name, true))
	return pool, name
}

func q(name, sql string) string {
	return strings.ReplaceAll(sql, "S.", pgx.Identifier{name}.Sanitize()+".")
}

// partitions returns spans' partitions (not the default) and their bounds.
func partitions(t *testing.T, pool *pgxpool.Pool, name string) map[string]string {
	rows, err := pool.Query(context.Background(), `
SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
WHERE i.inhparent = $1::regclass`, pgx.Identifier{name, "spans_rows"}.Sanitize())
	require.NoError(t, err)
	out := map[string]string{}
	for rows.Next() {
		var n, b string
		require.NoError(t, rows.Scan(&n, &b))
		out[n] = b
	}
	require.NoError(t, rows.Err())
	return out
}

var daily = schema.Partitioning{Interval: 24 * time.Hour, Premake: 3}

func TestPartitionsAheadOfNow(t *testing.T) {
	pool, name := migrated(t)
	actions, err := schema.Maintain(context.Background(), pool, name, daily)
	require.NoError(t, err)
	// 7 tables × (yesterday, today and 3 ahead).
	assert.Len(t, actions, 7*5)
	parts := partitions(t, pool, name)
	assert.Contains(t, parts, "spans_default")
	ahead := time.Now().UTC().Add(72 * time.Hour).Truncate(24 * time.Hour)
	assert.Contains(t, parts, "spans_p"+ahead.Format("20060102")+"_0000")
	assert.Len(t, parts, 6)

	// Idempotent: a second run creates nothing.
	actions, err = schema.Maintain(context.Background(), pool, name, daily)
	require.NoError(t, err)
	assert.Empty(t, actions)
}

func TestEveryTimestampLands(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	_, err := schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)
	for _, ts := range []string{"now()", "now() - interval '1 year'", "'1970-01-01 00:00:00+00'", "now() + interval '10 years'"} {
		_, err := pool.Exec(ctx, q(name, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags,
  span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES (`+ts+`, 0, `+ts+`, 0, 0, 'x', 'Internal', 'Unset', '{}', 0, 0, 0, '{}', '{}', 0, 0)`))
		require.NoError(t, err, ts)
	}
	var inDefault, total int64
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT count(*) FROM S.spans_default`)).Scan(&inDefault))
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT count(*) FROM S.spans`)).Scan(&total))
	assert.EqualValues(t, 4, total)
	assert.EqualValues(t, 3, inDefault, "the year-old, zero and far-future rows are in the default partition")
}

func TestRetentionDropsOnlyExpired(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	_, err := schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)
	// An old partition and old rows in the default one, as left by a
	// collector that ran ten days ago.
	_, err = pool.Exec(ctx, q(name, `CREATE TABLE S.spans_old PARTITION OF S.spans_rows
  FOR VALUES FROM (now() - interval '10 days') TO (now() - interval '9 days')`))
	require.NoError(t, err)
	for _, ts := range []string{"now() - interval '20 days'", "now() - interval '2 days'"} {
		_, err := pool.Exec(ctx, q(name, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags,
  span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES (`+ts+`, 0, `+ts+`, 0, 0, 'x', 'Internal', 'Unset', '{}', 0, 0, 0, '{}', '{}', 0, 0)`))
		require.NoError(t, err)
	}
	before := partitions(t, pool, name)
	require.Contains(t, before, "spans_old")

	week := daily
	week.Retention = 7 * 24 * time.Hour
	actions, err := schema.Maintain(ctx, pool, name, week)
	require.NoError(t, err)
	after := partitions(t, pool, name)
	assert.NotContains(t, after, "spans_old")
	assert.Len(t, after, len(before)-1, "only the expired partition is dropped")
	var dropped, expired int
	for _, a := range actions {
		switch a.Action {
		case "dropped":
			dropped++
			assert.Equal(t, "spans_old", a.Partition)
		case "expired":
			expired++
			assert.Equal(t, "spans_default", a.Partition)
		}
	}
	assert.Equal(t, 1, dropped)
	assert.Equal(t, 1, expired)
	var left int64
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT count(*) FROM S.spans_default`)).Scan(&left))
	assert.EqualValues(t, 1, left, "the 2-day-old row stays, the 20-day-old one is gone")
}

func TestConcurrentMigrationsApplyOnce(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pool.Acquire(context.Background())
			if err != nil {
				errs[i] = err
				return
			}
			defer conn.Release()
			_, errs[i] = schema.Migrate(context.Background(), conn.Conn(), name)
			if errs[i] == nil {
				errs[i] = schema.SetIndexes(context.Background(), conn.Conn(), name, true)
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	var n, distinct int
	require.NoError(t, pool.QueryRow(context.Background(), q(name, `SELECT count(*), count(DISTINCT version) FROM S.schema_version`)).Scan(&n, &distinct))
	assert.Equal(t, len(schema.Migrations()), n)
	assert.Equal(t, n, distinct)
}

func TestIndexesSwitchable(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	count := func() int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = ANY($2)`,
			name, schema.IndexNames()).Scan(&n))
		return n
	}
	require.Len(t, schema.IndexNames(), 9)
	assert.Equal(t, 9, count())
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, false))
	assert.Equal(t, 0, count())
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	assert.Equal(t, 9, count())
}

func explain(t *testing.T, pool *pgxpool.Pool, sql string) string {
	rows, err := pool.Query(context.Background(), "EXPLAIN "+sql)
	require.NoError(t, err)
	var lines []string
	for rows.Next() {
		var l string
		require.NoError(t, rows.Scan(&l))
		lines = append(lines, l)
	}
	require.NoError(t, rows.Err())
	return strings.Join(lines, "\n")
}

func TestQueriesUseIndexesAndRecentPartitions(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	_, err := schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)
	// 30,000 spans over the last two days, 1% errors, plus old ones in the
	// default partition, then fresh statistics.
	_, err = pool.Exec(ctx, q(name, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, trace_id, span_id, flags,
  service_name, span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
SELECT now() - (i || ' seconds')::interval * 5, 0, now(), 1000, md5(i::text)::uuid, i, 0,
  'svc-' || (i % 20), 'op', 'Server', CASE WHEN i % 100 = 0 THEN 'Error' ELSE 'Ok' END, '{}', 0, 0, 0, '{}', '{}', 0, 0
FROM generate_series(1, 30000) i;
INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags, span_name, span_kind, status_code,
  span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
SELECT now() - interval '1 year', 0, now(), 1, 0, 'old', 'Server', 'Error', '{}', 0, 0, 0, '{}', '{}', 0, 0 FROM generate_series(1, 1000);
ANALYZE S.spans_rows;`))
	require.NoError(t, err)

	// The partition holding most rows: today's only after midnight has
	// passed long enough ago (just after it, today's partition holds a few
	// rows and a seq scan of them is rightly cheaper than an index).
	var busiest string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT c.relname FROM S.spans_rows s JOIN pg_class c ON c.oid = s.tableoid
GROUP BY 1 ORDER BY count(*) DESC LIMIT 1`)).Scan(&busiest))
	require.True(t, strings.HasPrefix(busiest, "spans_p"), busiest)

	recentErrors := explain(t, pool, q(name, `SELECT * FROM S.spans WHERE status_code = 'Error' ORDER BY start_time DESC LIMIT 50`))
	// Partitions name their copy of an index after its columns: the errors
	// index is the only one on start_time alone.
	assert.Regexp(t, `Index Scan (Backward )?using `+busiest+`_start_time_idx`, recentErrors, recentErrors)

	trace := explain(t, pool, q(name, `SELECT * FROM S.spans WHERE trace_id = md5('1234')::uuid`))
	assert.Contains(t, trace, "Index Scan using "+busiest+"_trace_id_span_id_idx", trace)
	assert.NotContains(t, trace, "Seq Scan on "+busiest, trace)

	// A recent window, as queries/ write it: bounded on both sides, so
	// partitions outside it (the default one included) are pruned.
	recent := explain(t, pool, q(name, `SELECT service_name, count(*) FROM S.spans
WHERE start_time > now() - interval '1 hour' AND start_time <= now() GROUP BY 1`))
	now := time.Now().UTC()
	assert.Contains(t, recent, "spans_p"+now.Format("20060102"), recent)
	for _, other := range []string{"spans_default", "spans_p" + now.Add(24*time.Hour).Format("20060102"),
		"spans_p" + now.Add(48*time.Hour).Format("20060102")} {
		assert.NotContains(t, recent, other+" ", "the recent window scans only recent partitions:\n"+recent)
	}
}

// TestFirstSchemaIsPartitioned: the first released schema (one migration)
// makes every signal table partitioned by time with its DEFAULT partition,
// and migrating again applies nothing.
func TestFirstSchemaIsPartitioned(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	res, err := schema.MigrateTo(ctx, conn.Conn(), name, 0)
	require.NoError(t, err)
	require.Equal(t, 0, res.To, "a target of 0 applies nothing")
	res, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	assert.Equal(t, 0, res.From)
	assert.Equal(t, schema.Latest(), res.To)
	assert.Equal(t, 15, schema.Latest(), "001_schema, 002_ai_spend, 003_contexts, 004_service_indexes, 005_ai_partials, 006_ai_partials_live_size, 007_ai_groups_price_once, 008_partition_capture, 009_long_attributes, 010_ai_spend_answers, 011_ai_groups_one_join, 012_ai_partial_hours, 013_ai_hours_once, 014_ai_merge_doubled and 015_partition_moves_default_rows")

	for _, table := range []string{"spans", "logs", "metrics_gauge", "metrics_sum", "metrics_histogram",
		"metrics_exponential_histogram", "metrics_summary"} {
		var partitioned bool
		require.NoError(t, pool.QueryRow(ctx, `SELECT relkind = 'p' FROM pg_class WHERE oid = $1::regclass`,
			pgx.Identifier{name, table + "_rows"}.Sanitize()).Scan(&partitioned))
		assert.True(t, partitioned, table)
		var bound string
		require.NoError(t, pool.QueryRow(ctx, `SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i
			JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass AND c.relname = $2`,
			pgx.Identifier{name, table + "_rows"}.Sanitize(), table+"_default").Scan(&bound))
		assert.Equal(t, "DEFAULT", bound, table)
	}

	res, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	assert.Equal(t, schema.Latest(), res.From, "a second run migrates nothing")
	assert.Equal(t, schema.Latest(), res.To)
}

// TestLeastPrivilegeWriter grants a fresh role exactly WriterGrants and
// checks it can do the exporter's work and nothing more.
func TestLeastPrivilegeWriter(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	role := name + "_writer"
	_, err := pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{role}.Sanitize())
	})
	_, err = pool.Exec(ctx, schema.WriterGrants(name, role))
	require.NoError(t, err)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SET ROLE "+pgx.Identifier{role}.Sanitize())
	require.NoError(t, err)
	defer func() { _, _ = conn.Exec(context.Background(), "RESET ROLE") }()

	want := map[string][]string{"spans_rows": {"span_name", "context_id"}, "contexts": {"context_id"}, "ledger": {"entry_id"}}
	missing, err := schema.Missing(ctx, conn.Conn(), name, want)
	require.NoError(t, err)
	assert.Empty(t, missing)
	_, err = schema.Maintain(ctx, conn.Conn(), name, daily)
	require.NoError(t, err, "maintenance runs through the owner's function")
	var granted, ungranted int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE has_table_privilege(c.oid, 'INSERT')),
		count(*) FILTER (WHERE NOT has_table_privilege(c.oid, 'INSERT'))
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`,
		pgx.Identifier{name, "spans_rows"}.Sanitize()).Scan(&granted, &ungranted))
	assert.Equal(t, 6, granted, "the writer may copy into the partitions of spans_rows, the ones maintenance made too")
	assert.Zero(t, ungranted)
	_, err = conn.Exec(ctx, q(name, `INSERT INTO S.ledger (stream, entry_id) VALUES ('x', 'y')`))
	require.NoError(t, err)
	_, err = conn.Exec(ctx, q(name, `INSERT INTO S.quarantine (stream, entry_id, ledger_key, format, reason, payload)
		VALUES ('x', '1-0', 'y', 'copy1', 'cut table', '\x00ff')`))
	require.NoError(t, err, "an unreadable entry is quarantined by the writer role")

	_, err = conn.Exec(ctx, q(name, `CREATE TABLE S.intruder (x int)`))
	require.ErrorContains(t, err, "permission denied")
	_, err = conn.Exec(ctx, q(name, `DROP TABLE S.spans_rows`))
	require.ErrorContains(t, err, "must be owner")
	_, err = conn.Exec(ctx, q(name, `DELETE FROM S.spans_rows`))
	require.ErrorContains(t, err, "permission denied")
}

// TestPreReleaseSchemaIsRefused: a schema a pre-release build migrated (its
// schema_version names other migrations, e.g. 001_tables.sql) is refused
// with the fix, never taken as this binary's version 1 and built upon.
func TestPreReleaseSchemaIsRefused(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	_, err := pool.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	_, err = pool.Exec(ctx, q(name, `CREATE TABLE S.schema_version (version integer PRIMARY KEY, name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now());
		INSERT INTO S.schema_version (version, name) VALUES (1, '001_tables.sql')`))
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.ErrorIs(t, err, schema.ErrForeignSchema)
	assert.ErrorContains(t, err, "DROP SCHEMA")
	var versions int
	require.NoError(t, pool.QueryRow(ctx, q(name, "SELECT count(*) FROM S.schema_version")).Scan(&versions))
	assert.Equal(t, 1, versions, "nothing was applied on top")
}

// TestUpgradeToContextsKeepsRowsAndGrants: a schema at version 2 with rows
// (their context in each row) and a reader and a writer role migrates to the
// context dictionary: the old rows read the same through the views, the
// reader may read the views and the writer may insert contexts, and the
// partitions keep their names and their maintenance.
func TestUpgradeToContextsKeepsRowsAndGrants(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.MigrateTo(ctx, conn.Conn(), name, 2)
	require.NoError(t, err)
	_, err = schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)
	reader, writer := name+"_reader", name+"_writer"
	for _, r := range []string{reader, writer} {
		_, err = pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{r}.Sanitize())
		require.NoError(t, err)
		t.Cleanup(func() {
			_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{r}.Sanitize())
			_, _ = pool.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{r}.Sanitize())
		})
	}
	_, err = pool.Exec(ctx, q(name, `GRANT USAGE ON SCHEMA `+pgx.Identifier{name}.Sanitize()+` TO `+pgx.Identifier{reader}.Sanitize()+`, `+pgx.Identifier{writer}.Sanitize()+`;
GRANT SELECT ON S.spans TO `+pgx.Identifier{reader}.Sanitize()+`;
GRANT INSERT ON S.spans TO `+pgx.Identifier{writer}.Sanitize()+`;
INSERT INTO S.spans (start_time, start_time_frac_ns, end_time, duration_ns, flags, service_name, span_name, span_kind, status_code,
  span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  scope_name, resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
SELECT now() - (i || ' minutes')::interval, 0, now(), 1, 0, 'svc', 'op' || i, 'Server', 'Ok', '{"k": 1}', 0, 0, 0,
  'sc', '{"service.name": "svc", "host": "h"}', '{}', 2, 0 FROM generate_series(1, 100) i`))
	require.NoError(t, err)
	read := func(table string) string {
		var s string
		require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT string_agg(t::text, E'\n' ORDER BY t::text) FROM S.`+table+` t`)).Scan(&s))
		return s
	}
	before := read("spans")

	res, err := schema.MigrateTo(ctx, conn.Conn(), name, 3)
	require.NoError(t, err)
	require.Equal(t, 2, res.From)
	require.Equal(t, 3, res.To)
	assert.Equal(t, before, read("spans"), "the old rows read the same through the view")
	var relkind string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT relkind::text FROM pg_class WHERE oid = 'S.spans'::regclass`)).Scan(&relkind))
	assert.Equal(t, "v", relkind)

	for _, c := range []struct{ role, sql string }{
		{reader, `SELECT count(*) FROM S.spans`},
		{writer, `INSERT INTO S.contexts (context_id, resource_attributes, scope_attributes,
			resource_dropped_attributes_count, scope_dropped_attributes_count) VALUES (md5('x')::uuid, '{}', '{}', 0, 0)`},
		{writer, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags, span_name, span_kind,
			status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count, context_id)
			VALUES (now(), 0, now(), 1, 0, 'new', 'Server', 'Ok', '{}', 0, 0, 0, md5('x')::uuid)`},
	} {
		tx, err := pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, "SET LOCAL ROLE "+pgx.Identifier{c.role}.Sanitize())
		require.NoError(t, err)
		_, err = tx.Exec(ctx, q(name, c.sql))
		require.NoError(t, err, "%s: %s", c.role, c.sql)
		require.NoError(t, tx.Commit(ctx))
	}
	var res0 string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT resource_attributes::text FROM S.spans WHERE span_name = 'new'`)).Scan(&res0))
	assert.Equal(t, "{}", res0, "a new row reads its context from the dictionary")

	actions, err := schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: 24 * time.Hour, Premake: 5})
	require.NoError(t, err)
	require.NotEmpty(t, actions)
	for _, a := range actions {
		if strings.HasPrefix(a.Partition, "spans") {
			assert.Regexp(t, `^spans_p\d{8}_0000$`, a.Partition)
			assert.Equal(t, "created", a.Action, a.Detail)
		}
	}
	assert.Contains(t, partitions(t, pool, name), "spans_default", "the partitions moved with their table")
}

// TestUpgradeDropsServiceIndexes: schema 4 no longer writes the two
// per-service indexes that no query of queries/ uses: an existing install
// loses them at the upgrade and keeps the rest of its index set.
func TestUpgradeDropsServiceIndexes(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.MigrateTo(ctx, conn.Conn(), name, 3)
	require.NoError(t, err)
	// Schema 3's index set: today's, with the two service indexes.
	_, err = pool.Exec(ctx, q(name, `CREATE INDEX spans_service_time_idx ON S.spans_rows (service_name, start_time);
CREATE INDEX logs_service_severity_time_idx ON S.logs_rows (service_name, severity_number, "timestamp")`))
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	_, err = schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)
	indexes := func() []string {
		rows, err := pool.Query(ctx, `SELECT i.relname::text FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid
JOIN pg_class c ON c.oid = x.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname IN ('spans_rows', 'logs_rows') ORDER BY 1`, name)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return out
	}
	require.Contains(t, indexes(), "spans_service_time_idx")

	res, err := schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.Equal(t, 3, res.From)
	require.Equal(t, schema.Latest(), res.To)
	assert.Equal(t, []string{"logs_trace_idx", "spans_errors_idx", "spans_service_start_idx", "spans_start_time_brin", "spans_trace_span_idx"}, indexes())
	var leftover int
	// The schema's indexes first (OFFSET 0 keeps the filter below them): an
	// index of another test's schema dropped meanwhile has no definition.
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relkind IN ('i', 'I') OFFSET 0) i, pg_get_indexdef(i.oid) d
WHERE d LIKE '%(service_name, start_time)' OR d LIKE '%(service_name, severity_number%'`, name).Scan(&leftover))
	assert.Zero(t, leftover, "the partitions' copies went with their parent's index")
}
