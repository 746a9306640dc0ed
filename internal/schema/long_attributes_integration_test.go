package schema_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// viewColumns lists a relation's columns as "name type", in order.
func viewColumns(t *testing.T, pool *pgxpool.Pool, name, rel string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT attname || ' ' || format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, pgx.Identifier{name, rel}.Sanitize())
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

// texts runs sql and returns its rows as text, sorted.
func texts(t *testing.T, pool *pgxpool.Pool, name, sql string) []string {
	t.Helper()
	var out []string
	require.NoError(t, pool.QueryRow(context.Background(),
		q(name, `SELECT coalesce(array_agg(t::text ORDER BY t::text), '{}') FROM (`+sql+`) t`)).Scan(&out), sql)
	return out
}

// genAIColumns are the promoted columns the AI spend views read here (the
// genai preset's, in part).
var genAIColumns = []schema.Column{
	{Table: "spans", Name: "gen_ai_provider_name", Type: "text"},
	{Table: "spans", Name: "gen_ai_request_model", Type: "text"},
	{Table: "spans", Name: "gen_ai_input_tokens", Type: "bigint"},
	{Table: "spans", Name: "gen_ai_output_tokens", Type: "bigint"},
}

// insertGenAI inserts n model calls into table (spans_rows or a partition)
// in one statement: a third with team and project in span_attributes, a
// third with both in span_attributes_long (over 256 bytes), a third with
// project in span_attributes and team in span_attributes_long.
func insertGenAI(t *testing.T, pool *pgxpool.Pool, name, table string, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), q(name, `INSERT INTO S.`+table+` (start_time, start_time_frac_ns, end_time, duration_ns,
  flags, span_name, span_kind, status_code, span_attributes, span_attributes_long,
  dropped_attributes_count, dropped_events_count, dropped_links_count,
  gen_ai_provider_name, gen_ai_request_model, gen_ai_input_tokens, gen_ai_output_tokens)
SELECT now() - (i % 4) * interval '1 minute', 0, now(), 1000, 0, 'chat', 'Client', 'Ok',
  CASE i % 3 WHEN 0 THEN '{"team": "short", "project": "p"}'::jsonb WHEN 1 THEN '{}' ELSE '{"project": "p"}' END,
  CASE i % 3 WHEN 0 THEN NULL WHEN 1 THEN ARRAY['team', repeat('t', 300), 'project', repeat('p', 280)]
       ELSE ARRAY['team', repeat('u', 257)] END,
  0, 0, 0, 'openai', 'gpt-' || (i % 2), 10 * i, i
FROM generate_series(1, $1) i`), n)
	require.NoError(t, err)
}

// TestLongAttributesReadMerged: schema 9 stores long string attributes in
// span_attributes_long and log_attributes_long; the spans and logs views
// show them merged into span_attributes and log_attributes, with the same
// columns as before, and promoted columns are still appended.
func TestLongAttributesReadMerged(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.MigrateTo(ctx, conn.Conn(), name, 8)
	require.NoError(t, err)
	before := map[string][]string{"spans": viewColumns(t, pool, name, "spans"), "logs": viewColumns(t, pool, name, "logs")}
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)

	for view, col := range map[string]string{"spans": "span_attributes_long", "logs": "log_attributes_long"} {
		assert.Contains(t, viewColumns(t, pool, name, view+"_rows"), col+" text[]")
		assert.Equal(t, before[view], viewColumns(t, pool, name, view), "%s keeps its columns, names, order and types", view)
	}

	_, err = pool.Exec(ctx, q(name, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags,
  span_name, span_kind, status_code, span_attributes, span_attributes_long,
  dropped_attributes_count, dropped_events_count, dropped_links_count)
VALUES (now(), 0, now(), 1, 0, 'both', 'Internal', 'Unset', '{"a": "x"}', ARRAY['long.key', repeat('y', 300)], 0, 0, 0),
       (now(), 0, now(), 1, 0, 'only_long', 'Internal', 'Unset', '{}', ARRAY['k1', repeat('p', 300), 'k2', repeat('q', 400)], 0, 0, 0),
       (now(), 0, now(), 1, 0, 'no_long', 'Internal', 'Unset', '{"a": "x", "n": 1}', NULL, 0, 0, 0);
INSERT INTO S.logs_rows ("timestamp", timestamp_frac_ns, observed_timestamp, observed_timestamp_frac_ns, flags,
  severity_number, event_name, log_attributes, log_attributes_long, dropped_attributes_count)
VALUES (now(), 0, now(), 0, 0, 9, 'both', '{"a": "x"}', ARRAY['long.key', repeat('y', 300)], 0),
       (now(), 0, now(), 0, 0, 9, 'only_long', '{}', ARRAY['k1', repeat('p', 300), 'k2', repeat('q', 400)], 0),
       (now(), 0, now(), 0, 0, 9, 'no_long', '{"a": "x", "n": 1}', NULL, 0)`))
	require.NoError(t, err)
	want := map[string]map[string]any{
		"both":      {"a": "x", "long.key": strings.Repeat("y", 300)},
		"only_long": {"k1": strings.Repeat("p", 300), "k2": strings.Repeat("q", 400)},
		"no_long":   {"a": "x", "n": 1},
	}
	check := func(view, col, key string) {
		t.Helper()
		for row, attrs := range want {
			b, err := json.Marshal(attrs)
			require.NoError(t, err)
			var same bool
			var got string
			require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT `+col+` = $1::jsonb, `+col+`::text FROM S.`+view+` WHERE `+key+` = $2`),
				string(b), row).Scan(&same, &got))
			assert.True(t, same, "%s.%s of %s: %s", view, col, row, got)
		}
	}
	check("spans", "span_attributes", "span_name")
	check("logs", "log_attributes", "event_name")

	// A promoted column is appended to the view after the others; the
	// text[] column stays out of it.
	require.NoError(t, schema.AddColumns(ctx, conn.Conn(), name, []schema.Column{{Table: "spans", Name: "http_route", Type: "text"}}))
	assert.Equal(t, append(before["spans"], "http_route text"), viewColumns(t, pool, name, "spans"))
	check("spans", "span_attributes", "span_name")
}

// TestLongAttributesCaptured: the AI spend capture reads a call's team and
// dimensions in span_attributes_long (copied into spans_rows or straight
// into a partition), and so do the partials a forced regeneration
// recomputes: what the partials and ai_spend_groups answer is what the raw
// calls answer.
func TestLongAttributesCaptured(t *testing.T) {
	pool, name := migrated(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	require.NoError(t, schema.AddColumns(ctx, conn.Conn(), name, genAIColumns))
	_, err = pool.Exec(ctx, q(name, `SELECT S.postgrescopy_ai_configure('[{"name": "project", "from": [{"scope": "span", "key": "project"}]}]', NULL)`))
	require.NoError(t, err)

	raw := `SELECT model, dims, coalesce(dims ->> 'team', span_attributes ->> 'team') AS team, count(*),
  coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint FROM S.gen_ai_calls GROUP BY 1, 2, 3`
	partials := `SELECT model, dims, team, sum(calls)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint
FROM S.ai_spend_partial GROUP BY 1, 2, 3`
	groups := `SELECT model, dims, team, sum(calls)::bigint, sum(input_tokens)::bigint, sum(output_tokens)::bigint
FROM S.ai_spend_groups('-infinity', true, 'infinity', true, true) GROUP BY 1, 2, 3`
	same := func(step string) {
		t.Helper()
		want := texts(t, pool, name, raw)
		require.Len(t, want, 6, "%s: two models × three kinds of attributes", step)
		all := strings.Join(want, "\n")
		for _, long := range []string{strings.Repeat("t", 300), strings.Repeat("p", 280), strings.Repeat("u", 257)} {
			require.Contains(t, all, long, "%s: the raw calls read the long values", step)
		}
		assert.Equal(t, want, texts(t, pool, name, partials), "%s: ai_spend_partial", step)
		assert.Equal(t, want, texts(t, pool, name, groups), "%s: ai_spend_groups", step)
	}

	insertGenAI(t, pool, name, "spans_rows", 60)
	insertGenAI(t, pool, name, "spans_default", 12)
	same("captured")

	// A forced regeneration recomputes the partials from this minute on and
	// makes the capture again: both merge the long attributes.
	_, err = pool.Exec(ctx, q(name, `SELECT S.postgrescopy_ai_partials(true)`))
	require.NoError(t, err)
	same("recomputed")
	insertGenAI(t, pool, name, "spans_rows", 30)
	same("captured after the regeneration")
	var def string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT pg_get_functiondef('S.postgrescopy_ai_capture()'::regprocedure)`)).Scan(&def))
	assert.Contains(t, def, "span_attributes_long")
	assert.Contains(t, def, ".postgrescopy_ai_merge(n)", "the merge left to postgrescopy_ai_merge (version 14), which sizes the table by its live rows")
	assert.NotContains(t, def, "reltuples")
}

// TestUpgradeToLongAttributesKeepsPartials: a schema at version 8 with AI
// spend partials migrates to 9 without recomputing them: partial_from stays
// where it was (the earlier minutes keep reading the partials), rows read
// the same through the views, and the capture is remade to read
// span_attributes_long.
func TestUpgradeToLongAttributesKeepsPartials(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.MigrateTo(ctx, conn.Conn(), name, 8)
	require.NoError(t, err)
	require.NoError(t, schema.AddColumns(ctx, conn.Conn(), name, genAIColumns))
	// A span stored before the call view changes: partial_from moves to the
	// minute of the change, not to -infinity; then back an hour, as an
	// install's that has had partials for a while (a recomputation would
	// move it to the present).
	_, err = pool.Exec(ctx, q(name, `INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags,
  span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count)
VALUES (now() - interval '1 hour', 0, now(), 1, 0, 'first', 'Internal', 'Unset', '{"a": "x"}', 0, 0, 0);
SELECT S.postgrescopy_ai_configure('[{"name": "project", "from": [{"scope": "span", "key": "project"}]}]', NULL);
UPDATE S.ai_spend_settings SET partial_from = partial_from - interval '1 hour';
INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags,
  span_name, span_kind, status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
  gen_ai_provider_name, gen_ai_request_model, gen_ai_input_tokens, gen_ai_output_tokens)
SELECT now() + (i % 3) * interval '1 minute', 0, now(), 1000, 0, 'chat', 'Client', 'Ok',
  jsonb_build_object('team', 'team-' || (i % 2), 'project', 'p'), 0, 0, 0, 'openai', 'gpt-' || (i % 2), 10 * i, i
FROM generate_series(1, 40) i;
INSERT INTO S.logs_rows ("timestamp", timestamp_frac_ns, observed_timestamp, observed_timestamp_frac_ns, flags,
  severity_number, event_name, log_attributes, dropped_attributes_count)
VALUES (now(), 0, now(), 0, 0, 9, 'old', '{"a": "x"}', 0)`))
	require.NoError(t, err)
	var from8 string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT partial_from::text FROM S.ai_spend_settings`)).Scan(&from8))
	require.NotContains(t, from8, "infinity", "partials from the minute the call view changed")
	partials := `SELECT minute, min_start, max_start, model, dims, team, calls, input_tokens, output_tokens FROM S.ai_spend_partial`
	spans, logs, parts := texts(t, pool, name, `SELECT * FROM S.spans`), texts(t, pool, name, `SELECT * FROM S.logs`), texts(t, pool, name, partials)
	require.NotEmpty(t, parts)

	res, err := schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.Equal(t, 8, res.From)
	require.Equal(t, schema.Latest(), res.To, "to this release: 9 and 10 recompute no partial")
	var from9 string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT partial_from::text FROM S.ai_spend_settings`)).Scan(&from9))
	assert.Equal(t, from8, from9, "partial_from stays")
	assert.Equal(t, parts, texts(t, pool, name, partials), "the partials are not recomputed")
	// Version 12 fills the hours from the minutes.
	hours := texts(t, pool, name, `SELECT hour, model, dims, team, sum(calls), sum(input_tokens), sum(output_tokens)
FROM S.ai_spend_partial_hour GROUP BY 1, 2, 3, 4`)
	require.NotEmpty(t, hours)
	assert.Equal(t, texts(t, pool, name, `SELECT date_trunc('hour', minute, 'UTC'), model, dims, team, sum(calls), sum(input_tokens), sum(output_tokens)
FROM S.ai_spend_partial GROUP BY 1, 2, 3, 4`), hours, "the hours sum the minutes after the upgrade")
	assert.Equal(t, spans, texts(t, pool, name, `SELECT * FROM S.spans`), "the spans read the same")
	assert.Equal(t, logs, texts(t, pool, name, `SELECT * FROM S.logs`), "the logs read the same")

	var def string
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT pg_get_functiondef('S.postgrescopy_ai_capture()'::regprocedure)`)).Scan(&def))
	assert.Contains(t, def, "span_attributes_long", "the capture is remade")
	assert.Contains(t, def, ".postgrescopy_ai_merge(n)")
	insertGenAI(t, pool, name, "spans_rows", 6)
	var long int
	require.NoError(t, pool.QueryRow(ctx, q(name, `SELECT count(*) FROM S.ai_spend_partial WHERE team = repeat('t', 300)`)).Scan(&long))
	assert.Positive(t, long, "a call written after the upgrade is captured with its long team")
}
