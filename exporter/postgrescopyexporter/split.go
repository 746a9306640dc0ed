package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/request"
)

// minQueueBytes is the smallest queue_size a bytes-sized queue accepts: a
// smaller one holds a few spans at a time (and a queue_size written for an
// items queue, such as 200000, reads as 200 KB).
const minQueueBytes = 1 << 20

// splitPieces is how many pieces of an oversized request fill the queue:
// they are offered together, so several are written while the next waits.
const splitPieces = 4

// splitter sits in front of the exporterhelper: a request larger than the
// whole sending queue, which the queue would refuse every time it is offered
// ("element size too large"), is cut into pieces that fit, each offered as a
// request of its own, and the call returns once every piece has its answer.
type splitter[T any] struct {
	codec *request.Codec[T]
	sizer exporterhelper.RequestSizerType
	limit int // the queue's queue_size; 0: nothing to split
	clone func(T) T
}

func newSplitter[T any](cfg *Config, c *request.Codec[T], clone func(T) T) splitter[T] {
	s := splitter[T]{codec: c, clone: clone}
	if !cfg.QueueConfig.HasValue() {
		return s
	}
	q := cfg.QueueConfig.Get()
	if q.Sizer != exporterhelper.RequestSizerTypeItems && q.Sizer != exporterhelper.RequestSizerTypeBytes {
		return s // sized in requests: any request fits
	}
	s.sizer, s.limit = q.Sizer, int(q.QueueSize)
	return s
}

// sizeKey carries a request's measured size from consume to the converter.
type sizeKey struct{}

// measuredSize is the size consume measured for the request the converter
// builds, or -1.
func measuredSize(ctx context.Context) int {
	if n, ok := ctx.Value(sizeKey{}).(int); ok {
		return n
	}
	return -1
}

// consume hands d to next whole when it fits the queue, else in pieces.
// mutable says whether the pipeline lets the exporter change d (the batcher
// does); if not, the pieces are cut from a copy.
func (s splitter[T]) consume(ctx context.Context, d T, mutable bool, next func(context.Context, T) error) error {
	if s.limit <= 0 {
		return next(ctx, d)
	}
	n := request.Size(s.codec, d, s.sizer)
	if n <= s.limit {
		return next(context.WithValue(ctx, sizeKey{}, n), d)
	}
	if !mutable {
		d = s.clone(d)
	}
	pieces := request.Split(s.codec, d, max(s.limit/splitPieces, 1), s.sizer)
	errs := make([]error, len(pieces))
	sem := make(chan struct{}, splitPieces)
	var wg sync.WaitGroup
	for i, p := range pieces {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = next(ctx, p)
		})
	}
	wg.Wait()
	return piecesError(errs, n, s)
}

// piecesError sums up the pieces' answers. Any retryable failure makes the
// whole retryable (the client sends it again; the pieces already committed
// are then written twice, as with any retried request), so a permanent
// error of one piece does not drop the others' data; only when every failed
// piece failed permanently is the answer permanent.
func piecesError[T any](errs []error, size int, s splitter[T]) error {
	var failed []error
	permanent := true
	for _, err := range errs {
		if err != nil {
			failed = append(failed, err)
			permanent = permanent && consumererror.IsPermanent(err)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	err := fmt.Errorf("postgrescopy: %d of the %d pieces of a request of %d %s (over sending_queue::queue_size, %d) failed: %v",
		len(failed), len(errs), size, unit(s.sizer), s.limit, errors.Join(failed...))
	if permanent {
		return consumererror.NewPermanent(err)
	}
	return err
}

func unit(szt exporterhelper.RequestSizerType) string {
	if szt == exporterhelper.RequestSizerTypeBytes {
		return "bytes"
	}
	return "items"
}

func cloneTraces(td ptrace.Traces) ptrace.Traces {
	c := ptrace.NewTraces()
	td.CopyTo(c)
	return c
}

func cloneMetrics(md pmetric.Metrics) pmetric.Metrics {
	c := pmetric.NewMetrics()
	md.CopyTo(c)
	return c
}

func cloneLogs(ld plog.Logs) plog.Logs {
	c := plog.NewLogs()
	ld.CopyTo(c)
	return c
}
