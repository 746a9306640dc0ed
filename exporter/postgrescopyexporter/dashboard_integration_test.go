package postgrescopyexporter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// dashboardColumns is every panel of dashboards/ai-spend.json and the
// columns its query must return: a panel added without an entry fails.
var dashboardColumns = map[string][]string{
	"Total spend":                  {"cost"},
	"Calls":                        {"calls", "unpriced_calls"},
	"Spend per day by team":        {"time", "metric", "value"},
	"Spend per day by model":       {"time", "metric", "value"},
	"Spend by team and model":      {"team", "provider", "model", "calls", "reported_calls", "catalog_calls", "unpriced_calls", "input_tokens", "output_tokens", "cost", "currency"},
	"Tokens by kind":               {"time", "metric", "value"},
	"Unpriced calls":               {"provider", "model", "unpriced_reason", "unpriced_calls", "what_to_do"},
	"Top conversations":            {"conversation_id", "calls", "agents", "models", "input_tokens", "output_tokens", "cost"},
	"GenAI call errors":            {"time", "metric", "value"},
	"GenAI call latency p50 / p95": {"time", "metric", "value"},
}

type grafanaDashboard struct {
	Templating struct {
		List []struct {
			Name     string `json:"name"`
			Type     string `json:"type"`
			Query    any    `json:"query"`
			AllValue string `json:"allValue"`
		} `json:"list"`
	} `json:"templating"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaPanel struct {
	Title      string `json:"title"`
	Type       string `json:"type"`
	Datasource struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		RefID  string `json:"refId"`
		Format string `json:"format"`
		RawSQL string `json:"rawSql"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"` // a row's
}

// grafanaMacros expands the PostgreSQL data source's macros as Grafana
// does, for a time range and an interval.
type grafanaMacros struct {
	from, to time.Time
	interval time.Duration
}

var (
	timeGroupRe  = regexp.MustCompile(`\$__timeGroup(Alias)?\(\s*([^,()]+?)\s*,\s*'?([^,()']+?)'?\s*(,[^()]*)?\)`)
	timeFilterRe = regexp.MustCompile(`\$__timeFilter\(\s*([^()]+?)\s*\)`)
	variableRe   = regexp.MustCompile(`\$\{(\w+)(:\w+)?\}|\$(\w+)`)
)

func grafanaDuration(s string) (time.Duration, error) {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		d, err := strconv.Atoi(n)
		return time.Duration(d) * 24 * time.Hour, err
	}
	return time.ParseDuration(s)
}

func (m grafanaMacros) expand(sql string) (string, error) {
	sql = strings.ReplaceAll(sql, "$__interval_ms", strconv.FormatInt(m.interval.Milliseconds(), 10))
	sql = strings.ReplaceAll(sql, "$__interval", m.interval.String())
	var err error
	sql = timeGroupRe.ReplaceAllStringFunc(sql, func(s string) string {
		g := timeGroupRe.FindStringSubmatch(s)
		d, derr := grafanaDuration(g[3])
		if derr != nil || d < time.Second {
			err = fmt.Errorf("interval %q of %s: %v", g[3], s, derr)
			return s
		}
		out := fmt.Sprintf("floor(extract(epoch from %s)/%d)*%d", g[2], int64(d.Seconds()), int64(d.Seconds()))
		if g[1] != "" {
			out += ` AS "time"`
		}
		return out
	})
	lit := func(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339) + "'" }
	sql = timeFilterRe.ReplaceAllString(sql, "$1 BETWEEN "+lit(m.from)+" AND "+lit(m.to))
	sql = strings.ReplaceAll(sql, "$__timeFrom()", lit(m.from))
	sql = strings.ReplaceAll(sql, "$__timeTo()", lit(m.to))
	return sql, err
}

// expandVariables replaces $name and ${name} by vars' values.
func expandVariables(sql string, vars map[string]string) (string, error) {
	var missing []string
	out := variableRe.ReplaceAllStringFunc(sql, func(s string) string {
		g := variableRe.FindStringSubmatch(s)
		name := g[1] + g[3]
		v, ok := vars[name]
		if !ok {
			missing = append(missing, s)
			return s
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("unexpanded %v", missing)
	}
	return out, nil
}

// queryAll runs sql and returns its column names and rows.
func queryAll(ctx context.Context, pool *pgxpool.Pool, sql string) ([]string, [][]any, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	var cols []string
	for _, f := range rows.FieldDescriptions() {
		cols = append(cols, f.Name)
	}
	var out [][]any
	for rows.Next() {
		v, err := rows.Values()
		if err != nil {
			return nil, nil, err
		}
		out = append(out, v)
	}
	return cols, out, rows.Err()
}

// TestDashboardPanelsRun: every panel of the AI spend dashboard, its SQL
// taken from the JSON with Grafana's macros and template variables expanded
// (each query variable by running its own query, All selected), runs on a
// database holding SDK-made GenAI spans, token metrics and the rollup, and
// returns its columns and at least one row.
func TestDashboardPanelsRun(t *testing.T) {
	raw, err := os.ReadFile("../../dashboards/ai-spend.json")
	require.NoError(t, err)
	var dash grafanaDashboard
	require.NoError(t, json.Unmarshal(raw, &dash))

	now := time.Now().UTC()
	day := now.Truncate(24*time.Hour).AddDate(0, 0, -1)
	cfg, schemaName := aiSpendConfig(t, day.Add(12*time.Hour))
	te := startTracesExporter(t, cfg)
	endpoint := otlpInto(t, te)
	recordSDKCalls(t, endpoint, day)
	// A failed call, for the errors panel.
	tr := sdkTracer(t, endpoint, "assistant", "a")
	_, span := tr.Start(context.Background(), "chat gpt-4o", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithTimestamp(day.Add(17*time.Hour)), trace.WithAttributes(semconv.GenAIOperationNameChat,
			semconv.GenAIProviderNameOpenAI, semconv.GenAIRequestModel("gpt-4o")))
	span.SetStatus(codes.Error, "rate limited")
	span.End(trace.WithTimestamp(day.Add(17*time.Hour + 50*time.Millisecond)))

	ctx := context.Background()
	me, err := NewFactory().CreateMetrics(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, me.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, me.Shutdown(context.Background())) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	usage, err := mp.Meter("genai-test").Int64Histogram("gen_ai.client.token.usage")
	require.NoError(t, err)
	usage.Record(ctx, 400000, metric.WithAttributes(semconv.GenAIProviderNameOpenAI, semconv.GenAIResponseModel("gpt-4o"), semconv.GenAITokenTypeInput))
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(ctx, &rm))
	require.NoError(t, me.ConsumeMetrics(ctx, histogramsToPdata(rm)))
	require.NoError(t, mp.Shutdown(ctx))

	pool := pgtest.Pool(t)
	maintainNow(t, pool, schemaName, 0)
	// The metrics are of the open hour: roll it up by hand.
	_, err = pool.Exec(ctx, `SELECT `+pgx.Identifier{schemaName}.Sanitize()+`.postgrescopy_ai_rollup($1, $2)`,
		now.Truncate(time.Hour), now.Truncate(time.Hour).Add(time.Hour))
	require.NoError(t, err)

	macros := grafanaMacros{from: now.AddDate(0, 0, -7), to: now, interval: time.Hour}
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		switch v.Type {
		case "datasource":
		case "constant":
			require.Equal(t, "schema", v.Name, "the only constant is the schema")
			vars[v.Name] = pgx.Identifier{schemaName}.Sanitize()
		case "query":
			q, ok := v.Query.(string)
			require.True(t, ok, "variable %s: query is SQL text", v.Name)
			q, err := macros.expand(q)
			require.NoError(t, err)
			q, err = expandVariables(q, vars)
			require.NoError(t, err, "variable %s", v.Name)
			_, rows, err := queryAll(ctx, pool, q)
			require.NoError(t, err, "variable %s: %s", v.Name, q)
			require.NotEmpty(t, rows, "variable %s has values", v.Name)
			var vals []string
			for _, r := range rows {
				vals = append(vals, "'"+strings.ReplaceAll(fmt.Sprint(r[0]), "'", "''")+"'")
			}
			vars[v.Name] = strings.Join(vals, ",") // All, as Grafana expands a multi-value variable
		default:
			t.Fatalf("variable %s: type %s is not expanded by this test", v.Name, v.Type)
		}
	}

	var panels []grafanaPanel
	var flatten func([]grafanaPanel)
	flatten = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type == "row" {
				flatten(p.Panels)
				continue
			}
			panels = append(panels, p)
		}
	}
	flatten(dash.Panels)
	seen := map[string]bool{}
	for _, p := range panels {
		t.Run(p.Title, func(t *testing.T) {
			seen[p.Title] = true
			want, ok := dashboardColumns[p.Title]
			require.True(t, ok, "panel %q is not listed in dashboardColumns", p.Title)
			assert.Equal(t, "${datasource}", p.Datasource.UID, "the panel uses the dashboard's data source")
			require.NotEmpty(t, p.Targets)
			for _, tg := range p.Targets {
				require.Contains(t, []string{"table", "time_series"}, tg.Format)
				q, err := macros.expand(tg.RawSQL)
				require.NoError(t, err)
				q, err = expandVariables(q, vars)
				require.NoError(t, err)
				cols, rows, err := queryAll(ctx, pool, q)
				require.NoError(t, err, "%s", q)
				assert.Equal(t, want, cols)
				if tg.Format == "time_series" {
					assert.Equal(t, []string{"time", "metric", "value"}, cols, "Grafana's time series format")
				}
				require.NotEmpty(t, rows, "%s", q)
				nonNull := false
				for _, r := range rows {
					nonNull = nonNull || r[len(r)-1] != nil || r[0] != nil
				}
				assert.True(t, nonNull, "the panel shows values")
			}
		})
	}
	for title := range dashboardColumns {
		assert.True(t, seen[title], "panel %q is listed but not in the dashboard", title)
	}
}
