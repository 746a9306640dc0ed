package loadgenreceiver

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"gopkg.in/yaml.v3"

	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver/internal/metadata"
)

// TestMetadataMatchesCode: metadata.yaml's type and its stability of each
// signal (each under exactly one level) are what the factory registers.
func TestMetadataMatchesCode(t *testing.T) {
	b, err := os.ReadFile("metadata.yaml")
	require.NoError(t, err)
	var m struct {
		Type   string `yaml:"type"`
		Status struct {
			Stability map[string][]string `yaml:"stability"`
		} `yaml:"status"`
	}
	require.NoError(t, yaml.Unmarshal(b, &m))
	assert.Equal(t, metadata.Type.String(), m.Type)

	f := NewFactory()
	code := map[string]component.StabilityLevel{
		"traces": f.TracesStability(), "metrics": f.MetricsStability(), "logs": f.LogsStability(),
	}
	levels := map[string]string{}
	for level, signals := range m.Status.Stability {
		for _, s := range signals {
			_, dup := levels[s]
			assert.False(t, dup, "metadata.yaml states %s twice", s)
			levels[s] = level
		}
	}
	assert.Len(t, levels, len(code), "metadata.yaml states exactly traces, metrics and logs: %v", levels)
	for s, l := range code {
		assert.Equal(t, strings.ToLower(l.String()), levels[s], "stability of %s: metadata.yaml vs internal/metadata", s)
	}
}
