package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/sharedcomponent"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

var errNotStarted = errors.New("postgrescopy exporter is not started")

// directStream is the ledger's stream name for direct (non-Redis) batches.
const directStream = "direct"

// pgExporter is one signal's exporter; the client behind it is shared. Its
// lifecycle state is its sharer's (started once, read without a lock).
type pgExporter struct {
	cfg    *Config
	logger *zap.Logger
	shared *sharedcomponent.Sharer[*client]

	// batches and entryBufs (Redis mode) keep at most one batch and one
	// entry buffer per queue consumer or, in Redis mode, per core.
	batches   warm[*rows.Batch]
	entryBufs warm[[]byte]
	layout    *tables.Layout
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
		entryBufs: make(warm[[]byte], keep), layout: s.Unwrap().layout}
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

func (e *pgExporter) start(ctx context.Context, host component.Host) error {
	return e.shared.Start(ctx, host)
}

// shutdown releases this signal's share of the client; the last one stops it,
// within ctx.
func (e *pgExporter) shutdown(ctx context.Context) error {
	return e.shared.Shutdown(ctx)
}

// pusher is the exporterhelper consume function of one signal: it writes a
// request (one or more parts, see internal/request) to PostgreSQL, or in Redis mode
// adds each part to the signal's stream.
func pusher[T any](e *pgExporter, c *request.Codec[T]) func(context.Context, xexporterhelper.Request) error {
	return func(ctx context.Context, req xexporterhelper.Request) error {
		r, ok := req.(*request.Request[T])
		if !ok {
			return consumererror.NewPermanent(fmt.Errorf("postgrescopy: a %T is not a %s request", req, c.Signal()))
		}
		if e.redisMode() {
			return enqueueParts(ctx, e, r)
		}
		return push(ctx, e, r)
	}
}

func (e *pgExporter) redisMode() bool { return e.cfg.Redis.HasValue() }

// enqueueParts is the Redis-mode push: each part becomes one entry, under
// its key. Its rows are encoded for COPY here, once, and the entry carries
// them as they are, so that flush workers only concatenate entries (no
// decoding, no second encoding). A part is durable once Redis has it; the
// flush workers write it to PostgreSQL. A retry of the request adds only the
// parts an earlier attempt did not.
func enqueueParts[T any](ctx context.Context, e *pgExporter, r *request.Request[T]) error {
	if !e.isStarted() {
		return errNotStarted
	}
	for _, p := range r.Parts() {
		if p.Sent {
			continue
		}
		if err := enqueuePart(ctx, e, r.Codec(), p); err != nil {
			return err
		}
		p.Sent = true
	}
	return nil
}

func enqueuePart[T any](ctx context.Context, e *pgExporter, c *request.Codec[T], p *request.Part[T]) error {
	items := p.Items(c)
	if items == 0 {
		return nil
	}
	b := e.getBatch()
	defer e.batches.put(b)
	c.Add(b, p.Data)
	buf, _ := e.entryBufs.get()
	defer func() { e.entryBufs.put(buf) }()
	var err error
	buf, err = entry.Append(buf[:0], b, e.cfg.Redis.Get().Compression == compressionS2)
	if err != nil {
		return consumererror.NewPermanent(fmt.Errorf("postgrescopy: encode %s request: %w", c.Signal(), err))
	}
	return e.shared.Unwrap().enqueue(ctx, c.Signal(), p.Key, buf, items)
}

func (e *pgExporter) isStarted() bool { return e.shared.Started() }

// push is the direct write: every part's rows in one batch, built once, and
// every part's key in the ledger in the same transaction. When a key is there
// already (a retry of a commit whose answer was lost, or a part replayed from
// a persistent queue next to new ones) only the parts not committed are
// written.
func push[T any](ctx context.Context, e *pgExporter, r *request.Request[T]) error {
	if !e.isStarted() {
		return errNotStarted
	}
	c := e.shared.Unwrap()
	ctx, cancel := c.writeContext(ctx)
	defer cancel()
	b := e.getBatch()
	defer e.batches.put(b)
	parts := r.Parts()
	for {
		for _, p := range parts {
			r.Codec().Add(b, p.Data)
		}
		if b.TotalRows() == 0 {
			return nil
		}
		keys := make([]string, len(parts))
		for i, p := range parts {
			keys[i] = p.Key
		}
		err := c.sink.WriteBatch(ctx, b, &pgwrite.Ledger{Stream: directStream, IDs: keys})
		if !errors.Is(err, pgwrite.ErrAlreadyCommitted) {
			c.noteWrite(err)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, pgwrite.ErrAlreadyCommitted) {
			return e.writeFailed(c.stoppedError(err), b.TotalRows())
		}
		done, err := c.sink.Committed(ctx, directStream, keys)
		if err != nil {
			return c.stoppedError(err)
		}
		left := parts[:0:0]
		for _, p := range parts {
			if !done[p.Key] {
				left = append(left, p)
			}
		}
		e.logger.Debug("parts already committed; not writing them again",
			zap.Int("committed", len(parts)-len(left)), zap.Int("left", len(left)))
		if len(left) == len(parts) {
			// The conflicting key is gone again (pruned between the two
			// statements): the retry sender tries once more.
			return fmt.Errorf("postgrescopy: ledger conflict on a batch the ledger no longer holds")
		}
		if len(left) == 0 {
			return nil
		}
		parts = left
		b.Reset()
	}
}

// writeFailed logs a failed direct write by its class and returns it as the
// exporterhelper must see it (pgwrite.ConsumerError).
func (e *pgExporter) writeFailed(err error, n int) error {
	switch pgwrite.Classify(err) {
	case pgwrite.Data:
		// Refused rows are isolated into the rejects table; a data error
		// that still comes back could not be (the rejects table refused
		// them too): retrying cannot help.
		e.logger.Error("PostgreSQL refused the batch's data; dropping it",
			zap.Int("rows", n), zap.Error(err))
		err = fmt.Errorf("postgrescopy: %w", err)
	case pgwrite.Config:
		// The error carries the fix.
		err = e.shared.Unwrap().sink.Explain(err)
		e.logger.Error("PostgreSQL refused the write; fix the configuration", zap.Error(err))
	}
	return pgwrite.ConsumerError(err)
}

// converter gives each request its key as it enters the exporter, before the
// queue and the retry sender, and refuses, as permanent, a request the queue
// could never hold: the splitter in front cuts larger ones into pieces that
// fit, so only a single span, data point or log record larger than a
// bytes-sized queue is refused.
func converter[T any](cfg *Config, c *request.Codec[T]) func(context.Context, T) (xexporterhelper.Request, error) {
	return func(ctx context.Context, d T) (xexporterhelper.Request, error) {
		r := request.New(c, d)
		if n := measuredSize(ctx); n >= 0 && cfg.QueueConfig.HasValue() {
			r = request.NewSized(c, d, cfg.QueueConfig.Get().Sizer, n)
		}
		if err := cfg.fitsQueue(r); err != nil {
			return nil, err
		}
		return r, nil
	}
}

// fitsQueue refuses a request larger than the whole sending queue: the queue
// would refuse it as retryable ("element size too large"), and the client
// would retry it forever.
func (cfg *Config) fitsQueue(r interface {
	Size(exporterhelper.RequestSizerType) int
}) error {
	if !cfg.QueueConfig.HasValue() {
		return nil
	}
	q := cfg.QueueConfig.Get()
	if q.Sizer != exporterhelper.RequestSizerTypeItems && q.Sizer != exporterhelper.RequestSizerTypeBytes {
		return nil // sized in requests: any request fits
	}
	if n := r.Size(q.Sizer); int64(n) > q.QueueSize {
		return consumererror.NewPermanent(fmt.Errorf(
			"postgrescopy: request of %d %s exceeds sending_queue::queue_size (%d %s, sizer %s) and can never be queued: send smaller requests or raise queue_size",
			n, q.Sizer.String(), q.QueueSize, q.Sizer.String(), q.Sizer.String()))
	}
	return nil
}
