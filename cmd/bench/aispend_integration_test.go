package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/pricing"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// plainTokenCost is queries/token_cost.sql as it read every call raw
// (gen_ai_calls) before the partials: the rewrite must answer the same.
const plainTokenCost = `SELECT date_trunc('day', c.start_time) AS day,
       coalesce(c.dims ->> 'team', c.span_attributes ->> 'team') AS team,
       c.model,
       count(*) AS calls,
       count(*) FILTER (WHERE c.cost_source = 'unpriced') AS unpriced_calls,
       count(*) FILTER (WHERE c.unpriced_reason = 'no_price') AS unpriced_no_price,
       count(*) FILTER (WHERE c.unpriced_reason = 'no_tokens') AS unpriced_no_tokens,
       coalesce(sum(c.input_tokens), 0) AS input_tokens,
       sum(coalesce(c.output_tokens, 0)) AS output_tokens,
       round(sum(c.cost), 6) AS cost_usd
FROM otel.gen_ai_calls c
WHERE c.start_time > now() - interval '7 days' AND c.start_time <= now()
GROUP BY 1, 2, 3
ORDER BY cost_usd DESC NULLS LAST, day, team, model`

// plainHourly is every hour of ai_spend computed from the raw calls, as
// version 2's ai_spend_aggregate did, costs rounded to 12 places (the
// partials divide a group's sum by a million, the raw form each call's).
const plainHourly = `SELECT date_trunc('hour', c.start_time, 'UTC'), c.provider, c.model, c.dims, c.currency,
       count(*),
       count(*) FILTER (WHERE c.cost_source = 'reported'),
       count(*) FILTER (WHERE c.cost_source = 'catalog'),
       count(*) FILTER (WHERE c.cost_source = 'unpriced'),
       count(*) FILTER (WHERE c.status_code = 'Error'),
       coalesce(sum(c.duration_ns), 0)::bigint,
       coalesce(sum(c.input_tokens), 0)::bigint,
       coalesce(sum(c.uncached_input_tokens), 0)::bigint,
       coalesce(sum(c.cache_read_tokens), 0)::bigint,
       coalesce(sum(c.cache_creation_tokens), 0)::bigint,
       coalesce(sum(c.output_tokens), 0)::bigint,
       coalesce(sum(c.reasoning_tokens), 0)::bigint,
       round(coalesce(sum(c.reported_cost), 0), 12),
       round(coalesce(sum(c.computed_cost) FILTER (WHERE c.cost_source = 'catalog'), 0), 12),
       round(coalesce(sum(c.cost), 0), 12)
FROM otel.gen_ai_calls c
GROUP BY 1, 2, 3, 4, 5
ORDER BY 1, 2, 3, 4::text, 5`

// viewHourly reads the same from the ai_spend view (rollup, partials, raw).
const viewHourly = `SELECT hour, provider, model, dims, currency, calls, reported_calls, catalog_calls, unpriced_calls,
       error_calls, duration_ns, input_tokens, uncached_input_tokens, cache_read_tokens, cache_creation_tokens,
       output_tokens, reasoning_tokens, round(reported_cost, 12), round(computed_cost, 12), round(cost, 12)
FROM otel.ai_spend
ORDER BY 1, 2, 3, 4::text, 5`

// aiDims are cost attribution dimensions: team is absent on the calls
// without an agent (token_cost then reads span_attributes' team), service
// comes from the resource (the context dictionary).
var aiDims = []pricing.Dimension{
	{Name: "team", From: []pricing.Source{{Scope: "span", Key: "gen_ai.agent.name"}}},
	{Name: "service", From: []pricing.Source{{Scope: "resource", Key: "service.name"}}},
}

// usersGenerator generates users' rows (seed) from start, into a batch of
// the bench's layout.
func usersGenerator(t *testing.T, users, events int, seed uint64, start time.Time) (*loadgenreceiver.Generator, *rows.Batch) {
	t.Helper()
	gen, err := loadgenreceiver.NewWorkerGenerator(loadgenConfig(users, events, seed, 1), start, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := &rows.Batch{}
	b.SetLayout(benchLayout)
	return gen, b
}

// writeUsers writes users' rows (seed) starting at start through w, with
// ledger ids prefixed by stream when stream is set.
func writeUsers(ctx context.Context, t *testing.T, w *pgwrite.Writer, users, events int, seed uint64, start time.Time, stream string) {
	t.Helper()
	gen, b := usersGenerator(t, users, events, seed, start)
	var err error
	for n, more := 0, true; more; n++ {
		b.Reset()
		more = addNext(gen, b)
		if b.TotalRows() == 0 {
			continue
		}
		if stream == "" {
			_, err = w.Write(ctx, b)
		} else {
			_, err = w.WriteLedgered(ctx, b, &pgwrite.Ledger{Stream: stream, IDs: []string{stream + "-" + time.Duration(n).String()}})
		}
		if err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// writeUnreported writes users' model calls without the cost their spans
// report, spans only: each is then priced from the catalog, so the catalog
// rows' ranking decides many calls' cost, not a handful.
func writeUnreported(ctx context.Context, t *testing.T, w *pgwrite.Writer, users, events int, seed uint64, start time.Time) {
	t.Helper()
	gen, b := usersGenerator(t, users, events, seed, start)
	for {
		td, ok := gen.NextTraces()
		if !ok {
			return
		}
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					for _, k := range []string{"gen_ai.usage.cost", "gen_ai.usage.cost_usd", "llm.usage.cost", "cost_usd"} {
						sp.Attributes().Remove(k)
					}
				}
			}
		}
		b.Reset()
		b.AddTraces(td)
		if _, err := w.Write(ctx, b); err != nil {
			t.Fatalf("write: %v", err)
		}
	}
}

// aiIdentity compares the rewritten AI queries with their raw forms on s.
// schemaAt makes schema s as a collector of schema version v left it, with
// the bench's promoted columns, partitions and AI spend dimensions dims.
func schemaAt(ctx context.Context, t *testing.T, pool *pgxpool.Pool, conn *pgx.Conn, s string, v int, dims []pricing.Dimension) {
	t.Helper()
	if _, err := schema.MigrateTo(ctx, conn, s, v); err != nil {
		t.Fatal(err)
	}
	if err := schema.AddColumns(ctx, conn, s, schema.PromotedColumns(benchLayout)); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.Maintain(ctx, conn, s, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	if err := pricing.Configure(ctx, pool, s, dims, 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	if v < 9 {
		// This release's rows hold long strings in the columns version 9
		// adds; an older release wrote them into the jsonb, which reads
		// the same through version 9's views. Added last, the views of v
		// do not show them, as version 9 expects.
		for _, c := range [][2]string{{"spans_rows", "span_attributes"}, {"logs_rows", "log_attributes"}} {
			if _, err := conn.Exec(ctx, "ALTER TABLE "+schema.Qualified(s, c[0])+" ADD COLUMN "+
				pgx.Identifier{c[1] + tables.LongSuffix}.Sanitize()+" text[]"); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func aiIdentity(ctx context.Context, t *testing.T, pool *pgxpool.Pool, s string, hourly bool) {
	t.Helper()
	rowsOf := func(sql string) []string {
		out, err := queryRows(ctx, pool, schemaRef.ReplaceAllString(sql, pgx.Identifier{s}.Sanitize()+".$1"))
		if err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return out
	}
	qs, err := loadQueries("../../queries", s)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(qs, func(q query) bool { return q.Name == "token_cost" })
	got, want := rowsOf(qs[i].SQL), rowsOf(plainTokenCost)
	if len(want) < 2 {
		t.Fatalf("token_cost: %d rows, too few to compare", len(want))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("token_cost differs from the raw calls:\ngot:  %q\nwant: %q", got, want)
	}
	// A window that starts and ends inside groups (a fraction of a second
	// past a call's minute): those minutes are read raw.
	var lo, hi time.Time
	if err := pool.QueryRow(ctx, "SELECT percentile_disc(0.3) WITHIN GROUP (ORDER BY start_time) + interval '0.37 seconds', "+
		"percentile_disc(0.8) WITHIN GROUP (ORDER BY start_time) + interval '0.61 seconds' FROM "+
		pgx.Identifier{s, "gen_ai_spans"}.Sanitize()).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ incl, hourly bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		incl := c.incl
		got, want := rowsOf(fmt.Sprintf(`SELECT model, team, span_kind, sum(calls)::bigint, sum(unpriced_calls)::bigint, sum(catalog_calls)::bigint,
       sum(input_tokens)::bigint, sum(output_tokens)::bigint, round(sum(cost), 10), min(currency)
FROM otel.ai_spend_groups('%[1]s', %[3]t, '%[2]s', %[3]t, true, %[4]t) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`, lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano), incl, c.hourly)),
			rowsOf(fmt.Sprintf(`SELECT model, coalesce(dims ->> 'team', span_attributes ->> 'team'), span_kind, count(*),
       count(*) FILTER (WHERE cost_source = 'unpriced'), count(*) FILTER (WHERE cost_source = 'catalog'),
       coalesce(sum(input_tokens), 0)::bigint, coalesce(sum(output_tokens), 0)::bigint, round(sum(cost), 10), min(currency)
FROM otel.gen_ai_calls WHERE start_time %[3]s '%[1]s' AND start_time %[4]s '%[2]s' GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
				lo.Format(time.RFC3339Nano), hi.Format(time.RFC3339Nano), map[bool]string{true: ">=", false: ">"}[incl], map[bool]string{true: "<=", false: "<"}[incl]))
		if len(want) < 2 || !slices.Equal(got, want) {
			t.Fatalf("ai_spend_groups(%s, %s, hourly %t) differs from the raw calls:\ngot:  %q\nwant: %q", lo, hi, c.hourly, got, want)
		}
	}
	hoursSumMinutes(ctx, t, pool, s)
	tokenCostInZone(ctx, t, pool, s, qs[i].SQL, false)
	if hourly {
		got, want := rowsOf(viewHourly), rowsOf(plainHourly)
		if !slices.Equal(got, want) {
			t.Fatalf("ai_spend differs from the raw calls:\ngot:  %q\nwant: %q", got, want)
		}
	}
}

// hoursSumMinutes checks that every hour row of ai_spend_partial_hour sums
// its group's minute rows of that hour in ai_spend_partial.
func hoursSumMinutes(ctx context.Context, t *testing.T, pool *pgxpool.Pool, s string) {
	t.Helper()
	const sums = `, provider, model, dims, team, span_kind, has_input, has_tokens, reported, min(min_start), max(max_start),
       sum(calls), sum(error_calls), sum(duration_ns), sum(input_tokens), sum(uncached_input_tokens), sum(cache_read_tokens),
       sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens), sum(priced_output_tokens),
       sum(priced_reasoning_tokens), sum(reported_cost)`
	const group = ` GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9 ORDER BY 1, 2, 3, 4::text, 5, 6, 7, 8, 9`
	q := func(sql string) []string {
		t.Helper()
		out, err := queryRows(ctx, pool, strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+"."))
		if err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return out
	}
	hours := q("SELECT hour" + sums + " FROM S.ai_spend_partial_hour" + group)
	minutes := q("SELECT date_trunc('hour', minute, 'UTC')" + sums + " FROM S.ai_spend_partial" + group)
	if !slices.Equal(hours, minutes) {
		t.Fatalf("ai_spend_partial_hour does not sum the minutes of ai_spend_partial:\nhours:   %q\nminutes: %q", hours, minutes)
	}
}

// tokenCostInZone runs the token cost query (sql) in one transaction of a
// session whose time zone puts a day boundary at a minute between the calls
// of the busiest hour: that hour must be read from its minutes, and the
// answer be the raw calls'. With hoursRead it also checks that the query
// read hour rows (the hours the window holds whole), not every minute row.
func tokenCostInZone(ctx context.Context, t *testing.T, pool *pgxpool.Pool, s, sql string, hoursRead bool) {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	rowsOf := func(sql string) []string {
		t.Helper()
		out, err := queryRows(ctx, tx, schemaRef.ReplaceAllString(sql, pgx.Identifier{s}.Sanitize()+".$1"))
		if err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
		return out
	}
	// The offset (within ±12 hours) that makes local midnight the minute
	// halfway through that hour's calls.
	var minutes int
	if err := tx.QueryRow(ctx, `SELECT extract(epoch FROM CASE WHEN o > interval '12 hours' THEN o - interval '24 hours' ELSE o END)::int / 60
FROM (SELECT interval '24 hours' - (date_trunc('minute', min(start_time) + (max(start_time) - min(start_time)) / 2) AT TIME ZONE 'UTC')::time AS o
      FROM `+pgx.Identifier{s, "gen_ai_spans"}.Sanitize()+` GROUP BY date_trunc('hour', start_time, 'UTC')
      HAVING max(start_time) - min(start_time) > interval '2 minutes' ORDER BY count(*) DESC LIMIT 1) x`).Scan(&minutes); err != nil {
		t.Fatal(err)
	}
	sign := "+"
	if minutes < 0 {
		sign, minutes = "-", -minutes
	}
	offset := fmt.Sprintf("%s%02d:%02d", sign, minutes/60, minutes%60)
	if _, err := tx.Exec(ctx, "SET LOCAL TIME ZONE INTERVAL '"+offset+"' HOUR TO MINUTE"); err != nil {
		t.Fatalf("time zone %s: %v", offset, err)
	}
	if days := rowsOf(`SELECT DISTINCT date_trunc('day', start_time) FROM otel.gen_ai_calls`); len(days) < 2 {
		t.Fatalf("the calls fall in %d day of time zone %s: no day boundary inside an hour to test", len(days), offset)
	}
	got, want := rowsOf(sql), rowsOf(plainTokenCost)
	if !slices.Equal(got, want) {
		t.Fatalf("token_cost in time zone %s differs from the raw calls:\ngot:  %q\nwant: %q", offset, got, want)
	}
	if !hoursRead {
		return
	}
	// Which rows answered: each row read of a table adds a million calls
	// to the answer when every row of it has a million more.
	calls := func() int64 {
		t.Helper()
		var n int64
		if err := tx.QueryRow(ctx, "SELECT sum(calls)::bigint FROM ("+schemaRef.ReplaceAllString(strings.TrimSuffix(strings.TrimSpace(sql), ";"), pgx.Identifier{s}.Sanitize()+".$1")+") x").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	read := func(table string) int64 {
		t.Helper()
		if _, err := tx.Exec(ctx, "SAVEPOINT bumped; UPDATE "+pgx.Identifier{s, table}.Sanitize()+" SET calls = calls + 1000000"); err != nil {
			t.Fatal(err)
		}
		n := calls()
		if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT bumped"); err != nil {
			t.Fatal(err)
		}
		return n
	}
	var minuteRows int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s, "ai_spend_partial"}.Sanitize()).Scan(&minuteRows); err != nil {
		t.Fatal(err)
	}
	base := calls()
	hourReads, minuteReads := (read("ai_spend_partial_hour")-base)/1000000, (read("ai_spend_partial")-base)/1000000
	if hourReads == 0 || minuteReads >= minuteRows {
		t.Fatalf("the token cost read %d hour rows and %d minute rows of %d: the hours do not answer for the whole hours",
			hourReads, minuteReads, minuteRows)
	}
	t.Logf("token cost in time zone %s: %d hour rows and %d of %d minute rows read", offset, hourReads, minuteReads, minuteRows)
}

// TestAISpendPartialsSame: the AI spend read from the partials the capture
// trigger keeps answers as the raw calls do, through refused rows, a batch
// written twice, prices that change inside the window (off the minute, on
// a fraction of a second: inside groups), windows that start and end inside
// groups, late spans for an hour already rolled up, and
// a dimension some calls lack.
func TestAISpendPartialsSame(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s := preparedSchema(ctx, t, pool)
	if err := pricing.Configure(ctx, pool, s, aiDims, 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+"."), args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(sql string) int64 {
		t.Helper()
		var n int64
		if err := pool.QueryRow(ctx, strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+".")).Scan(&n); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return n
	}
	w := pgwrite.NewLayoutWriter(pool, s, benchLayout)
	past := time.Now().Add(-3 * time.Hour).Truncate(time.Hour).Add(10 * time.Minute)

	// Refused rows: a seventh of the calls break a constraint and go to
	// rejects; the partials must not count them.
	exec("ALTER TABLE S.spans_rows ADD CONSTRAINT refuse_some CHECK (gen_ai_input_tokens IS NULL OR gen_ai_input_tokens % 7 <> 3)")
	writeUsers(ctx, t, w, 2, 600, 1, past, "")
	exec("ALTER TABLE S.spans_rows DROP CONSTRAINT refuse_some")
	if n := count("SELECT count(*) FROM S.rejects WHERE table_name = 'spans'"); n == 0 {
		t.Fatal("no span was refused")
	}
	writeUsers(ctx, t, w, 2, 600, 2, time.Now().Add(-2*time.Minute), "")
	writeUnreported(ctx, t, w, 3, 600, 6, time.Now().Add(-90*time.Minute))
	if n := count("SELECT count(*) FROM S.ai_spend_partial"); n == 0 {
		t.Fatal("the capture trigger kept no partials")
	}
	if n := count("SELECT count(*) FROM S.ai_spend_settings WHERE partial_from = '-infinity'"); n != 1 {
		t.Fatal("partials do not cover the schema's every call")
	}

	// A batch written twice under the same ledger id: once only.
	gen, err := loadgenreceiver.NewWorkerGenerator(loadgenConfig(1, 300, 3, 1), time.Now().Add(-time.Minute), 0)
	if err != nil {
		t.Fatal(err)
	}
	var b rows.Batch
	b.SetLayout(benchLayout)
	addNext(gen, &b)
	l := &pgwrite.Ledger{Stream: "retry", IDs: []string{"1-0"}}
	if _, err := w.WriteLedgered(ctx, &b, l); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WriteLedgered(ctx, &b, l); !errors.Is(err, pgwrite.ErrAlreadyCommitted) {
		t.Fatalf("second write: %v, want ErrAlreadyCommitted", err)
	}

	// Prices: every model at one rate, another from an instant between two
	// calls of one group (same minute, model and dimensions), and one model
	// dearer from a fraction of a second later.
	var mid time.Time
	if err := pool.QueryRow(ctx, "SELECT lo + (hi - lo) / 2 FROM (SELECT min(start_time) AS lo, max(start_time) AS hi FROM "+
		pgx.Identifier{s, "gen_ai_spans"}.Sanitize()+" WHERE input_tokens IS NOT NULL AND reported_cost IS NULL AND span_kind = 'Client'"+
		" GROUP BY date_trunc('minute', start_time), provider, model, dims HAVING min(start_time) < max(start_time) ORDER BY count(*) DESC LIMIT 1) x").Scan(&mid); err != nil {
		t.Fatal(err)
	}
	exec("DELETE FROM S.model_prices")
	exec("INSERT INTO S.model_prices (model, match, input_per_mtok, output_per_mtok, valid_to) VALUES ('%', 'pattern', 1.25, 5, $1)", mid)
	exec("INSERT INTO S.model_prices (model, match, input_per_mtok, output_per_mtok, cache_read_per_mtok, reasoning_per_mtok, valid_from) VALUES ('%', 'pattern', 2.5, 10, 0.3, 12, $1)", mid)
	exec(`INSERT INTO S.model_prices (model, input_per_mtok, output_per_mtok, valid_from)
	      SELECT model, 7, 21, $1::timestamptz + interval '1.5 seconds' FROM S.gen_ai_spans WHERE model IS NOT NULL
	      GROUP BY model ORDER BY count(*) DESC LIMIT 1`, mid)
	// Ranking among the rows that match one provider and model: the
	// provider with the most calls priced from the catalog gets its own
	// catch-all, which wins over the unnamed ones (as long, and older); its
	// busiest model an exact price from halfway through its calls, which
	// wins over the catch-all; a row of another provider never applies.
	const unreported = "S.gen_ai_spans WHERE reported_cost IS NULL AND input_tokens IS NOT NULL AND provider IS NOT NULL"
	exec(`INSERT INTO S.model_prices (provider, model, match, input_per_mtok, output_per_mtok)
	      SELECT provider, '%', 'pattern', 3, 9 FROM ` + unreported + ` GROUP BY provider ORDER BY count(*) DESC LIMIT 1`)
	exec(`INSERT INTO S.model_prices (model, input_per_mtok, output_per_mtok, valid_from)
	      SELECT model, 0.5, 1.5, min(start_time) + (max(start_time) - min(start_time)) / 2 FROM ` + unreported + ` AND model IS NOT NULL AND provider = (
	          SELECT provider FROM ` + unreported + ` GROUP BY provider ORDER BY count(*) DESC LIMIT 1)
	      GROUP BY model ORDER BY count(*) DESC LIMIT 1`)
	if n := count("SELECT count(*) FROM S.gen_ai_calls WHERE price_id IN (SELECT id FROM S.model_prices WHERE provider IS NOT NULL OR valid_from > '-infinity' AND match = 'exact')"); n < 50 {
		t.Fatalf("%d calls priced by the provider's catch-all or the exact row: too few to check the ranking", n)
	}
	exec(`INSERT INTO S.model_prices (provider, model, input_per_mtok, output_per_mtok)
	      SELECT 'nobody', model, 100, 100 FROM S.gen_ai_spans WHERE model IS NOT NULL GROUP BY model ORDER BY count(*) DESC LIMIT 3`)
	if n := count("SELECT count(*) FROM S.gen_ai_calls WHERE cost_source = 'unpriced'"); n == 0 {
		t.Log("no unpriced call: the test data has none")
	}
	// ai_spend shows the hours before the last run's once a run rolls them up.
	aiIdentity(ctx, t, pool, s, false)

	// The rollup takes the past hour; then late spans arrive for it.
	if _, err := schema.Maintain(ctx, pool, s, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	if n := count("SELECT count(*) FROM S.ai_spend_hourly"); n == 0 {
		t.Fatal("nothing rolled up")
	}
	aiIdentity(ctx, t, pool, s, true)
	writeUsers(ctx, t, w, 1, 300, 4, past.Add(5*time.Minute), "late")
	aiIdentity(ctx, t, pool, s, true) // ai_spend shows late spans at once (the late window is read live)
	if _, err := schema.Maintain(ctx, pool, s, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	aiIdentity(ctx, t, pool, s, true)

	// A reconfiguration recomputes: calls before it are read raw.
	if err := pricing.Configure(ctx, pool, s, aiDims[1:], 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	aiIdentity(ctx, t, pool, s, false)
	writeUsers(ctx, t, w, 1, 300, 5, time.Now().Add(-time.Minute), "")
	aiIdentity(ctx, t, pool, s, false)
}

// TestAISpendHoursAnswer: the token cost reads whole hours from
// ai_spend_partial_hour, not their minutes, and answers as the raw calls
// do, with an hour cut by a price from a whole minute (read from its
// minutes: an hour row's calls would straddle it) and by a day boundary of
// the session's time zone; the hours stay the sums of the minutes through
// the capture, merges and a maintenance run.
func TestAISpendHoursAnswer(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s := preparedSchema(ctx, t, pool)
	if err := pricing.Configure(ctx, pool, s, aiDims, 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+".")); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	w := pgwrite.NewLayoutWriter(pool, s, benchLayout)
	now := time.Now()
	writeUnreported(ctx, t, w, 3, 600, 7, now.Add(-5*time.Hour))
	writeUnreported(ctx, t, w, 3, 600, 8, now.Add(-2*time.Hour))
	exec("DELETE FROM S.model_prices")
	exec("INSERT INTO S.model_prices (model, match, input_per_mtok, output_per_mtok) VALUES ('%', 'pattern', 1.25, 5)")
	// The busiest model dearer from the minute halfway through the calls
	// of its busiest hour.
	exec(`INSERT INTO S.model_prices (model, input_per_mtok, output_per_mtok, valid_from)
	      SELECT model, 7, 21, date_trunc('minute', min(start_time) + (max(start_time) - min(start_time)) / 2)
	      FROM S.gen_ai_spans WHERE model IS NOT NULL AND input_tokens IS NOT NULL
	      GROUP BY model, date_trunc('hour', start_time) ORDER BY count(*) DESC LIMIT 1`)
	hoursSumMinutes(ctx, t, pool, s)
	aiIdentity(ctx, t, pool, s, false)
	qs, err := loadQueries("../../queries", s)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(qs, func(q query) bool { return q.Name == "token_cost" })
	tokenCostInZone(ctx, t, pool, s, qs[i].SQL, true)

	if _, err := schema.Maintain(ctx, pool, s, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	aiIdentity(ctx, t, pool, s, true)
	tokenCostInZone(ctx, t, pool, s, qs[i].SQL, true)

	// The retention (postgrescopy_maintain's) deletes the partials of the
	// minutes before a time in the second hour of calls: the first hour
	// goes, the second is remade from the minutes left.
	var cut time.Time
	var hoursBefore int64
	if err := pool.QueryRow(ctx, "SELECT h + interval '7 minutes 0.5 seconds' FROM (SELECT DISTINCT date_trunc('hour', minute, 'UTC') AS h FROM "+
		pgx.Identifier{s, "ai_spend_partial"}.Sanitize()+" ORDER BY 1 OFFSET 1 LIMIT 1) x").Scan(&cut); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s, "ai_spend_partial_hour"}.Sanitize()+
		" WHERE hour < date_trunc('hour', $1::timestamptz, 'UTC')", cut).Scan(&hoursBefore); err != nil {
		t.Fatal(err)
	}
	exec("SELECT S.postgrescopy_ai_partials_expire('" + cut.Format(time.RFC3339Nano) + "')")
	var minutesLeft, hoursLeft int64
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM "+pgx.Identifier{s, "ai_spend_partial"}.Sanitize()+" WHERE minute < $1), "+
		"(SELECT count(*) FROM "+pgx.Identifier{s, "ai_spend_partial_hour"}.Sanitize()+" WHERE hour < date_trunc('hour', $1::timestamptz, 'UTC'))", cut).Scan(&minutesLeft, &hoursLeft); err != nil {
		t.Fatal(err)
	}
	if hoursBefore == 0 || minutesLeft != 0 || hoursLeft != 0 {
		t.Fatalf("expiring the partials before %s: %d hour rows before its hour, then %d minute rows and %d hour rows left before it",
			cut, hoursBefore, minutesLeft, hoursLeft)
	}
	hoursSumMinutes(ctx, t, pool, s)
}

// TestAISpendPartialsAfterUpgrade: a schema upgraded from version 4 with
// rows in it answers as the raw calls do, the rows of before the upgrade
// read raw and those after from the partials.
func TestAISpendPartialsAfterUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	schemaAt(ctx, t, pool, conn.Conn(), s, 4, aiDims)
	if _, err := pool.Exec(ctx, "INSERT INTO "+pgx.Identifier{s, "model_prices"}.Sanitize()+
		" (model, match, input_per_mtok, output_per_mtok) VALUES ('gpt-%', 'pattern', 2.5, 10)"); err != nil {
		t.Fatal(err)
	}
	w := pgwrite.NewLayoutWriter(pool, s, benchLayout)
	writeUsers(ctx, t, w, 2, 600, 1, time.Now().Add(-3*time.Minute), "")
	if _, err := schema.Migrate(ctx, conn.Conn(), s); err != nil {
		t.Fatal(err)
	}
	aiIdentity(ctx, t, pool, s, false)
	writeUsers(ctx, t, w, 2, 600, 2, time.Now().Add(-time.Minute), "")
	var n int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{s, "ai_spend_partial"}.Sanitize()).Scan(&n); err != nil || n == 0 {
		t.Fatalf("no partials after the upgrade (%d, %v)", n, err)
	}
	aiIdentity(ctx, t, pool, s, false)
	if _, err := schema.Maintain(ctx, conn.Conn(), s, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	aiIdentity(ctx, t, pool, s, true)
}

// TestAISpendPartialsStayMerged: after a merge has shrunk ai_spend_partial
// far below the size its last ANALYZE saw, the next COPYs still merge about
// once the table doubled. Schema 5 sized the table by pg_class.reltuples:
// merges came as many times too seldom as the table had shrunk, and a
// sustained run's partials grew to 44 rows per group and minute. The capture
// function generated under schema 5 is rewritten by the upgrade, and one
// generated after it (a reconfiguration) sizes the table the same way.
func TestAISpendPartialsStayMerged(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s := pgtest.Schema(t, pool)
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	// One connection throughout: each statement below asks for its
	// statistics to be flushed as it ends, so that the next one reads them.
	conn := pc.Conn()
	schemaAt(ctx, t, pool, conn, s, 5, nil)
	capture := func() string {
		t.Helper()
		var def string
		if err := conn.QueryRow(ctx, "SELECT pg_get_functiondef(to_regprocedure($1))", pgx.Identifier{s, "postgrescopy_ai_capture"}.Sanitize()+"()").Scan(&def); err != nil {
			t.Fatal(err)
		}
		return def
	}
	if !strings.Contains(capture(), "c.reltuples") {
		t.Fatal("schema 5's capture function does not read reltuples: the upgrade below tests nothing")
	}
	if _, err := schema.Migrate(ctx, conn, s); err != nil {
		t.Fatal(err)
	}
	if def := capture(); strings.Contains(def, "reltuples") || !strings.Contains(def, ".postgrescopy_ai_merge(n)") {
		t.Fatalf("the upgrade left the capture function as it was:\n%s", def)
	}
	if err := pricing.Configure(ctx, pool, s, aiDims[:1], 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	if def := capture(); !strings.Contains(def, ".postgrescopy_ai_merge(n)") || !strings.Contains(def, "gen_ai.agent.name") {
		t.Fatalf("a capture function generated after the upgrade does not merge by the live rows, or kept the old dimensions:\n%s", def)
	}
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+".")+"; SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	count := func(sql string) int64 { t.Helper(); return connCount(ctx, t, conn, s, sql) }
	// The state a merge leaves: ANALYZE saw 400,000 rows, the merge then
	// deleted them (rows of two days ago here, outside the late window).
	exec("ALTER TABLE S.ai_spend_partial SET (autovacuum_enabled = false)")
	exec(`INSERT INTO S.ai_spend_partial (minute, min_start, max_start, dims, has_input, has_tokens, reported, calls, error_calls,
	duration_ns, input_tokens, uncached_input_tokens, cache_read_tokens, cache_creation_tokens, output_tokens, reasoning_tokens,
	priced_output_tokens, priced_reasoning_tokens, reported_cost)
SELECT m, m, m, '{}', true, true, false, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
FROM (SELECT date_trunc('minute', now()) - interval '2 days' - g * interval '1 second' AS m FROM generate_series(1, 400000) g) x`)
	exec("ANALYZE S.ai_spend_partial")
	exec("DELETE FROM S.ai_spend_partial")

	// 20 statements, each with a call of 4 models in each of the last 300
	// minutes: 1,200 new partial rows each, the same 1,200 groups.
	const statements, groups = 20, 4 * 300
	for range statements {
		exec(aiCallsSQL(300))
	}
	if n := count("SELECT sum(calls)::bigint FROM S.ai_spend_partial"); n != statements*groups {
		t.Fatalf("the partials hold %d calls, want %d", n, statements*groups)
	}
	if n := count("SELECT count(*) FROM S.ai_spend_partial"); n > 2*groups {
		t.Fatalf("%d partial rows for %d groups after %d statements: merges did not follow the table's live size", n, groups, statements)
	}
}

// TestAISpendPartialsMergedAtDouble: a COPY merges the AI spend partials
// every time they have doubled since the last merge, not by chance: after
// each of 300 statements adding a row to each of 600 groups and minutes, the
// table holds at most twice its merged size (at least 1,000 rows), and the
// merges lose and double no call. Schemas 5 to 13
// merged with the chance of a statement's rows over the table's: the table
// reached k times its merged size with a chance of about 1/k each time, and
// a sustained run's partials 30 rows per group and minute.
func TestAISpendPartialsMergedAtDouble(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	s := preparedSchema(ctx, t, pool)
	if err := pricing.Configure(ctx, pool, s, aiDims[:1], 6*time.Hour); err != nil {
		t.Fatal(err)
	}
	pc, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Release()
	// One connection throughout: each statement asks for its statistics to
	// be flushed as it ends (an exporter's connection flushes them within
	// about a second), so that the next one reads them.
	conn := pc.Conn()
	count := func(sql string) int64 { t.Helper(); return connCount(ctx, t, conn, s, sql) }
	const statements, groups, bound = 300, 4 * 150, 2 * 1000
	insert := strings.ReplaceAll(aiCallsSQL(150)+"; SELECT pg_stat_force_next_flush()", "S.", pgx.Identifier{s}.Sanitize()+".")
	rows, largest, merges := int64(0), int64(0), 0
	for range statements {
		if _, err := conn.Exec(ctx, insert); err != nil {
			t.Fatal(err)
		}
		n := count("SELECT count(*) FROM S.ai_spend_partial")
		if n < rows {
			merges++
		}
		rows, largest = n, max(largest, n)
		if n > bound {
			t.Fatalf("ai_spend_partial holds %d rows for %d groups and minutes after %d merges, want at most %d: not merged once it doubled",
				n, groups, merges, bound)
		}
	}
	if n := count("SELECT sum(calls)::bigint FROM S.ai_spend_partial"); n != statements*groups {
		t.Errorf("the partials hold %d calls, want %d", n, statements*groups)
	}
	if merges < statements/5 {
		t.Errorf("%d merges in %d statements of %d rows each", merges, statements, groups)
	}
	t.Logf("%d merges, at most %d rows", merges, largest)
}

// aiCallsSQL inserts into S.spans_rows a call of each of 4 models in each
// of the last minutes minutes, 7 seconds into the minute: a partial row
// per model and minute.
func aiCallsSQL(minutes int) string {
	return fmt.Sprintf(`INSERT INTO S.spans_rows (start_time, start_time_frac_ns, end_time, duration_ns, flags, span_name, span_kind,
	status_code, span_attributes, dropped_attributes_count, dropped_events_count, dropped_links_count,
	gen_ai_provider_name, gen_ai_operation_name, gen_ai_request_model, gen_ai_input_tokens, gen_ai_output_tokens, gen_ai_agent_name)
SELECT t, 0, t, 1000, 0, 'chat', 'Client', 'Unset', '{}', 0, 0, 0, 'openai', 'chat', 'model-' || k, 10, 20, 'team-a'
FROM generate_series(1, %d) m, generate_series(1, 4) k,
     LATERAL (SELECT date_trunc('minute', now()) - m * interval '1 minute' + interval '7 seconds' AS t) x`, minutes)
}

// connCount is sql's single number on conn, S. standing for schema s.
func connCount(ctx context.Context, t *testing.T, conn *pgx.Conn, s, sql string) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(ctx, strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+".")).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}
