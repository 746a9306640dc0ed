package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	// decode appends a legacy entry's OTLP payload to a batch.
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

// idleWrites: a worker with entries flushes at once while fewer writes than
// this are in flight on its replica.
const idleWrites = 2

// quietPolls: a worker holding entries while it waits for the stream to go
// quiet looks this many times per quiet period whether PostgreSQL has become
// idle meanwhile (a write finished), and then flushes at once rather than at
// the end of the wait.
const quietPolls = 5

// flusher is one flush worker of one signal: it owns a consumer name in the
// group, reads and claims entries, writes them in one transaction with their
// ledger rows, then acknowledges and deletes them.
type flusher struct {
	c      *client
	rs     *redisSide
	sig    signal
	stream *coord.Stream
	rc     *RedisConfig
	logger *zap.Logger
	attrs  metric.MeasurementOption

	entries     rows.Entries                 // the entries of a streamed write
	batch       *rows.Batch                  // a write through a batch (legacy entries, damage, refused rows)
	others      map[*rows.Layout]*rows.Batch // batches of other replicas' layouts
	ownPending  bool                         // a flush failed: re-read this consumer's pending entries first
	perEntry    int                          // items per entry in the last reads, to size the next
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
			if coord.IsNoGroup(err) {
				// Redis lost the stream or the group (a restart without
				// persistence): recreate them, and read what was added since.
				f.problem("Redis lost the consumer group; recreating it", err)
				if err := f.rs.ensure(ctx, f.c, f.sig.name, f.stream); err == nil {
					continue
				}
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

// waitGroup creates the consumer group, waiting for Redis if needed. Start
// logged an unreachable Redis already: the wait is logged at debug level.
func (f *flusher) waitGroup(ctx context.Context) {
	delay := 500 * time.Millisecond
	for ctx.Err() == nil {
		err := f.rs.ensure(ctx, f.c, f.sig.name, f.stream)
		if err == nil {
			return
		}
		if s := err.Error(); s != f.lastProblem {
			f.lastProblem = s
			f.logger.Debug("waiting for Redis", zap.String("stream", f.stream.Keys().Stream), zap.Error(err))
		}
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
		if slices.ContainsFunc(entries, readable) {
			return entries, nil
		}
		// Nothing left but entries of a newer release, which stay pending.
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
	var quietAt time.Time // when the stream counts as quiet: quiet after the last entry
	for items < f.rc.MaxRows && int64(size) < f.rc.MaxBytes {
		wait := time.Until(deadline)
		if len(entries) > 0 {
			// The stream went quiet: the producers are slower than this
			// worker, so waiting longer only adds latency (under load,
			// entries keep coming and the batch fills to max_rows).
			wait = min(wait, time.Until(quietAt))
		}
		if wait <= 0 {
			break
		}
		count := int64(entriesPerRead)
		if f.perEntry > 0 {
			// Read about what max_rows still has room for, at the items per
			// entry seen last, rather than overshooting it by a full read.
			count = min(count, max(1, int64((f.rc.MaxRows-items)/f.perEntry)))
		}
		if len(entries) > 0 {
			wait = min(wait, max(time.Millisecond, quiet/quietPolls))
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
			if len(entries) > 0 && f.c.writing.Load() >= idleWrites {
				continue // PostgreSQL is still busy: wait on, up to quietAt
			}
			break
		}
		quietAt = time.Now().Add(quiet)
		if len(entries) == 0 {
			// The batch's wait starts with its first entry, not with the read.
			deadline = time.Now().Add(f.rc.MaxWait)
		}
		for _, e := range got {
			items += e.Items
			size += entryBytes(e)
		}
		entries = append(entries, got...)
		f.perEntry = max(1, items/len(entries))
		if f.c.writing.Load() < idleWrites {
			// PostgreSQL is (nearly) idle for this replica: waiting for a
			// fuller batch would only leave it so. Under load, writes are in
			// flight and batches fill while they run.
			break
		}
	}
	return entries, nil
}

// flush writes entries' rows and their ledger keys in one transaction, then
// acknowledges the entries. An entry's ledger key is its request's key
// (assigned once, before the XADD), so that both a redelivered entry (a
// crash between COMMIT and XACK) and a request added twice (a lost XADD
// reply, resent) are recognized: they are acknowledged, not written again.
// Two requests with identical bytes have two keys: both are written.
func (f *flusher) flush(ctx context.Context, entries []coord.Entry) error {
	key := f.stream.Keys().Stream
	all := make([]keyedEntry, 0, len(entries))
	known := entries[:0:0]
	for _, e := range entries {
		if !readable(e) {
			// Written by a newer release: left pending (not acknowledged) for
			// a replica that reads it, which claims it after claim_after.
			f.logger.Error("stream entry of an unknown format, written by a newer release; leaving it for a replica that can read it",
				zap.String("stream", key), zap.String("entry", e.ID), zap.String("format", e.Format))
			continue
		}
		known = append(known, e)
		all = append(all, keyedEntry{Entry: e, key: ledgerKey(e)})
	}
	entries = known
	if len(entries) == 0 {
		return nil
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

// entryBytes is what an entry adds to a transaction: its rows decompressed
// (max_bytes bounds what one transaction sends, not the bytes Redis holds).
func entryBytes(e coord.Entry) int {
	if e.Format == rows.EntryFormat {
		if n, err := rows.EntrySize(e.Data); err == nil {
			return n
		}
	}
	return len(e.Data)
}

// readable reports whether this release reads e's format.
func readable(e coord.Entry) bool {
	return e.Format == "" || e.Format == rows.EntryFormat
}

// ledgerKey is an entry's identity in the ledger: its request's key, or for
// an entry written without one (by an older release) its stream id, which
// still recognizes a redelivery.
func ledgerKey(e coord.Entry) string {
	if e.Key != "" {
		return e.Key
	}
	return e.ID
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

// write writes entries whose ledger keys are not committed. Entries of this
// replica's column layout (and legacy OTLP entries, decoded into it) go in
// one transaction; entries of each other layout in one more each.
func (f *flusher) write(ctx context.Context, key string, entries []keyedEntry) error {
	groups := map[*rows.Layout][]keyedEntry{}
	var order []*rows.Layout
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		if seen[e.key] {
			// The same request twice in one batch: write it once.
			f.c.tel.PostgrescopyLedgerHits.Add(ctx, 1, f.attrs)
			continue
		}
		seen[e.key] = true
		l := f.layoutOf(e)
		if _, ok := groups[l]; !ok {
			order = append(order, l)
		}
		groups[l] = append(groups[l], e)
	}
	for _, l := range order {
		if err := f.writeGroup(ctx, key, l, groups[l]); err != nil {
			return err
		}
	}
	return nil
}

// layoutOf returns the column layout of an entry's rows: this replica's,
// unless the entry names another one that parses. An entry whose layout does
// not parse is left to fail in this replica's batch, where it is reported.
func (f *flusher) layoutOf(e keyedEntry) *rows.Layout {
	if e.Format != rows.EntryFormat {
		return f.c.layout
	}
	desc, err := rows.EntryDescriptor(e.Data)
	if err != nil || string(desc) == string(f.c.layout.Descriptor()) {
		return f.c.layout
	}
	l, err := f.c.otherLayout(desc)
	if err != nil {
		return f.c.layout
	}
	return l
}

// batchFor returns this worker's batch for layout l.
func (f *flusher) batchFor(l *rows.Layout) *rows.Batch {
	if l == f.c.layout {
		return f.batch
	}
	if f.others == nil {
		f.others = map[*rows.Layout]*rows.Batch{}
	}
	b := f.others[l]
	if b == nil {
		b = f.c.cfg.newBatch(l)
		f.others[l] = b
	}
	return b
}

// writeGroup writes entries of layout l and their ledger keys in one
// transaction. Entries of EntryFormat are streamed into COPY straight from
// the entries (client.writeEntries): no batch is built. Legacy entries, and
// a streamed write that finds a damaged entry or a row PostgreSQL refuses,
// go through a batch (writeBatchGroup), which skips the entry and isolates
// the row; that costs the streamed attempt, rolled back, and only then.
func (f *flusher) writeGroup(ctx context.Context, key string, l *rows.Layout, entries []keyedEntry) error {
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.key)
	}
	ledger := &pgwrite.Ledger{Stream: key, IDs: ids}
	if f.addEntries(l, entries) {
		wctx, cancel := f.writeContext(ctx)
		err := f.c.writeEntries(wctx, &f.entries, ledger)
		cancel()
		if err == nil {
			f.c.tel.PostgrescopyBatchRows.Record(ctx, int64(f.entries.TotalRows()), f.attrs)
			return nil
		}
		if !errors.Is(err, rows.ErrEntry) && pgwrite.Classify(err) != pgwrite.Data {
			return fmt.Errorf("flush %d entries of %s: %w", len(entries), key, err)
		}
		f.logger.Debug("streamed write refused; writing its entries through a batch", zap.String("stream", key), zap.Error(err))
	}
	return f.writeBatchGroup(ctx, key, f.batchFor(l), entries, ledger)
}

// addEntries fills f.entries with entries of layout l, and reports whether
// they can be streamed: all of EntryFormat, with headers that parse.
func (f *flusher) addEntries(l *rows.Layout, entries []keyedEntry) bool {
	f.entries.Reset(l)
	for _, e := range entries {
		if e.Format != rows.EntryFormat || f.entries.Add(e.Data) != nil {
			return false
		}
	}
	return true
}

// writeContext bounds one write by the exporter's timeout. A write in
// flight at shutdown is finished, not abandoned: its entries would
// otherwise wait claim_after for another consumer.
func (f *flusher) writeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx := context.WithoutCancel(ctx)
	if t := f.c.cfg.TimeoutConfig.Timeout; t > 0 {
		return context.WithTimeout(wctx, t)
	}
	return wctx, func() {}
}

// writeBatchGroup writes entries through b, decoded and checked one by one.
func (f *flusher) writeBatchGroup(ctx context.Context, key string, b *rows.Batch, entries []keyedEntry, ledger *pgwrite.Ledger) error {
	b.Reset()
	ledger.Quarantine = ledger.Quarantine[:0]
	for _, e := range entries {
		if err := f.add(b, e); err != nil {
			// A foreign or corrupted entry: retrying it could only wedge the
			// stream. It goes to the quarantine with the batch, and its ledger
			// key commits with it, so it is acked once its bytes are kept.
			ledger.Quarantine = append(ledger.Quarantine, quarantined(key, e, err))
		}
	}
	wctx, cancel := f.writeContext(ctx)
	defer cancel()
	if err := f.c.writeBatch(wctx, b, ledger); err != nil {
		return fmt.Errorf("flush %d entries of %s: %w", len(entries), key, err)
	}
	f.reportQuarantined(ctx, ledger.Quarantine)
	f.c.tel.PostgrescopyBatchRows.Record(ctx, int64(b.TotalRows()), f.attrs)
	return nil
}

// add appends one entry's rows to b: rows already encoded for COPY are
// copied as they are; a legacy OTLP payload is decoded and encoded.
func (f *flusher) add(b *rows.Batch, e keyedEntry) error {
	if e.Format == rows.EntryFormat {
		return b.AddEntry(e.Data)
	}
	return f.sig.decode(e.Data, b)
}
