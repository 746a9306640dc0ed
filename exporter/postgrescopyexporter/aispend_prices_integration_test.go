package postgrescopyexporter

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/pricing"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// modelCalls is one chat call with tokens per (provider, model) pair.
func modelCalls(at time.Time, pairs [][2]string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "names")
	ss := rs.ScopeSpans().AppendEmpty()
	for i, p := range pairs {
		s := ss.Spans().AppendEmpty()
		s.SetName("chat " + p[1])
		s.SetKind(ptrace.SpanKindClient)
		s.SetTraceID(pcommon.TraceID{7, byte(i >> 8), byte(i)})
		s.SetSpanID(pcommon.SpanID{7, byte(i >> 8), byte(i)})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(at.Add(time.Duration(i) * time.Second)))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(at.Add(time.Duration(i)*time.Second + time.Second)))
		a := s.Attributes()
		a.PutStr("gen_ai.operation.name", "chat")
		a.PutStr("gen_ai.provider.name", p[0])
		a.PutStr("gen_ai.response.model", p[1])
		a.PutInt("gen_ai.usage.input_tokens", 1000)
		a.PutInt("gen_ai.usage.output_tokens", 100)
	}
	return td
}

// priceEntries says, per "provider model" of the calls, which catalog
// entry priced it ("" for none).
func priceEntries(t *testing.T, cfg *Config, schemaName string, names [][2]string) map[string]string {
	t.Helper()
	te := startTracesExporter(t, cfg)
	ctx := context.Background()
	require.NoError(t, te.ConsumeTraces(ctx, modelCalls(time.Now().Add(-time.Hour), names)))
	pool := pgtest.Pool(t)
	s := pgx.Identifier{schemaName}.Sanitize()
	rows, err := pool.Query(ctx, `SELECT c.provider || ' ' || c.model, coalesce(p.model, '') FROM `+s+`.gen_ai_calls c
LEFT JOIN `+s+`.model_prices p ON p.id = c.price_id`)
	require.NoError(t, err)
	got := map[string]string{}
	for rows.Next() {
		var model, entry string
		require.NoError(t, rows.Scan(&model, &entry))
		got[model] = entry
	}
	require.NoError(t, rows.Err())
	require.Len(t, got, len(names), "one call per provider and name")
	return got
}

// TestModelFamilyPrices: a price entry without a * prices its model and the
// versions providers name after it (a date, a number, -latest, -preview,
// Bedrock's vendor prefix and -v1:0, Vertex's @date, models/...), never a
// different model whose name it begins (gpt-4o is not gpt-4o-mini); a more
// exact entry wins, then the longest.
func TestModelFamilyPrices(t *testing.T) {
	cfg, schemaName := testConfig(t)
	file := filepath.Join(t.TempDir(), "prices.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`prices:
  - {model: gpt-4o, input: 2.50, output: 10}
  - {model: gpt-4o-2024-05-13, input: 5, output: 15}
  - {model: gpt-4o-mini, input: 0.15, output: 0.60}
  - {model: claude-3-5-sonnet, input: 3, output: 15}
  - {model: claude-3-5-sonnet-20240620, input: 3, output: 15}
  - {model: "claude-*", input: 9, output: 9}
  - {provider: azure.ai.openai, model: gpt-4o, input: 2.75, output: 11}
`), 0o600))
	cfg.Pricing.File = file
	require.NoError(t, cfg.Validate())
	cases := []struct{ provider, model, entry string }{
		{"openai", "gpt-4o", "gpt-4o"},                                                             // the entry itself
		{"openai", "gpt-4o-2024-08-06", "gpt-4o"},                                                  // a dated version: its family
		{"openai", "gpt-4o-2024-05-13", "gpt-4o-2024-05-13"},                                       // the exact dated entry wins over the family
		{"openai", "gpt-4o-mini-2024-07-18", "gpt-4o-mini"},                                        // gpt-4o-mini's version, not gpt-4o's
		{"openai", "gpt-4o-audio-preview", ""},                                                     // another model: -audio is no version
		{"openai", "chatgpt-4o-latest", ""},                                                        // another name altogether
		{"anthropic", "claude-3-5-sonnet-latest", "claude-3-5-sonnet"},                             // family over the shorter pattern claude-*
		{"aws.bedrock", "anthropic.claude-3-5-sonnet-20240620-v1:0", "claude-3-5-sonnet-20240620"}, // the longest family that matches
		{"aws.bedrock", "us.anthropic.claude-3-5-sonnet-20241022-v2:0", "claude-3-5-sonnet"},       // cross-region profile
		{"gcp.vertex_ai", "claude-3-5-sonnet-v2@20241022", "claude-3-5-sonnet"},
		{"anthropic", "claude-3-haiku-20240307", "claude-%"},       // the pattern only
		{"azure.ai.openai", "gpt-4o-2024-11-20", "gpt-4o"},         // the entry named for the provider
		{"openai", "openrouter/openai/gpt-4o-mini", "gpt-4o-mini"}, // a path before the name
		{"openai", "gpt-4o_mini", ""},                              // _ is no LIKE wildcard here
	}
	var names [][2]string
	want := map[string]string{}
	for _, c := range cases {
		names = append(names, [2]string{c.provider, c.model})
		want[c.provider+" "+c.model] = c.entry
	}
	assert.Equal(t, want, priceEntries(t, cfg, schemaName, names))
	// The provider-named entry is the one that priced the Azure call.
	pool := pgtest.Pool(t)
	var provider string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT p.provider FROM `+pgx.Identifier{schemaName}.Sanitize()+`.gen_ai_calls c
JOIN `+pgx.Identifier{schemaName}.Sanitize()+`.model_prices p ON p.id = c.price_id WHERE c.model = 'gpt-4o-2024-11-20'`).Scan(&provider))
	assert.Equal(t, "azure.ai.openai", provider)
}

// exampleNames are real model names as OpenAI, Anthropic, Google, Mistral,
// AWS Bedrock and Azure OpenAI return them, with the entry of
// examples/prices.example.yaml that must price each.
var exampleNames = map[[2]string]string{
	{"openai", "gpt-4o-2024-08-06"}:       "gpt-4o",
	{"openai", "gpt-4o-mini-2024-07-18"}:  "gpt-4o-mini",
	{"openai", "gpt-4.1-2025-04-14"}:      "gpt-4.1",
	{"openai", "gpt-4.1-mini-2025-04-14"}: "gpt-4.1-mini",
	{"openai", "gpt-4.1-nano-2025-04-14"}: "gpt-4.1-nano",
	{"openai", "gpt-5-2025-08-07"}:        "gpt-5",
	{"openai", "gpt-5-mini-2025-08-07"}:   "gpt-5-mini",
	{"openai", "o3-2025-04-16"}:           "o3",
	{"openai", "o3-mini-2025-01-31"}:      "o3-mini",
	{"openai", "o4-mini-2025-04-16"}:      "o4-mini",
	{"openai", "text-embedding-3-small"}:  "text-embedding-3-small",
	{"openai", "text-embedding-3-large"}:  "text-embedding-3-large",

	{"anthropic", "claude-opus-4-1-20250805"}:   "claude-opus-4-1",
	{"anthropic", "claude-opus-4-20250514"}:     "claude-opus-4",
	{"anthropic", "claude-sonnet-4-5-20250929"}: "claude-sonnet-4-5",
	{"anthropic", "claude-sonnet-4-20250514"}:   "claude-sonnet-4",
	{"anthropic", "claude-3-7-sonnet-20250219"}: "claude-3-7-sonnet",
	{"anthropic", "claude-haiku-4-5-20251001"}:  "claude-haiku-4-5",
	{"anthropic", "claude-3-5-haiku-latest"}:    "claude-3-5-haiku",

	{"gcp.gemini", "gemini-2.5-pro"}:                 "gemini-2.5-pro",
	{"gcp.gemini", "gemini-2.5-flash"}:               "gemini-2.5-flash",
	{"gcp.gemini", "gemini-2.5-flash-preview-05-20"}: "gemini-2.5-flash",
	{"gcp.gemini", "gemini-2.5-flash-lite"}:          "gemini-2.5-flash-lite",
	{"gcp.vertex_ai", "gemini-2.0-flash-001"}:        "gemini-2.0-flash",
	{"gcp.vertex_ai", "models/gemini-2.5-pro"}:       "gemini-2.5-pro",
	{"gcp.vertex_ai", "claude-sonnet-4@20250514"}:    "claude-sonnet-4",
	{"gcp.gemini", "gemini-embedding-001"}:           "gemini-embedding-001",

	{"mistral_ai", "mistral-large-2411"}:   "mistral-large",
	{"mistral_ai", "mistral-large-latest"}: "mistral-large",
	{"mistral_ai", "mistral-medium-2505"}:  "mistral-medium",
	{"mistral_ai", "mistral-small-2503"}:   "mistral-small",
	{"mistral_ai", "codestral-2501"}:       "codestral",
	{"mistral_ai", "ministral-8b-2410"}:    "ministral-8b",
	{"mistral_ai", "mistral-embed"}:        "mistral-embed",

	{"aws.bedrock", "anthropic.claude-3-5-haiku-20241022-v1:0"}:   "claude-3-5-haiku",
	{"aws.bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0"}: "claude-sonnet-4",
	{"aws.bedrock", "amazon.nova-pro-v1:0"}:                       "nova-pro",
	{"aws.bedrock", "amazon.nova-lite-v1:0"}:                      "nova-lite",
	{"aws.bedrock", "amazon.nova-micro-v1:0"}:                     "nova-micro",
	{"aws.bedrock", "amazon.titan-embed-text-v2:0"}:               "titan-embed-text-v2",
	{"aws.bedrock", "meta.llama3-3-70b-instruct-v1:0"}:            "llama3-3-70b-instruct",

	{"azure.ai.openai", "gpt-4o-2024-11-20"}:      "gpt-4o",
	{"azure.ai.openai", "gpt-4o-mini-2024-07-18"}: "gpt-4o-mini",
	{"azure.ai.openai", "o3-mini-2025-01-31"}:     "o3-mini",
}

// TestExamplePriceFile: examples/prices.example.yaml parses, says its date
// and sources, and prices the real names of each provider it covers by
// the entry meant for them.
func TestExamplePriceFile(t *testing.T) {
	path := filepath.Join("..", "..", "examples", "prices.example.yaml")
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	head := string(b[:strings.Index(string(b), "prices:")])
	assert.Regexp(t, `(?m)^# Prices as of 20\d\d-\d\d-\d\d`, head, "the file says its date")
	for _, src := range []string{"openai.com", "anthropic.com", "ai.google.dev", "mistral.ai", "aws.amazon.com/bedrock"} {
		assert.Contains(t, head, src, "the file names its sources")
	}
	prices, err := pricing.ParseFile(path)
	require.NoError(t, err)
	require.NotEmpty(t, prices)

	cfg, schemaName := testConfig(t)
	cfg.Pricing.File = path
	require.NoError(t, cfg.Validate())
	var names [][2]string
	want := map[string]string{}
	for k, entry := range exampleNames {
		names = append(names, k)
		want[k[0]+" "+k[1]] = entry
	}
	got := priceEntries(t, cfg, schemaName, names)
	assert.Equal(t, want, got)
}
