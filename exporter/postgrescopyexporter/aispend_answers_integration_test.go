package postgrescopyexporter

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// spendTotal is what one query or panel reports in total: cost, calls and
// unpriced calls (-1 where it does not report them), and to how many
// decimal places it rounds each row's cost.
type spendTotal struct {
	cost            float64
	calls, unpriced int64
	rows, places    int
}

// shippedQuery reads queries/<name>.sql on schema s.
func shippedQuery(t *testing.T, name, s string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "queries", name+".sql"))
	require.NoError(t, err)
	return strings.ReplaceAll(string(b), "otel.", pgx.Identifier{s}.Sanitize()+".")
}

// numeric reads a query's value as a float (numeric, bigint, float or NULL).
func numeric(v any) float64 {
	switch x := v.(type) {
	case nil:
		return 0
	case int64:
		return float64(x)
	case int32:
		return float64(x)
	case float64:
		return x
	case pgtype.Numeric:
		f, _ := x.Float64Value()
		return f.Float64
	default:
		panic(fmt.Sprintf("unexpected %T", v))
	}
}

// totalOf runs sql and sums its cost column (costCol), calls and
// unpriced_calls.
func totalOf(t *testing.T, pool *pgxpool.Pool, sql, costCol string, places int) spendTotal {
	t.Helper()
	cols, rows, err := queryAll(context.Background(), pool, sql)
	require.NoError(t, err, "%s", sql)
	tot := spendTotal{calls: -1, unpriced: -1, rows: len(rows), places: places}
	for i, c := range cols {
		for _, r := range rows {
			switch c {
			case costCol:
				tot.cost += numeric(r[i])
			case "calls":
				tot.calls += int64(numeric(r[i]))
			case "unpriced_calls":
				tot.unpriced += int64(numeric(r[i]))
			}
		}
		switch c {
		case "calls":
			tot.calls++
		case "unpriced_calls":
			tot.unpriced++
		}
	}
	return tot
}

// dashboardVars expands the dashboard's variables as Grafana does: the
// schema constant, and each query variable at All (its allValue when it
// has one, else its options' values quoted and joined: none when its query
// finds none) or at the one value given in one.
func dashboardVars(t *testing.T, pool *pgxpool.Pool, dash grafanaDashboard, macros grafanaMacros, s string, one map[string]string) map[string]string {
	t.Helper()
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		switch v.Type {
		case "datasource":
		case "constant":
			vars[v.Name] = pgx.Identifier{s}.Sanitize()
		case "query":
			if val, ok := one[v.Name]; ok {
				vars[v.Name] = "'" + val + "'"
				continue
			}
			if v.AllValue != "" {
				vars[v.Name] = v.AllValue
				continue
			}
			q, err := macros.expand(v.Query.(string))
			require.NoError(t, err)
			q, err = expandVariables(q, vars)
			require.NoError(t, err)
			_, rows, err := queryAll(context.Background(), pool, q)
			require.NoError(t, err, "variable %s: %s", v.Name, q)
			var vals []string
			for _, r := range rows {
				vals = append(vals, "'"+strings.ReplaceAll(fmt.Sprint(r[0]), "'", "''")+"'")
			}
			vars[v.Name] = strings.Join(vals, ",")
		default:
			t.Fatalf("variable %s: type %s", v.Name, v.Type)
		}
	}
	return vars
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	raw, err := os.ReadFile("../../dashboards/ai-spend.json")
	require.NoError(t, err)
	var dash grafanaDashboard
	require.NoError(t, json.Unmarshal(raw, &dash))
	return dash
}

func dashboardPanel(t *testing.T, dash grafanaDashboard, title string) string {
	t.Helper()
	var found string
	var walk func([]grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Title == title {
				require.Len(t, p.Targets, 1, title)
				found = p.Targets[0].RawSQL
			}
		}
	}
	walk(dash.Panels)
	require.NotEmpty(t, found, "panel %q", title)
	return found
}

// spendAnswers is every shipped query's and spend panel's total over the
// last 7 days, the dashboard's team variable at All ("") or at team.
func spendAnswers(t *testing.T, pool *pgxpool.Pool, s, team string) map[string]spendTotal {
	t.Helper()
	now := time.Now().UTC()
	q := func(sql string) string { return strings.ReplaceAll(sql, "S.", pgx.Identifier{s}.Sanitize()+".") }
	teamFilter := "true"
	one := map[string]string{}
	if team != "" {
		teamFilter = "dims ->> 'team' = '" + team + "'"
		one["team"] = team
	}
	out := map[string]spendTotal{
		"gen_ai_calls": totalOf(t, pool, q(`SELECT sum(cost) AS cost, count(*) AS calls,
  count(*) FILTER (WHERE cost_source = 'unpriced') AS unpriced_calls
FROM S.gen_ai_calls WHERE start_time > now() - interval '7 days' AND start_time <= now() AND `+teamFilter), "cost", 30),
		"ai_spend": totalOf(t, pool, q(`SELECT sum(cost) AS cost, sum(calls) AS calls, sum(unpriced_calls) AS unpriced_calls
FROM S.ai_spend WHERE hour > now() - interval '7 days' AND hour <= now() AND `+teamFilter), "cost", 30),
	}
	if team == "" {
		out["queries/token_cost.sql"] = totalOf(t, pool, shippedQuery(t, "token_cost", s), "cost_usd", 4)
		out["queries/ai_spend_daily.sql"] = totalOf(t, pool, shippedQuery(t, "ai_spend_daily", s), "cost", 4)
		u := totalOf(t, pool, shippedQuery(t, "ai_unpriced_calls", s), "", 0)
		out["queries/ai_unpriced_calls.sql"] = spendTotal{cost: math.NaN(), calls: -1, unpriced: u.unpriced}
	}
	dash := loadDashboard(t)
	macros := grafanaMacros{from: now.AddDate(0, 0, -7), to: now, interval: time.Hour}
	vars := dashboardVars(t, pool, dash, macros, s, one)
	for _, p := range []struct{ title, cost string }{
		{"Total spend", "cost"}, {"Calls", ""}, {"Spend per day by team", "value"}, {"Spend per day by model", "value"},
		{"Spend by team and model", "cost"}, {"Unpriced calls", ""},
	} {
		sql, err := macros.expand(dashboardPanel(t, dash, p.title))
		require.NoError(t, err)
		sql, err = expandVariables(sql, vars)
		require.NoError(t, err)
		tot := totalOf(t, pool, sql, p.cost, 30)
		if p.title == "Spend by team and model" {
			tot.places = 4
		}
		if p.cost == "" {
			tot.cost = math.NaN()
		}
		if p.title == "Unpriced calls" {
			tot.calls = -1 // the calls of the models with unpriced ones
		}
		out["panel "+p.title] = tot
	}
	return out
}

// assertOneAnswer: every answer has the raw calls' cost (to its rounding),
// calls and unpriced calls (where it reports them).
func assertOneAnswer(t *testing.T, answers map[string]spendTotal, wantCost float64, wantCalls, wantUnpriced int64) {
	t.Helper()
	raw := answers["gen_ai_calls"]
	assert.InDelta(t, wantCost, raw.cost, 1e-12, "the raw calls' cost, by hand")
	assert.Equal(t, wantCalls, raw.calls, "the raw calls")
	assert.Equal(t, wantUnpriced, raw.unpriced, "the raw unpriced calls")
	for name, a := range answers {
		if !math.IsNaN(a.cost) {
			tol := 1e-12 + float64(a.rows)*0.5*math.Pow10(-a.places)
			assert.InDelta(t, raw.cost, a.cost, tol, "%s: cost", name)
		}
		if a.calls >= 0 {
			assert.Equal(t, raw.calls, a.calls, "%s: calls", name)
		}
		if a.unpriced >= 0 {
			assert.Equal(t, raw.unpriced, a.unpriced, "%s: unpriced calls", name)
		}
	}
}

// TestAISpendAnswersAgree: on the same data every shipped query and
// dashboard panel that reports spend gives the raw calls' total, its team
// variable at All and at one team: on a fresh install (nothing yet), with
// calls the rollup has not taken (spans arriving for hours already rolled
// up), after the rollup took them, and with late spans after that. The
// data: the recorded instrumentations' calls (OpenInference's INTERNAL
// spans and calls without tokens among them) and SDK-made calls.
func TestAISpendAnswersAgree(t *testing.T) {
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	cfg, schemaName := aiSpendConfig(t, day.Add(12*time.Hour))
	cfg.CostAttribution.Dimensions = []DimensionConfig{{Name: "team", From: []string{"span:team", "resource:team"}}}
	te := startTracesExporter(t, cfg)
	pool := pgtest.Pool(t)
	ctx := context.Background()

	t.Run("fresh install", func(t *testing.T) {
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, ""), 0, 0, 0)
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, "a"), 0, 0, 0)
	})

	// The SDK calls (TestAISpendFromSDKSpans: 3.903 USD, 8 calls of which
	// 2 unpriced, teams a and b) and the fixtures, which this price file
	// does not price (gpt-4o-mini, text-embedding-3-small): their 16 calls
	// are unpriced, teams search and assistant. Cost 3.903, 24 calls, 18
	// unpriced.
	recordSDKCalls(t, otlpInto(t, te), day)
	for lib, at := range fixtureStarts(day) {
		require.NoError(t, te.ConsumeTraces(ctx, genaiFixture(t, lib, at)), lib)
	}
	t.Run("not rolled up", func(t *testing.T) {
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, ""), 3.903, 24, 18)
		// Team a: 2.475 + 0.549, 3 calls.
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, "a"), 3.024, 3, 0)
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, "search"), 0, 6, 6)
	})

	maintainNow(t, pool, schemaName, 0)
	t.Run("rolled up", func(t *testing.T) {
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, ""), 3.903, 24, 18)
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, "a"), 3.024, 3, 0)
		// The test's late window (48h) has ai_spend read yesterday live:
		// read every closed hour from the rollup instead, as once they are
		// older than the window.
		s := pgx.Identifier{schemaName}.Sanitize()
		_, err := pool.Exec(ctx, `UPDATE `+s+`.ai_spend_settings SET live_from = rolled_to`)
		require.NoError(t, err)
		var fromRollup int64
		require.NoError(t, pool.QueryRow(ctx, `SELECT sum(calls) FROM `+s+`.ai_spend_hourly`).Scan(&fromRollup))
		require.Equal(t, int64(24), fromRollup, "the rollup holds every call")
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, ""), 3.903, 24, 18)
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, "a"), 3.024, 3, 0)
		_, err = pool.Exec(ctx, `UPDATE `+s+`.ai_spend_settings SET live_from = rolled_to - late_window`)
		require.NoError(t, err)
	})

	// Late spans for rolled-up hours: the SDK calls once more.
	recordSDKCalls(t, otlpInto(t, te), day)
	t.Run("late spans", func(t *testing.T) {
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, ""), 7.806, 32, 20)
		assertOneAnswer(t, spendAnswers(t, pool, schemaName, "a"), 6.048, 6, 0)
	})
}

// TestDashboardFreshInstall: on a schema with no GenAI call yet (the
// rollup empty), every panel's SQL runs with its variables at All and at
// one value.
func TestDashboardFreshInstall(t *testing.T) {
	cfg, schemaName := aiSpendConfig(t, time.Now())
	startTracesExporter(t, cfg)
	pool := pgtest.Pool(t)
	dash := loadDashboard(t)
	now := time.Now().UTC()
	macros := grafanaMacros{from: now.AddDate(0, 0, -7), to: now, interval: time.Hour}
	for _, one := range []map[string]string{nil, {"team": "a", "model": "gpt-4o"}} {
		vars := dashboardVars(t, pool, dash, macros, schemaName, one)
		for title := range dashboardColumns {
			sql, err := macros.expand(dashboardPanel(t, dash, title))
			require.NoError(t, err)
			sql, err = expandVariables(sql, vars)
			require.NoError(t, err)
			_, _, err = queryAll(context.Background(), pool, sql)
			assert.NoError(t, err, "panel %q with %v:\n%s", title, one, sql)
		}
	}
}

// TestAISpendLateSpansAtOnce: a late span for an hour the rollup already
// holds is in ai_spend at once, as in gen_ai_calls, not only after the
// next maintenance run.
func TestAISpendLateSpansAtOnce(t *testing.T) {
	now := time.Now().UTC()
	cfg, schemaName := aiSpendConfig(t, now.Add(-24*time.Hour))
	te := startTracesExporter(t, cfg)
	pool := pgtest.Pool(t)
	ctx := context.Background()
	past := now.Truncate(time.Hour).Add(-3 * time.Hour)
	require.NoError(t, te.ConsumeTraces(ctx, genaiTraces(genaiCall{at: past, team: "a", model: "gpt-4o", in: 100000, out: 1000})))
	maintainNow(t, pool, schemaName, 0)
	hour := now.Truncate(time.Hour)
	require.Equal(t, rawAnswer(t, pool, schemaName, hour), rollupAnswer(t, pool, schemaName, "ai_spend_hourly", hour), "rolled up")

	late := genaiCall{at: past.Add(20 * time.Minute), team: "b", model: "gpt-4o", in: 200000, cached: 50000, out: 2000}
	require.NoError(t, te.ConsumeTraces(ctx, genaiTraces(late)))
	raw := rawAnswer(t, pool, schemaName, hour)
	require.Len(t, raw, 2, "team a's call and the late one of team b")
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend", hour), "ai_spend shows the late span before any maintenance")
	maintainNow(t, pool, schemaName, 0)
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend", hour), "and after it")
	assert.Equal(t, raw, rollupAnswer(t, pool, schemaName, "ai_spend_hourly", hour), "the rollup took it")
}

// TestAISpendUnpricedReasons: the unpriced calls query and panel tell a
// call without a price (add one to the price file) from a call without
// token counts (the instrumentation sent none: a price cannot help).
func TestAISpendUnpricedReasons(t *testing.T) {
	day := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -1)
	cfg, schemaName := aiSpendConfig(t, day.Add(12*time.Hour))
	te := startTracesExporter(t, cfg)
	recordSDKCalls(t, otlpInto(t, te), day) // mystery-1: tokens, no price
	ctx := context.Background()
	require.NoError(t, te.ConsumeTraces(ctx, genaiFixture(t, "traceloop", day.Add(15*time.Hour)))) // no tokens on the stream, no price either
	pool := pgtest.Pool(t)
	s := pgx.Identifier{schemaName}.Sanitize()
	// A priced model called without tokens.
	_, err := pool.Exec(ctx, `INSERT INTO `+s+`.model_prices (model, match, input_per_mtok, output_per_mtok) VALUES ('gpt-4o-mini%', 'pattern', 0.15, 0.60)`)
	require.NoError(t, err)

	want := map[string]string{
		"mystery-1 no_price 2":               "price file",
		"gpt-4o-mini-2024-07-18 no_tokens 1": "token",
	}
	check := func(t *testing.T, sql string) {
		cols, rows, err := queryAll(ctx, pool, sql)
		require.NoError(t, err, "%s", sql)
		got := map[string]string{}
		idx := map[string]int{}
		for i, c := range cols {
			idx[c] = i
		}
		for _, c := range []string{"model", "unpriced_reason", "unpriced_calls", "what_to_do"} {
			require.Contains(t, idx, c, "column %s", c)
		}
		for _, r := range rows {
			got[fmt.Sprintf("%v %v %v", r[idx["model"]], r[idx["unpriced_reason"]], numeric(r[idx["unpriced_calls"]]))] = fmt.Sprint(r[idx["what_to_do"]])
		}
		require.Len(t, got, len(want), "%v", got)
		for k, hint := range want {
			assert.Contains(t, got[k], hint, k)
		}
	}
	t.Run("query", func(t *testing.T) { check(t, shippedQuery(t, "ai_unpriced_calls", schemaName)) })
	t.Run("panel", func(t *testing.T) {
		dash := loadDashboard(t)
		now := time.Now().UTC()
		macros := grafanaMacros{from: now.AddDate(0, 0, -7), to: now, interval: time.Hour}
		sql, err := macros.expand(dashboardPanel(t, dash, "Unpriced calls"))
		require.NoError(t, err)
		sql, err = expandVariables(sql, dashboardVars(t, pool, dash, macros, schemaName, nil))
		require.NoError(t, err)
		check(t, sql)
	})
}
