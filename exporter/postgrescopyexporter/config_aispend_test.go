package postgrescopyexporter

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap"
	"gopkg.in/yaml.v3"
)

// envDefault is ${env:NAME:-default}, which the Collector's env provider
// resolves to default when NAME is unset.
var envDefault = regexp.MustCompile(`\$\{env:[A-Z_]+:-([^}]*)\}`)

// TestAISpendCollectorConfig: examples/ai-spend-collector.yaml, the
// complete config docs/ai-spend.md shows (verbatim), is a collector config
// whose postgrescopy section the factory loads and validates as it is (the
// price file included, from the repository root), with every pipeline's
// components declared.
func TestAISpendCollectorConfig(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "examples", "ai-spend-collector.yaml"))
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "ai-spend.md"))
	require.NoError(t, err)
	assert.Contains(t, string(doc), "```yaml\n"+string(raw)+"```", "docs/ai-spend.md shows the file as it is")

	resolved := envDefault.ReplaceAllString(string(raw), "$1")
	var m map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(resolved), &m))
	conf := confmap.NewFromStringMap(m)

	exp, err := conf.Sub("exporters::postgrescopy")
	require.NoError(t, err)
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	require.NoError(t, exp.Unmarshal(cfg))
	// The price file's path is relative to the repository root, where the
	// file says to run the collector.
	cfg.Pricing.File = filepath.Join(root, cfg.Pricing.File)
	require.NoError(t, confmap.Validate(cfg))
	assert.Equal(t, "postgres://postgres@127.0.0.1:5432/postgres?sslmode=prefer", string(cfg.Endpoint))
	require.Len(t, cfg.CostAttribution.Dimensions, 1)
	assert.Equal(t, "team", cfg.CostAttribution.Dimensions[0].Name)

	pipelines, ok := m["service"].(map[string]any)["pipelines"].(map[string]any)
	require.True(t, ok)
	require.Contains(t, pipelines, "traces")
	require.Contains(t, pipelines, "metrics")
	for name, p := range pipelines {
		for _, kind := range []string{"receivers", "processors", "exporters"} {
			for _, c := range p.(map[string]any)[kind].([]any) {
				section, ok := m[kind].(map[string]any)
				require.True(t, ok, "%s: no %s section", name, kind)
				assert.Contains(t, section, strings.TrimSpace(c.(string)), "pipeline %s: %s %v is declared", name, kind, c)
			}
		}
	}
}
