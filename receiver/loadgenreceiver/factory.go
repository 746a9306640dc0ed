package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

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
	mu    sync.Mutex
	runs  map[*Config]*run // the Collector passes one *Config to every signal of a receiver
}

func newFactory(stats *Stats) receiver.Factory {
	f := &factory{stats: stats, runs: map[*Config]*run{}}
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithTraces(f.createTraces, metadata.TracesStability),
		receiver.WithMetrics(f.createMetrics, metadata.MetricsStability),
		receiver.WithLogs(f.createLogs, metadata.LogsStability),
	)
}

// get returns the run shared by cfg's signals, creating it on first use.
func (f *factory) get(set receiver.Settings, cfg *Config) (*run, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g, ok := f.runs[cfg]; ok {
		return g, nil
	}
	var g *run
	var once sync.Once
	g, err := newRun(set, cfg, f.stats, func() {
		once.Do(func() {
			f.mu.Lock()
			if f.runs[cfg] == g {
				delete(f.runs, cfg)
			}
			f.mu.Unlock()
		})
	})
	if err != nil {
		return nil, err
	}
	f.runs[cfg] = g
	return g, nil
}

func (f *factory) createTraces(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Traces) (receiver.Traces, error) {
	g, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.traces = next
	g.mu.Unlock()
	return g, nil
}

func (f *factory) createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	g, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.metrics = next
	g.mu.Unlock()
	return g, nil
}

func (f *factory) createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	g, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.logs = next
	g.mu.Unlock()
	return g, nil
}
