package schema_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// insertSpanAt inserts one span named name that starts at ts (UTC).
func insertSpanAt(t *testing.T, pool *pgxpool.Pool, schemaName, name string, ts time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), q(schemaName, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time,
  duration_ns, flags, span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count,
  dropped_links_count, resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES ($1, 0, $1, 0, 0, $2, 'Internal', 'Unset', '{}', 0, 0, 0, '{}', '{}', 0, 0)`), ts, name)
	require.NoError(t, err, "insert span %s at %s", name, ts)
}

// insertLogAt inserts one log record whose body is name, at ts (UTC).
func insertLogAt(t *testing.T, pool *pgxpool.Pool, schemaName, name string, ts time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), q(schemaName, `INSERT INTO S.logs_rows ("timestamp", timestamp_frac_ns,
  observed_timestamp, observed_timestamp_frac_ns, flags, severity_number, body, log_attributes, dropped_attributes_count,
  resource_attributes, scope_attributes, resource_dropped_attributes_count, scope_dropped_attributes_count)
VALUES ($1, 0, now(), 0, 0, 9, to_jsonb($2::text), '{}', 0, '{}', '{}', 0, 0)`), ts, name)
	require.NoError(t, err, "insert log %s at %s", name, ts)
}

// names returns what sql's first column holds, each value with how many
// rows have it.
func names(t *testing.T, pool *pgxpool.Pool, schemaName, sql string) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), q(schemaName, sql))
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		out[n]++
	}
	require.NoError(t, rows.Err())
	return out
}

func actionOf(actions []schema.Action, partition string) (schema.Action, bool) {
	for _, a := range actions {
		if a.Partition == partition {
			return a, true
		}
	}
	return schema.Action{}, false
}

// TestFarFutureRowsMoveIntoTheirPartition: rows dated beyond the partitions
// made ahead wait in the default partition; when maintenance reaches their
// day, the day's partition is made and they move into it, none lost or
// doubled, and the partition is one like the others (indexes, triggers).
func TestFarFutureRowsMoveIntoTheirPartition(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	_, err := schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)

	today := time.Now().UTC().Truncate(24 * time.Hour)
	day6, day7 := today.Add(6*24*time.Hour), today.Add(7*24*time.Hour)
	inDay6 := map[string]time.Time{"a": day6, "b": day6.Add(12 * time.Hour), "c": day7.Add(-time.Microsecond)}
	for n, ts := range inDay6 {
		insertSpanAt(t, pool, name, n, ts)
		insertLogAt(t, pool, name, n, ts)
	}
	others := map[string]time.Time{"next": day7, "later": today.Add(30 * 24 * time.Hour), "zero": time.Unix(0, 0), "today": today.Add(time.Hour)}
	for n, ts := range others {
		insertSpanAt(t, pool, name, n, ts)
		insertLogAt(t, pool, name, n, ts)
	}
	require.Len(t, names(t, pool, name, `SELECT span_name FROM S.spans_default`), 6, "all but today's in the default partition")

	// Maintenance that reaches day 6 (as it will once three days passed).
	reach := daily
	reach.Premake = 6
	actions, err := schema.Maintain(ctx, pool, name, reach)
	require.NoError(t, err)

	for _, tbl := range []struct{ table, col, value string }{{"spans", "start_time", "span_name"}, {"logs", `"timestamp"`, "body #>> '{}'"}} {
		part := tbl.table + "_p" + day6.Format("20060102") + "_0000"
		a, ok := actionOf(actions, part)
		require.True(t, ok, "maintenance made %s: %v", part, actions)
		assert.Equal(t, "created", a.Action, "%s: %s", part, a.Detail)
		assert.Equal(t, fmt.Sprintf("3 rows moved from %s_default", tbl.table), a.Detail)

		var lo, hi time.Time
		require.NoError(t, pool.QueryRow(ctx, `SELECT b[1]::timestamptz, b[2]::timestamptz FROM (
			SELECT regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$') AS b
			FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass AND c.relname = $2) p`,
			pgx.Identifier{name, tbl.table + "_rows"}.Sanitize(), part).Scan(&lo, &hi), "%s is a partition", part)
		assert.True(t, lo.Equal(day6) && hi.Equal(day7), "%s holds [%s, %s), not [%s, %s)", part, day6, day7, lo, hi)

		v := tbl.value
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1},
			names(t, pool, name, `SELECT `+v+` FROM S.`+part), "the day's rows are in its partition, once")
		assert.Empty(t, names(t, pool, name, fmt.Sprintf(`SELECT %s FROM S.%s_default WHERE %s >= '%s' AND %s < '%s'`,
			v, tbl.table, tbl.col, day6.Format(time.RFC3339), tbl.col, day7.Format(time.RFC3339))),
			"nothing of the day is left in the default partition")
		assert.Equal(t, map[string]int{"next": 1, "later": 1, "zero": 1},
			names(t, pool, name, `SELECT `+v+` FROM S.`+tbl.table+`_default`), "the rest stays in the default partition")
		assert.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1, "next": 1, "later": 1, "zero": 1, "today": 1},
			names(t, pool, name, `SELECT `+v+` FROM S.`+tbl.table+`_rows`), "no row lost or doubled")

		// Like a partition made empty: the same indexes and statement
		// triggers, the writer's grants.
		usual := tbl.table + "_p" + today.Add(24*time.Hour).Format("20060102") + "_0000"
		like := func(rel string) (idx []string, trg []string) {
			require.NoError(t, pool.QueryRow(ctx, `SELECT
				coalesce((SELECT array_agg(regexp_replace(pg_get_indexdef(x.indexrelid), '^.* USING ', '') ORDER BY 1) FROM pg_index x WHERE x.indrelid = $1::regclass), '{}'),
				coalesce((SELECT array_agg(tgname::text ORDER BY 1) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal), '{}')`,
				pgx.Identifier{name, rel}.Sanitize()).Scan(&idx, &trg))
			return idx, trg
		}
		wantIdx, wantTrg := like(usual)
		gotIdx, gotTrg := like(part)
		assert.Equal(t, wantIdx, gotIdx, "%s has the indexes of %s", part, usual)
		assert.Equal(t, wantTrg, gotTrg, "%s has the triggers of %s", part, usual)
		assert.NotEmpty(t, gotIdx)
	}

	// Nothing is left to do: a second run changes nothing.
	actions, err = schema.Maintain(ctx, pool, name, reach)
	require.NoError(t, err)
	assert.Empty(t, actions)
}

// TestRetentionJudgesDefaultRowsByTime: with a retention, a row is kept
// while its time is within the retention of the partitions kept: a zero
// (1970) time or one days old is deleted from the default partition at the
// next run, as is one dated more than the retention beyond the partitions
// made ahead; one dated just beyond them is kept (and moves into its
// partition once it is made).
func TestRetentionJudgesDefaultRowsByTime(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	_, err := schema.Maintain(ctx, pool, name, daily)
	require.NoError(t, err)

	now := time.Now().UTC()
	today := now.Truncate(24 * time.Hour)
	ahead := today.Add(time.Duration(daily.Premake+1) * 24 * time.Hour) // the end of the last partition made ahead
	retention := 48 * time.Hour
	for n, ts := range map[string]time.Time{
		"zero":           time.Unix(0, 0),
		"1970":           time.Unix(1, 0),
		"three days old": now.Add(-72 * time.Hour),
		"an hour old":    now.Add(-time.Hour),
		"just ahead":     ahead.Add(time.Hour),
		"last kept":      ahead.Add(retention - time.Microsecond),
		"too far ahead":  ahead.Add(retention),
		"2200":           time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		insertSpanAt(t, pool, name, n, ts)
	}

	keep := daily
	keep.Retention = retention
	actions, err := schema.Maintain(ctx, pool, name, keep)
	require.NoError(t, err)
	a, ok := actionOf(actions, "spans_default")
	require.True(t, ok, "the default partition was pruned: %v", actions)
	assert.Equal(t, schema.Action{Action: "expired", Partition: "spans_default", Detail: "5 rows"}, a)
	assert.Equal(t, map[string]int{"an hour old": 1, "just ahead": 1, "last kept": 1},
		names(t, pool, name, `SELECT span_name FROM S.spans_rows`))
}
