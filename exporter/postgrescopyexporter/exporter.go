package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"runtime"
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

// directStream is the ledger's stream name for direct (non-Redis) batches.
const directStream = "direct"

// pgExporter is one signal's exporter; the client behind it is shared.
type pgExporter struct {
	cfg    *Config
	logger *zap.Logger
	shared *sharedClient

	mu      sync.Mutex
	started bool

	// batches and entryBufs (Redis mode) keep at most one batch and one
	// entry buffer per queue consumer or, in Redis mode, per core.
	batches   warm[*rows.Batch]
	entryBufs warm[[]byte]
	layout    *rows.Layout
}

func newExporter(cfg *Config, set exporter.Settings) (*pgExporter, error) {
	s, err := acquireClient(cfg, set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	keep := 1
	if q := cfg.QueueConfig; q.HasValue() {
		keep = max(keep, q.Get().NumConsumers)
	}
	if cfg.Redis.HasValue() {
		// Without a queue in front, receivers call in concurrently: keep
		// about one batch per core busy encoding.
		keep = max(keep, runtime.GOMAXPROCS(0))
	}
	e := &pgExporter{cfg: cfg, logger: set.Logger, shared: s, batches: make(warm[*rows.Batch], keep),
		entryBufs: make(warm[[]byte], keep), layout: s.c.layout}
	return e, nil
}

// warm keeps up to cap(w) values (encoded batches, entry buffers) whose
// memory a later push reuses. Unlike a sync.Pool, which the GC empties every
// other cycle (often, with tens of MB per batch), it keeps them: regrowing a
// batch's buffers from nothing was most of the direct path's CPU in
// profiles. Its capacity bounds the memory kept.
type warm[T any] chan T

// get returns a kept value, or false when none is.
func (w warm[T]) get() (T, bool) {
	select {
	case v := <-w:
		return v, true
	default:
		var zero T
		return zero, false
	}
}

// put keeps v for a later push, or drops it when enough are kept.
func (w warm[T]) put(v T) {
	select {
	case w <- v:
	default:
	}
}

// getBatch returns an empty batch, with the buffers of an earlier one when
// one is free.
func (e *pgExporter) getBatch() *rows.Batch {
	if b, ok := e.batches.get(); ok {
		b.Reset()
		return b
	}
	return e.cfg.newBatch(e.layout)
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
	if e.redisMode() {
		return e.enqueue(ctx, "traces", td.SpanCount(), func(b *rows.Batch) { b.AddTraces(td) })
	}
	return e.push(ctx, func(b *rows.Batch) { b.AddTraces(td) })
}

func (e *pgExporter) pushMetrics(ctx context.Context, md pmetric.Metrics) error {
	if e.redisMode() {
		return e.enqueue(ctx, "metrics", md.DataPointCount(), func(b *rows.Batch) { b.AddMetrics(md) })
	}
	return e.push(ctx, func(b *rows.Batch) { b.AddMetrics(md) })
}

func (e *pgExporter) pushLogs(ctx context.Context, ld plog.Logs) error {
	if e.redisMode() {
		return e.enqueue(ctx, "logs", ld.LogRecordCount(), func(b *rows.Batch) { b.AddLogs(ld) })
	}
	return e.push(ctx, func(b *rows.Batch) { b.AddLogs(ld) })
}

func (e *pgExporter) redisMode() bool { return e.cfg.Redis.HasValue() }

// enqueue is the Redis-mode push: the request's rows are encoded for COPY
// here, once, and the entry carries them as they are, so that flush workers
// only concatenate entries (no decoding, no second encoding). The request is
// durable once Redis has it; the flush workers write it to PostgreSQL.
func (e *pgExporter) enqueue(ctx context.Context, signal string, items int, add func(*rows.Batch)) error {
	if !e.isStarted() {
		return errNotStarted
	}
	if items == 0 {
		return nil
	}
	b := e.getBatch()
	defer e.batches.put(b)
	add(b)
	buf, _ := e.entryBufs.get()
	defer func() { e.entryBufs.put(buf) }()
	var err error
	buf, err = b.AppendEntry(buf[:0], e.cfg.Redis.Get().Compression == compressionS2)
	if err != nil {
		return consumererror.NewPermanent(fmt.Errorf("postgrescopy: encode %s request: %w", signal, err))
	}
	return e.shared.c.enqueue(ctx, signal, newRequestKey(), buf, items)
}

func (e *pgExporter) isStarted() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

func (e *pgExporter) push(ctx context.Context, add func(*rows.Batch)) error {
	if !e.isStarted() {
		return errNotStarted
	}
	b := e.getBatch()
	defer e.batches.put(b)
	add(b)
	if b.TotalRows() == 0 {
		return nil
	}
	id, err := pgwrite.ContentID(b)
	if err != nil {
		return consumererror.NewPermanent(fmt.Errorf("postgrescopy: encode batch: %w", err))
	}
	err = e.shared.c.writeBatch(ctx, b, &pgwrite.Ledger{Stream: directStream, IDs: []string{id}})
	if err == nil {
		return nil
	}
	if errors.Is(err, pgwrite.ErrAlreadyCommitted) {
		// A retry of a batch whose commit succeeded unseen: done already.
		e.logger.Debug("batch already committed; not writing it again", zap.String("ledger_id", id))
		return nil
	}
	switch pgwrite.Classify(err) {
	case pgwrite.Data:
		// Refused rows are isolated into the rejects table; a data error
		// that still comes back could not be (the rejects table refused
		// them too): retrying cannot help.
		e.logger.Error("PostgreSQL refused the batch's data; dropping it",
			zap.Int("rows", b.TotalRows()), zap.Error(err))
		return consumererror.NewPermanent(fmt.Errorf("postgrescopy: %w", err))
	case pgwrite.Config:
		// Kept retryable: an operator can fix a privilege or a table while
		// retry_on_failure holds the batch. The error carries the fix.
		err = e.shared.c.explain(err)
		e.logger.Error("PostgreSQL refused the write; fix the configuration", zap.Error(err))
		return err
	default:
		return err
	}
}
