package flush

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// flush writes entries' rows and their ledger keys in one transaction, then
// acknowledges the entries. An entry's ledger key is its request's key
// (assigned once, before the XADD), so that both a redelivered entry (a
// crash between COMMIT and XACK) and a request added twice (a lost XADD
// reply, resent) are recognized: they are acknowledged, not written again.
// Two requests with identical bytes have two keys: both are written.
func (f *Worker) flush(ctx context.Context, entries []coord.Entry) error {
	key := f.stream.Ledger()
	all := make([]keyedEntry, 0, len(entries))
	known := entries[:0:0]
	for _, e := range entries {
		if !readable(e) {
			// Written by a newer release: left pending (not acknowledged) for
			// a replica that reads it, which claims it after claim_after.
			f.logger.Error("stream entry of an unknown format, written by a newer release; leaving it for a replica that can read it",
				zap.String("stream", f.stream.Name()), zap.String("entry", e.ID), zap.String("format", e.Format))
			continue
		}
		known = append(known, e)
		if !e.Deleted {
			all = append(all, keyedEntry{Entry: e, key: ledgerKey(e)})
		}
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
			f.tel.LedgerHits.Add(ctx, int64(len(done)), f.tel.Attrs)
		}
		if len(todo) > 0 {
			leave, err := f.cfg.Admission.Enter(ctx, oldestEntry(todo))
			if err != nil {
				return err
			}
			began := time.Now()
			err = f.write(ctx, key, todo)
			leave()
			if errors.Is(err, pgwrite.ErrAlreadyCommitted) && attempt == 0 {
				// Another consumer committed some of these meanwhile: sort
				// them out through the ledger and write the rest.
				continue
			}
			if err != nil {
				return err
			}
			f.logCommitted(todo, began)
		}
		return f.stream.Ack(ctx, entries)
	}
}

// ledgerKey is an entry's identity in the ledger: its request's key, or for
// an entry without one (damaged) its stream id, which still recognizes a
// redelivery.
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
func (f *Worker) splitCommitted(ctx context.Context, key string, entries []keyedEntry, force bool) (todo, done []keyedEntry, err error) {
	var ids []string
	for _, e := range entries {
		if e.Redelivered || force {
			ids = append(ids, e.key)
		}
	}
	if len(ids) == 0 {
		return entries, nil, nil
	}
	committed, err := f.w.Committed(ctx, key, ids)
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
// replica's column layout go in one transaction; entries of each other
// layout in one more each.
func (f *Worker) write(ctx context.Context, key string, entries []keyedEntry) error {
	groups := map[*tables.Layout][]keyedEntry{}
	var order []*tables.Layout
	seen := make(map[string]bool, len(entries))
	for _, e := range entries {
		if seen[e.key] {
			// The same request twice in one batch: write it once.
			f.tel.LedgerHits.Add(ctx, 1, f.tel.Attrs)
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
func (f *Worker) layoutOf(e keyedEntry) *tables.Layout {
	own := f.w.Layout()
	if !entry.Reads(e.Format) {
		return own
	}
	desc, err := entry.Descriptor(e.Data)
	if err != nil || string(desc) == string(own.Descriptor()) {
		return own
	}
	l, err := f.w.OtherLayout(desc)
	if err != nil {
		return own
	}
	return l
}

// batchFor returns this worker's batch for layout l.
func (f *Worker) batchFor(l *tables.Layout) *rows.Batch {
	if l == f.w.Layout() {
		return f.batch
	}
	if f.others == nil {
		f.others = map[*tables.Layout]*rows.Batch{}
	}
	b := f.others[l]
	if b == nil {
		b = f.cfg.NewBatch(l)
		f.others[l] = b
	}
	return b
}

// writeGroup writes entries of layout l and their ledger keys in one
// transaction. They are streamed into COPY straight from the entries: no
// batch is built. A streamed write that finds a damaged entry or a row
// PostgreSQL refuses goes through a batch (writeBatchGroup), which
// quarantines the entry and isolates the row; that costs the streamed
// attempt, rolled back, and only then.
func (f *Worker) writeGroup(ctx context.Context, key string, l *tables.Layout, entries []keyedEntry) error {
	ids := make([]string, 0, len(entries))
	for _, e := range entries {
		ids = append(ids, e.key)
	}
	ledger := &pgwrite.Ledger{Stream: key, IDs: ids}
	if f.addEntries(l, entries) {
		wctx, cancel := f.writeContext()
		err := f.w.WriteEntries(wctx, &f.entries, ledger)
		cancel()
		if err == nil {
			f.tel.BatchRows.Record(ctx, int64(f.entries.TotalRows()), f.tel.Attrs)
			return nil
		}
		if pgwrite.Classify(err) != pgwrite.Data {
			return fmt.Errorf("flush %d entries of %s: %w", len(entries), key, err)
		}
		f.logger.Debug("streamed write refused; writing its entries through a batch", zap.String("stream", key), zap.Error(err))
	}
	return f.writeBatchGroup(ctx, key, f.batchFor(l), entries, ledger)
}

// addEntries fills f.entries with entries of layout l, and reports whether
// they can be streamed: all of a format this release reads, with headers
// that parse.
func (f *Worker) addEntries(l *tables.Layout, entries []keyedEntry) bool {
	f.entries.Reset(l)
	for _, e := range entries {
		if !entry.Reads(e.Format) || f.entries.Add(e.Data) != nil {
			return false
		}
	}
	return true
}

// writeContext bounds one write by the exporter's timeout, in the context of
// writes: a write in flight when the loop stops is finished, not abandoned
// (its entries would otherwise wait claim_after for another consumer),
// unless the shutdown deadline passes first.
func (f *Worker) writeContext() (context.Context, context.CancelFunc) {
	if t := f.cfg.Timeout; t > 0 {
		return context.WithTimeout(f.writes, t)
	}
	return context.WithCancel(f.writes)
}

// errNoFormat is an entry without a format that is not a deleted one.
var errNoFormat = fmt.Errorf("%w: the entry has no format", entry.ErrMalformed)

// writeBatchGroup writes entries through b, decoded and checked one by one.
func (f *Worker) writeBatchGroup(ctx context.Context, key string, b *rows.Batch, entries []keyedEntry, ledger *pgwrite.Ledger) error {
	b.Reset()
	ledger.Quarantine = ledger.Quarantine[:0]
	for _, e := range entries {
		err := errNoFormat
		if entry.Reads(e.Format) {
			err = entry.AddTo(b, e.Data)
		}
		if err != nil {
			// A foreign or corrupted entry: retrying it could only wedge the
			// stream. It goes to the quarantine with the batch, and its ledger
			// key commits with it, so it is acked once its bytes are kept.
			ledger.Quarantine = append(ledger.Quarantine, quarantined(f.stream.Name(), e, err))
		}
	}
	wctx, cancel := f.writeContext()
	defer cancel()
	if err := f.w.WriteBatch(wctx, b, ledger); err != nil {
		return fmt.Errorf("flush %d entries of %s: %w", len(entries), key, err)
	}
	f.reportQuarantined(ctx, ledger.Quarantine)
	f.tel.BatchRows.Record(ctx, int64(b.TotalRows()), f.tel.Attrs)
	return nil
}

// quarantined is an entry of stream that cannot be read, for the quarantine
// table, with why.
func quarantined(stream string, e keyedEntry, err error) pgwrite.Quarantined {
	return pgwrite.Quarantined{Stream: stream, EntryID: e.ID, LedgerKey: e.key, Format: e.Format, Reason: err.Error(), Payload: e.Data}
}

// reportQuarantined counts and logs entries once their quarantine has
// committed. The payload is never logged: it is telemetry, and in the table.
func (f *Worker) reportQuarantined(ctx context.Context, q []pgwrite.Quarantined) {
	if len(q) == 0 {
		return
	}
	f.tel.Undecodable.Add(ctx, int64(len(q)), f.tel.Attrs)
	for _, e := range q {
		f.logger.Error("stream entry cannot be decoded; stored it in the quarantine table and acknowledged it",
			zap.String("stream", e.Stream), zap.String("entry", e.EntryID), zap.String("format", e.Format),
			zap.Int("bytes", len(e.Payload)), zap.String("table", f.cfg.Quarantine),
			zap.String("reason", e.Reason))
	}
}

// logCommitted says at debug level how long each entry waited in Redis: from
// its stream id's time (the XADD, just before the request's acknowledgement
// or its replicas' confirmation) to now, its commit; and the write's items,
// start (once admitted) and length. The bench reads it.
func (f *Worker) logCommitted(entries []keyedEntry, began time.Time) {
	ce := f.logger.Check(zap.DebugLevel, "entries committed")
	if ce == nil {
		return
	}
	now := time.Now()
	ages := make([]int64, 0, len(entries))
	items := 0
	for _, e := range entries {
		items += e.Items
		if t, ok := entryTime(e.ID); ok {
			ages = append(ages, now.Sub(t).Milliseconds())
		}
	}
	// The write's items, start and length show which flushes a burst ends on.
	ce.Write(zap.String("stream", f.stream.Name()), zap.Int("items", items),
		zap.Time("write_start", began), zap.Float64("write_ms", float64(now.Sub(began).Microseconds())/1000),
		zap.Int64s("xadd_to_commit_ms", ages))
}
