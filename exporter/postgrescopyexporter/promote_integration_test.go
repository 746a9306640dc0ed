package postgrescopyexporter

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// genaiTotals is what the genai columns must add up to, computed from pdata.
type genaiTotals struct {
	spans, models       int64 // spans with a provider, with a response model
	in, out             int64
	cost, clientCost    float64
	clientIn, clientOut int64
}

func (g *genaiTotals) add(td ptrace.Traces) {
	for _, rs := range td.ResourceSpans().All() {
		for _, ss := range rs.ScopeSpans().All() {
			for _, s := range ss.Spans().All() {
				a := s.Attributes()
				if _, ok := a.Get("gen_ai.provider.name"); ok {
					g.spans++
				}
				if _, ok := a.Get("gen_ai.response.model"); ok {
					g.models++
				}
				in, out, cost := intAttr(a, "gen_ai.usage.input_tokens"), intAttr(a, "gen_ai.usage.output_tokens"), 0.0
				if v, ok := a.Get("gen_ai.usage.cost"); ok {
					cost = v.Double()
				}
				g.in, g.out, g.cost = g.in+in, g.out+out, g.cost+cost
				if s.Kind() == ptrace.SpanKindClient {
					if _, ok := a.Get("gen_ai.usage.input_tokens"); ok {
						g.clientIn, g.clientOut, g.clientCost = g.clientIn+in, g.clientOut+out, g.clientCost+cost
					}
				}
			}
		}
	}
}

func intAttr(a pcommon.Map, k string) int64 {
	if v, ok := a.Get(k); ok {
		return v.Int()
	}
	return 0
}

// TestGenAIPresetFillsColumns pushes loadgen's AI traffic through the
// exporter as configured by default and finds the preset's columns holding
// what the attributes said, then runs queries/token_cost.sql on them.
func TestGenAIPresetFillsColumns(t *testing.T) {
	cfg, schemaName := testConfig(t)
	require.Equal(t, presetGenAI, cfg.PromotePreset, "the preset is on by default")
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })

	lcfg := loadgenreceiver.NewFactory().CreateDefaultConfig().(*loadgenreceiver.Config)
	lcfg.Users = 3
	lcfg.Signals = []string{"traces"}
	gen, err := loadgenreceiver.NewGenerator(*lcfg)
	require.NoError(t, err)
	var want genaiTotals
	for td, ok := gen.NextTraces(); ok; td, ok = gen.NextTraces() {
		want.add(td) // before the push: the exporter may not mutate, but be safe
		require.NoError(t, te.ConsumeTraces(ctx, td))
	}
	require.Positive(t, want.in, "loadgen made AI spans")
	require.Positive(t, want.clientCost)

	pool := pgtest.Pool(t)
	var got genaiTotals
	err = pool.QueryRow(ctx, `SELECT count(gen_ai_provider_name), count(gen_ai_response_model),
  coalesce(sum(gen_ai_input_tokens), 0), coalesce(sum(gen_ai_output_tokens), 0), coalesce(sum(gen_ai_cost_usd), 0)
FROM `+pgx.Identifier{schemaName, "spans"}.Sanitize()).Scan(&got.spans, &got.models, &got.in, &got.out, &got.cost)
	require.NoError(t, err)
	assert.Equal(t, want.spans, got.spans, "one provider per AI span")
	assert.Equal(t, want.models, got.models)
	assert.Equal(t, want.in, got.in, "sum of input tokens")
	assert.Equal(t, want.out, got.out, "sum of output tokens")
	assert.InDelta(t, want.cost, got.cost, 1e-6*want.cost, "sum of cost")

	sqlText, err := os.ReadFile("../../queries/token_cost.sql")
	require.NoError(t, err)
	query := string(sqlText)
	// Tokens, cost and model come from typed columns: no GenAI attribute key
	// is read from JSONB.
	assert.NotContains(t, query, "'gen_ai.")
	query = strings.ReplaceAll(query, "otel.", pgx.Identifier{schemaName}.Sanitize()+".")
	query = strings.TrimSuffix(strings.TrimSpace(query), ";")
	var n, nullModels, in, out int64
	var cost float64
	// Every GenAI call counts (token_cost.sql), the loadgen's agent spans
	// too, which name no model and carry no tokens: a row without a model
	// must carry nothing to price.
	err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE model IS NULL AND (coalesce(input_tokens, 0) > 0 OR coalesce(output_tokens, 0) > 0 OR coalesce(cost_usd, 0) > 0)),
  sum(input_tokens)::bigint, sum(output_tokens)::bigint, sum(cost_usd)::float8 FROM (`+query+`) q`).
		Scan(&n, &nullModels, &in, &out, &cost)
	require.NoError(t, err)
	assert.Positive(t, n, "token_cost.sql finds the calls")
	assert.Zero(t, nullModels, "every call with tokens or a cost has a model")
	assert.Equal(t, want.clientIn, in, "the query's input tokens are the client spans'")
	assert.Equal(t, want.clientOut, out)
	// Each group's cost is rounded to 4 decimals.
	assert.InDelta(t, want.clientCost, cost, 0.0001*float64(n))
}

// TestCreateSchemaFalseNamesMissingPromotedColumns: a schema made without
// the preset lacks its columns; a create_schema: false exporter with the
// preset says which, and how to add them.
func TestCreateSchemaFalseNamesMissingPromotedColumns(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.PromotePreset = presetNone
	startTraces(t, cfg) // creates the schema without promoted columns

	check := *cfg
	check.CreateSchema = false
	check.PromotePreset = presetGenAI
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), &check)
	require.NoError(t, err)
	err = te.Start(ctx, componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spans_rows.gen_ai_cost_usd (column missing)")
	assert.Contains(t, err.Error(), `ADD COLUMN IF NOT EXISTS "gen_ai_input_tokens" bigint`)
	require.NoError(t, te.Shutdown(ctx))
}

// TestPromotedColumnOfAnotherTypeFailsStart: binary COPY would refuse every
// row, so a column that exists with another type stops the start.
func TestPromotedColumnOfAnotherTypeFailsStart(t *testing.T) {
	cfg, schemaName := testConfig(t)
	startTraces(t, cfg)
	_, err := pgtest.Pool(t).Exec(context.Background(), "ALTER TABLE "+pgx.Identifier{schemaName, "spans_rows"}.Sanitize()+
		" ADD COLUMN retries text")
	require.NoError(t, err)
	typed := *cfg // another config: its own client, which prepares the schema
	typed.Promote = []PromoteConfig{{Column: "retries", Type: "bigint", From: []string{"span:retries"}}}
	te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), &typed)
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, "spans.retries is text, want bigint")
	require.NoError(t, te.Shutdown(context.Background()))
}
