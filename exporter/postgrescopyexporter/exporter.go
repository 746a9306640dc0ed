package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
)

var errNotStarted = errors.New("postgrescopy exporter is not started")

// pgExporter is one signal's exporter; the client behind it is shared.
type pgExporter struct {
	cfg    *Config
	logger *zap.Logger
	shared *sharedClient

	mu      sync.Mutex
	started bool

	batches sync.Pool
}

func newExporter(cfg *Config, set exporter.Settings) (*pgExporter, error) {
	s, err := acquireClient(cfg, set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	e := &pgExporter{cfg: cfg, logger: set.Logger, shared: s}
	e.batches.New = func() any { return new(rows.Batch) }
	return e, nil
}

func (e *pgExporter) start(ctx context.Context, _ component.Host) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return nil
	}
	if err := e.shared.start(ctx); err != nil {
		e.shared.forget()
		return err
	}
	e.started = true
	return nil
}

func (e *pgExporter) shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.started {
		return nil
	}
	e.started = false
	e.shared.release()
	return nil
}

func (e *pgExporter) pushTraces(ctx context.Context, td ptrace.Traces) error {
	return e.push(ctx, func(b *rows.Batch) { b.AddTraces(td) })
}

func (e *pgExporter) pushMetrics(ctx context.Context, md pmetric.Metrics) error {
	return e.push(ctx, func(b *rows.Batch) { b.AddMetrics(md) })
}

func (e *pgExporter) pushLogs(ctx context.Context, ld plog.Logs) error {
	return e.push(ctx, func(b *rows.Batch) { b.AddLogs(ld) })
}

func (e *pgExporter) push(ctx context.Context, add func(*rows.Batch)) error {
	e.mu.Lock()
	started := e.started
	e.mu.Unlock()
	if !started {
		return errNotStarted
	}
	b := e.batches.Get().(*rows.Batch)
	defer e.batches.Put(b)
	b.Reset()
	add(b)
	if b.TotalRows() == 0 {
		return nil
	}
	err := e.shared.c.write(ctx, b)
	if err == nil {
		return nil
	}
	switch pgwrite.Classify(err) {
	case pgwrite.Data:
		e.logger.Error("PostgreSQL refused the batch's data; dropping it",
			zap.Int("rows", b.TotalRows()), zap.Error(err))
		return consumererror.NewPermanent(fmt.Errorf("postgrescopy: %w", err))
	case pgwrite.Config:
		// Kept retryable: an operator can fix a privilege or a table while
		// retry_on_failure holds the batch.
		e.logger.Error("PostgreSQL refused the write; fix the configuration",
			zap.Error(e.shared.c.explain(err)))
		return err
	default:
		return err
	}
}
