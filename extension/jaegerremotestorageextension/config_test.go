package jaegerremotestorageextension

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"gopkg.in/yaml.v3"

	"github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension/internal/metadata"
)

func TestConfigStruct(t *testing.T) {
	require.NoError(t, componenttest.CheckConfigStruct(createDefaultConfig()))
}

func TestDefaultConfig(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig().(*Config)
	require.NoError(t, confmap.New().Unmarshal(cfg))
	assert.Equal(t, createDefaultConfig(), cfg)
	assert.Equal(t, "otel", cfg.Schema)
	assert.Equal(t, "localhost:17271", cfg.GRPC.NetAddr.Endpoint)
	assert.ErrorContains(t, cfg.Validate(), `"endpoint" is required`)
}

func TestLoadConfig(t *testing.T) {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "config.yaml"))
	require.NoError(t, err)

	minimal := createDefaultConfig()
	minimal.Endpoint = "postgres://postgres@127.0.0.1:5432/postgres"

	full := createDefaultConfig()
	full.Endpoint = "postgres://jaeger@replica:5432/telemetry?sslmode=verify-full"
	full.Password = configopaque.String("secret")
	tls := configtls.NewDefaultClientConfig()
	tls.CAFile = "/etc/ssl/ca.pem"
	full.TLS = configoptional.Some(tls)
	full.Schema = "telemetry"
	full.QueryExecMode = "simple_protocol"
	full.MaxConns = 8
	full.GRPC.NetAddr.Endpoint = "0.0.0.0:17272"
	full.Timeout = 10 * time.Second
	full.Limits = LimitsConfig{MaxTraces: 500, DefaultTraces: 50, MaxTraceIDs: 10, MaxSpansPerTrace: 2000}

	for name, want := range map[string]*Config{"": minimal, "full": full} {
		t.Run(name, func(t *testing.T) {
			sub, err := cm.Sub(component.NewIDWithName(metadata.Type, name).String())
			require.NoError(t, err)
			cfg := NewFactory().CreateDefaultConfig()
			require.NoError(t, sub.Unmarshal(cfg))
			require.NoError(t, confmap.Validate(cfg))
			assert.Equal(t, want, cfg)
		})
	}
}

func TestInvalidConfigs(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "invalid_configs.yaml"))
	require.NoError(t, err)
	var cases map[string]struct {
		Config map[string]any `yaml:"config"`
		Want   string         `yaml:"want"`
	}
	require.NoError(t, yaml.Unmarshal(b, &cases))
	require.NotEmpty(t, cases)
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := NewFactory().CreateDefaultConfig()
			require.NoError(t, confmap.NewFromStringMap(c.Config).Unmarshal(cfg))
			err := confmap.Validate(cfg)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.Want)
			assert.NotContains(t, err.Error(), "p@ss", "no part of a password in an error")
		})
	}
}

func TestUnknownKeyRefused(t *testing.T) {
	cfg := NewFactory().CreateDefaultConfig()
	err := confmap.NewFromStringMap(map[string]any{"endpoint": "postgres://h/db", "shcema": "otel"}).Unmarshal(cfg)
	require.ErrorContains(t, err, "shcema")
}

// TestMetadataMatchesCode: metadata.yaml's type and stability are what the
// factory registers.
func TestMetadataMatchesCode(t *testing.T) {
	b, err := os.ReadFile("metadata.yaml")
	require.NoError(t, err)
	var m struct {
		Type   string `yaml:"type"`
		Status struct {
			Class     string              `yaml:"class"`
			Stability map[string][]string `yaml:"stability"`
		} `yaml:"status"`
	}
	require.NoError(t, yaml.Unmarshal(b, &m))
	f := NewFactory()
	assert.Equal(t, f.Type().String(), m.Type)
	assert.Equal(t, "extension", m.Status.Class)
	assert.Equal(t, map[string][]string{"alpha": {"extension"}}, m.Status.Stability)
	assert.Equal(t, component.StabilityLevelAlpha, f.Stability())
}
