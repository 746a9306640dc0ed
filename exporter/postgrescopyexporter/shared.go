package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"

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

// A signal's Start is the exporterhelper's: the shared client's start, then
// the sending queue's. When the queue fails to start (its storage extension
// is missing or refuses), the client already counts this signal as a sharer;
// the failed start gives that share back, so that it leaves nothing
// registered or running whether or not a Shutdown follows (which is then
// safe and does nothing).

func (x tracesExporter) Start(ctx context.Context, host component.Host) error {
	return releaseOnFailure(ctx, x.stop.e, x.Traces.Start(ctx, host))
}

func (x metricsExporter) Start(ctx context.Context, host component.Host) error {
	return releaseOnFailure(ctx, x.stop.e, x.Metrics.Start(ctx, host))
}

func (x logsExporter) Start(ctx context.Context, host component.Host) error {
	return releaseOnFailure(ctx, x.stop.e, x.Logs.Start(ctx, host))
}

// releaseOnFailure releases e's share of the client when its start failed
// after the client's own start succeeded.
func releaseOnFailure(ctx context.Context, e *pgExporter, err error) error {
	if err == nil || !e.isStarted() {
		return err
	}
	return errors.Join(err, e.shutdown(ctx))
}
