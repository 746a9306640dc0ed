package loadgenreceiver

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver/internal/metadata"
)

func TestDefaultConfig(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig()
	assert.Equal(t, &Config{
		Users:           10,
		EventsPerUser:   1900,
		MetricsFraction: 0.25,
		LogsFraction:    0.30,
		Concurrency:     1,
		Seed:            1,
		BatchSize:       500,
		WarmupPause:     5 * time.Second,
		RetryOnFailure:  defaultRetry(),
	}, cfg)
	require.NoError(t, componenttest.CheckConfigStruct(cfg))
	require.NoError(t, confmap.Validate(cfg))
	require.NoError(t, confmap.New().Unmarshal(cfg))

	spans, points, logs := cfg.(*Config).perUser()
	assert.Equal(t, [3]int{855, 475, 570}, [3]int{spans, points, logs})
}

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)
	tests := []struct {
		id   component.ID
		want *Config
	}{
		{id: component.NewID(metadata.Type), want: createDefaultConfig().(*Config)},
		{id: component.NewIDWithName(metadata.Type, "custom"), want: &Config{
			Users:           1000,
			EventsPerUser:   2000,
			MetricsFraction: 0.2,
			LogsFraction:    0.35,
			Rate:            67000,
			Duration:        30 * time.Second,
			Concurrency:     4,
			Seed:            42,
			BatchSize:       5000,
			Signals:         []string{"traces", "logs"},
			WarmupUsers:     100,
			WarmupPause:     2 * time.Second,
			RetryOnFailure:  defaultRetry(),
		}},
		{id: component.NewIDWithName(metadata.Type, "pregenerated"), want: func() *Config {
			cfg := createDefaultConfig().(*Config)
			cfg.Users, cfg.Rate, cfg.Pregenerate = 50, 10000, true
			return cfg
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.id.String(), func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			sub, err := cm.Sub(tt.id.String())
			require.NoError(t, err)
			require.NoError(t, sub.Unmarshal(cfg))
			require.NoError(t, confmap.Validate(cfg))
			assert.Equal(t, tt.want, cfg)
		})
	}
}

func TestInvalidConfigs(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "invalid_configs.yaml"))
	require.NoError(t, err)
	for name := range cm.ToStringMap() {
		t.Run(name, func(t *testing.T) {
			entry, err := cm.Sub(name)
			require.NoError(t, err)
			sub, err := entry.Sub("config")
			require.NoError(t, err)
			cfg := NewFactory().CreateDefaultConfig()
			require.NoError(t, sub.Unmarshal(cfg))
			err = confmap.Validate(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), entry.Get("error"))
		})
	}
}

func TestValidateJoinsAllProblems(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	cfg.Users, cfg.BatchSize, cfg.Concurrency = 0, 0, 0
	err := cfg.Validate()
	require.Error(t, err)
	for _, key := range []string{`"users"`, `"batch_size"`, `"concurrency"`} {
		assert.Contains(t, err.Error(), key)
	}
}

func TestUnknownKeyRefused(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig()
	err := confmap.NewFromStringMap(map[string]any{"user": 5}).Unmarshal(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "user")
}
