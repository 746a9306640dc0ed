package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"

	"go.opentelemetry.io/collector/component"

	"github.com/postgrescopy/postgrescopy/internal/sharedcomponent"
)

// The Collector builds one exporter per signal from the same *Config; they
// share one client (one pool, one Redis client) keyed by that pointer:
// started once, its start error returned to every sharer, shut down when the
// last started sharer shuts down.
var clients sharedcomponent.Map[*Config, *client]

// acquireClient returns a sharer's handle on the client for cfg, creating the
// client (without I/O) on first use.
func acquireClient(cfg *Config, set component.TelemetrySettings) (*sharedcomponent.Sharer[*client], error) {
	s, err := clients.LoadOrStore(cfg, func() (*client, error) { return newClient(cfg, withoutSignal(set)) })
	if err != nil {
		return nil, err
	}
	return s.Sharer(), nil
}

// Start is the shared client's start (sharedcomponent.Component).
func (c *client) Start(ctx context.Context, _ component.Host) error { return c.start(ctx) }

// Shutdown is the shared client's shutdown (sharedcomponent.Component).
func (c *client) Shutdown(ctx context.Context) error { return c.shutdown(ctx) }
