package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/postgrescopy/postgrescopy/internal/sharedcomponent"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver/internal/metadata"
)

// NewFactory creates the loadgen receiver factory.
func NewFactory() receiver.Factory { return newFactory(nil) }

// NewFactoryWithStats creates a factory whose receivers count into stats, so
// a bench that builds the Collector in-process can watch the run and wait on
// stats.Done(). Use one loadgen receiver per such factory: a second would
// add to the same counters, and Done closes when the first ends.
func NewFactoryWithStats(stats *Stats) receiver.Factory { return newFactory(stats) }

type factory struct {
	stats *Stats
	// runs holds the run shared by the signals of one *Config (the
	// Collector passes one to every signal of a receiver).
	runs sharedcomponent.Map[*Config, *run]
}

func newFactory(stats *Stats) receiver.Factory {
	f := &factory{stats: stats}
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithTraces(f.createTraces, metadata.TracesStability),
		receiver.WithMetrics(f.createMetrics, metadata.MetricsStability),
		receiver.WithLogs(f.createLogs, metadata.LogsStability),
	)
}

// sharer is one signal's receiver: a handle on the run of its config, which
// starts with the first Start and stops with the last Shutdown.
type sharer struct {
	*sharedcomponent.Sharer[*run]
}

// Stats returns the run's counters; a bench can type-assert a created
// receiver to interface{ Stats() *Stats }.
func (s sharer) Stats() *Stats { return s.Unwrap().Stats() }

// get returns a handle on the run shared by cfg's signals, creating the run
// on first use.
func (f *factory) get(set receiver.Settings, cfg *Config) (*run, sharer, error) {
	s, err := f.runs.LoadOrStore(cfg, func() (*run, error) { return newRun(set, cfg, f.stats) })
	if err != nil {
		return nil, sharer{}, err
	}
	return s.Unwrap(), sharer{s.Sharer()}, nil
}

func (f *factory) createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	g, h, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.traces = next
	g.mu.Unlock()
	return h, nil
}

func (f *factory) createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	g, h, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.metrics = next
	g.mu.Unlock()
	return h, nil
}

func (f *factory) createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	g, h, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.logs = next
	g.mu.Unlock()
	return h, nil
}
