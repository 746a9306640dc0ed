package postgrescopyexporter

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

func TestLimitsDefaults(t *testing.T) {
	cfg := defaultConfig()
	assert.Equal(t, LimitsConfig{}, cfg.Limits, "0 means the default, so print-config shows what was set")
	assert.Equal(t, rows.Limits{MaxValue: 64 << 10, MaxRow: 1 << 20}, cfg.Limits.rows())
	assert.Equal(t, rows.Limits{MaxValue: 4096, MaxRow: 4096}, LimitsConfig{MaxRowBytes: 4096}.rows(),
		"the default value limit stays within a smaller row limit")
	assert.Equal(t, rows.Limits{MaxValue: 2048, MaxRow: 1 << 20}, LimitsConfig{MaxValueBytes: 2048}.rows())
}

func TestLimitsConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config_limits.yaml"))
	require.NoError(t, err)
	cfg, err := loadSection(t, cm, "postgrescopy/limits")
	require.NoError(t, err)
	assert.Equal(t, wantConfig(func(c *Config) { c.Limits = LimitsConfig{MaxValueBytes: 8192, MaxRowBytes: 262144} }), cfg)
	assert.Equal(t, rows.Limits{MaxValue: 8192, MaxRow: 262144}, cfg.Limits.rows())

	for name, msg := range map[string]string{
		"invalid/value_too_small":        `limits: "max_value_bytes" must be 0 (default 65536) or 1024 to max_row_bytes (1048576), got 100`,
		"invalid/value_over_row":         `limits: "max_value_bytes" must be 0 (default 65536) or 1024 to max_row_bytes (8192), got 10000`,
		"invalid/value_over_default_row": `limits: "max_value_bytes"`,
		"invalid/row_too_small":          `limits: "max_row_bytes" must be 0 (default 1048576) or 4096 to 67108864, got 1000`,
		"invalid/row_too_large":          `limits: "max_row_bytes"`,
		"invalid/negative":               `limits: "max_value_bytes"`,
		"invalid/unknown_key":            `invalid keys: max_values`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := loadSection(t, cm, name)
			require.Error(t, err)
			assert.Contains(t, err.Error(), msg)
		})
	}
}
