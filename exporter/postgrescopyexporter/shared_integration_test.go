package postgrescopyexporter

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestFailedStartReleasesTheSharedClient: a start that fails leaves no
// shared client registered (nor its pool and loops running), without waiting
// for a Shutdown; the Shutdown that may follow is still safe. It fails either
// in the client's own start (a database that does not exist) or after it, in
// the exporterhelper's queue (a storage extension the host does not have).
func TestFailedStartReleasesTheSharedClient(t *testing.T) {
	for name, spoil := range map[string]func(*Config){
		"client": func(cfg *Config) {
			cfg.Endpoint = configopaque.String(strings.Replace(pgtest.URL(), "/postgres?", "/postgrescopy_no_such_db?", 1))
		},
		"queue": func(cfg *Config) {
			cfg.QueueConfig = defaultConfig().QueueConfig
			id := component.MustNewID("absent_storage")
			cfg.QueueConfig.Get().StorageID = &id
		},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, _ := testConfig(t)
			spoil(cfg)
			before := clients.Len()
			te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background()), "shutdown after a failed start is safe") })
			require.Equal(t, before+1, clients.Len(), "the create registers the client")

			require.Error(t, te.Start(context.Background(), componenttest.NewNopHost()))
			require.Equal(t, before, clients.Len(), "the failed start released the client it registered")
		})
	}
}
