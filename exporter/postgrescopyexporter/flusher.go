package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// signal is one telemetry signal's codec between pdata and stream entries.
type signal struct {
	name string
	// decode appends an entry's OTLP payload to a batch.
	decode func(data []byte, b *rows.Batch) error
}

var signals = []signal{
	{name: "traces", decode: func(data []byte, b *rows.Batch) error {
		td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(data)
		if err == nil {
			b.AddTraces(td)
		}
		return err
	}},
	{name: "metrics", decode: func(data []byte, b *rows.Batch) error {
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(data)
		if err == nil {
			b.AddMetrics(md)
		}
		return err
	}},
	{name: "logs", decode: func(data []byte, b *rows.Batch) error {
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		if err == nil {
			b.AddLogs(ld)
		}
		return err
	}},
}

// entriesPerRead bounds one XREADGROUP: entries are whole requests, so a
// batch of max_rows usually needs only a few reads.
const entriesPerRead = 16

// quietFraction: a batch is flushed early when no new entry came for
// max_wait/quietFraction after the last read.
const quietFraction = 10

// flusher is one flush worker of one signal: it owns a consumer name in the
// group, reads and claims entries, writes them in one transaction with their
// ledger rows, then acknowledges and deletes them.
type flusher struct {
	c      *client
	sig    signal
	stream *coord.Stream
	rc     *RedisConfig
	logger *zap.Logger
	attrs  metric.MeasurementOption

	batch       *rows.Batch
	ownPending  bool // a flush failed: re-read this consumer's pending entries first
	lastClaim   time.Time
	lastProblem string
}

func (f *flusher) run(ctx context.Context) {
	defer f.c.wg.Done()
	f.waitGroup(ctx)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if !f.c.ready.Load() {
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		entries, err := f.next(ctx)
		if err == nil && len(entries) > 0 {
			err = f.flush(ctx, entries)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			f.ownPending = true
			f.problem("flush worker is retrying", err)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 10*time.Second)
			continue
		}
		if f.lastProblem != "" {
			f.logger.Info("flush worker recovered", zap.String("stream", f.stream.Keys().Stream))
			f.lastProblem = ""
		}
		backoff = 100 * time.Millisecond
	}
}

// waitGroup creates the consumer group, waiting for Redis if needed.
func (f *flusher) waitGroup(ctx context.Context) {
	delay := 500 * time.Millisecond
	for ctx.Err() == nil {
		err := f.stream.EnsureGroup(ctx)
		if err == nil {
			return
		}
		f.problem("waiting for Redis", err)
		sleep(ctx, delay)
		delay = min(delay*2, 10*time.Second)
	}
}

// problem logs a failure when it differs from the previous one.
func (f *flusher) problem(msg string, err error) {
	if s := err.Error(); s != f.lastProblem {
		f.lastProblem = s
		f.logger.Warn(msg, zap.String("stream", f.stream.Keys().Stream), zap.Error(err))
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// next returns the next entries to flush: this consumer's own pending ones
// after a failure, then entries other consumers abandoned, then new ones
// accumulated up to max_rows, max_bytes or max_wait.
func (f *flusher) next(ctx context.Context) ([]coord.Entry, error) {
	if f.ownPending {
		entries, err := f.stream.ReadOwnPending(ctx, entriesPerRead)
		if err != nil {
			return nil, err
		}
		if len(entries) > 0 {
			return entries, nil
		}
		f.ownPending = false
	}
	if time.Since(f.lastClaim) >= f.rc.ClaimAfter/4 {
		f.lastClaim = time.Now()
		entries, err := f.stream.Claim(ctx, f.rc.ClaimAfter, entriesPerRead)
		if err != nil {
			return nil, err
		}
		if len(entries) > 0 {
			f.c.tel.PostgrescopyClaimedEntries.Add(ctx, int64(len(entries)), f.attrs)
			f.logger.Info("claimed entries abandoned by another consumer",
				zap.String("stream", f.stream.Keys().Stream), zap.Int("entries", len(entries)))
			return entries, nil
		}
	}
	var entries []coord.Entry
	items, size := 0, 0
	deadline := time.Now().Add(f.rc.MaxWait)
	quiet := f.rc.MaxWait / quietFraction
	for items < f.rc.MaxRows && int64(size) < f.rc.MaxBytes {
		wait := time.Until(deadline)
		if wait <= 0 {
			break
		}
		count := int64(entriesPerRead)
		if len(entries) > 0 {
			// The stream went quiet: the producers are slower than this
			// worker, so waiting longer only adds latency (under load,
			// entries keep coming and the batch fills to max_rows).
			wait = min(wait, quiet)
			// Read about what max_rows still has room for, at the items per
			// entry seen so far, rather than overshooting it by a full read.
			count = min(count, max(1, int64((f.rc.MaxRows-items)*len(entries)/max(items, 1))))
		}
		got, err := f.stream.ReadNew(ctx, count, wait)
		if err != nil {
			if len(entries) > 0 {
				// What was read is pending on us: flush it now, and let the
				// next round see the error again.
				break
			}
			return nil, err
		}
		if len(got) == 0 {
			break
		}
		if len(entries) == 0 {
			// The batch's wait starts with its first entry, not with the read.
			deadline = time.Now().Add(f.rc.MaxWait)
		}
		for _, e := range got {
			items += e.Items
			size += len(e.Data)
		}
		entries = append(entries, got...)
	}
	return entries, nil
}

// flush writes entries' rows and their ledger keys in one transaction, then
// acknowledges the entries. An entry's ledger key is a hash of its payload
// (pgwrite.PayloadID), not its stream id, so that both a redelivered entry (a
// crash between COMMIT and XACK) and a request added twice (a lost XADD
// reply, retried) are recognized: they are acknowledged, not written again.
func (f *flusher) flush(ctx context.Context, entries []coord.Entry) error {
	key := f.stream.Keys().Stream
	// Hash each payload once: the lookup and the write both need it.
	all := make([]keyedEntry, len(entries))
	for i, e := range entries {
		all[i] = keyedEntry{Entry: e, key: pgwrite.PayloadID(e.Data)}
	}
	for attempt := 0; ; attempt++ {
		todo, done, err := f.splitCommitted(ctx, key, all, attempt > 0)
		if err != nil {
			return err
		}
		if len(done) > 0 {
			f.c.tel.PostgrescopyLedgerHits.Add(ctx, int64(len(done)), f.attrs)
		}
		if len(todo) > 0 {
			err = f.write(ctx, key, todo)
			if errors.Is(err, pgwrite.ErrAlreadyCommitted) && attempt == 0 {
				// Another consumer committed some of these meanwhile: sort
				// them out through the ledger and write the rest.
				continue
			}
			if err != nil {
				return err
			}
		}
		if err := f.stream.Ack(ctx, entries); err != nil {
			return err
		}
		return nil
	}
}

// keyedEntry is a stream entry with its ledger key.
type keyedEntry struct {
	coord.Entry
	key string
}

// splitCommitted separates entries whose keys the ledger holds. Only entries
// that may have been delivered before need the lookup; a duplicate added as a
// new entry shows as a key conflict at insert, and is then looked up (force).
func (f *flusher) splitCommitted(ctx context.Context, key string, entries []keyedEntry, force bool) (todo, done []keyedEntry, err error) {
	var ids []string
	for _, e := range entries {
		if e.Redelivered || force {
			ids = append(ids, e.key)
		}
	}
	if len(ids) == 0 {
		return entries, nil, nil
	}
	committed, err := f.c.writer.Committed(ctx, key, ids)
	if err != nil {
		return nil, nil, err
	}
	for _, e := range entries {
		if committed[e.key] {
			done = append(done, e)
		} else {
			todo = append(todo, e)
		}
	}
	return todo, done, nil
}

func (f *flusher) write(ctx context.Context, key string, entries []keyedEntry) error {
	b := f.batch
	b.Reset()
	ids := make([]string, 0, len(entries))
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		id := e.key
		if seen[id] {
			// The same request twice in one batch: write it once.
			f.c.tel.PostgrescopyLedgerHits.Add(ctx, 1, f.attrs)
			continue
		}
		seen[id] = true
		ids = append(ids, id)
		if err := f.sig.decode(e.Data, b); err != nil {
			// A payload we wrote ourselves cannot be decoded: a foreign or
			// corrupted entry. It is recorded in the ledger (so it is acked)
			// and reported; retrying it could only wedge the stream.
			f.c.tel.PostgrescopyUndecodableEntries.Add(ctx, 1, f.attrs)
			f.logger.Error("stream entry is not a valid OTLP payload; skipping it",
				zap.String("stream", key), zap.String("entry", e.ID), zap.Int("bytes", len(e.Data)), zap.Error(err))
		}
	}
	// A batch in flight at shutdown is finished, not abandoned: its entries
	// would otherwise wait claim_after for another consumer.
	wctx := context.WithoutCancel(ctx)
	if t := f.c.cfg.TimeoutConfig.Timeout; t > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(wctx, t)
		defer cancel()
	}
	err := f.c.writeBatch(wctx, b, &pgwrite.Ledger{Stream: key, IDs: ids})
	if err != nil {
		return fmt.Errorf("flush %d entries of %s: %w", len(entries), key, err)
	}
	f.c.tel.PostgrescopyBatchRows.Record(ctx, int64(b.TotalRows()), f.attrs)
	return nil
}
