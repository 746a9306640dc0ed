package flush

import (
	"context"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
)

// next returns the next entries to flush: this consumer's own pending ones
// after a failure, then entries other consumers abandoned, then new ones
// accumulated up to max_rows, max_bytes or max_wait, flushed early when the
// stream goes quiet or PostgreSQL is (nearly) idle.
func (f *Worker) next(ctx context.Context) ([]coord.Entry, error) {
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
	if f.clock.Now().Sub(f.lastClaim) >= f.cfg.ClaimAfter/4 {
		f.lastClaim = f.clock.Now()
		entries, err := f.stream.Claim(ctx, f.cfg.ClaimAfter, entriesPerRead)
		if err != nil {
			return nil, err
		}
		if len(entries) > 0 {
			f.tel.Claimed.Add(ctx, int64(len(entries)), f.tel.Attrs)
			f.logger.Info("claimed entries abandoned by another consumer",
				zap.String("stream", f.stream.Name()), zap.Int("entries", len(entries)))
			return entries, nil
		}
	}
	var entries []coord.Entry
	items, size := 0, 0
	deadline := f.clock.Now().Add(f.cfg.MaxWait)
	quiet := f.cfg.MaxWait / quietFraction
	var quietAt time.Time // when the stream counts as quiet: quiet after the last entry
	for items < f.cfg.MaxRows && int64(size) < f.cfg.MaxBytes {
		wait := deadline.Sub(f.clock.Now())
		if len(entries) > 0 {
			// The stream went quiet: the producers are slower than this
			// worker, so waiting longer only adds latency (under load,
			// entries keep coming and the batch fills to max_rows).
			wait = min(wait, quietAt.Sub(f.clock.Now()))
		}
		if wait <= 0 {
			break
		}
		count := int64(entriesPerRead)
		if f.perEntry > 0 {
			// Read about what max_rows and max_bytes still have room for, at
			// the items and bytes per entry seen last, rather than
			// overshooting them by a full read.
			count = min(count, max(1, int64((f.cfg.MaxRows-items)/f.perEntry)),
				max(1, (f.cfg.MaxBytes-int64(size))/int64(f.bytesPerEntry)))
		}
		if len(entries) > 0 {
			wait = min(wait, max(minPoll, quiet/quietPolls))
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
			if len(entries) > 0 && f.w.InFlight() >= idleWrites {
				continue // PostgreSQL is still busy: wait on, up to quietAt
			}
			break
		}
		now := f.clock.Now()
		quietAt = now.Add(quiet)
		if len(entries) == 0 {
			// The batch's wait starts with its first entry, not with the read.
			deadline = now.Add(f.cfg.MaxWait)
		}
		for _, e := range got {
			items += e.Items
			size += entryBytes(e)
		}
		entries = append(entries, got...)
		f.perEntry = max(1, items/len(entries))
		f.bytesPerEntry = max(1, size/len(entries))
		if f.w.InFlight() < idleWrites {
			// PostgreSQL is (nearly) idle for this replica: waiting for a
			// fuller batch would only leave it so. Under load, writes are in
			// flight and batches fill while they run.
			break
		}
	}
	return entries, nil
}

// minPoll is the shortest wait of a read while holding entries.
const minPoll = time.Millisecond

// entryBytes is what an entry adds to a transaction: its rows decompressed
// (max_bytes bounds what one transaction sends, not the bytes Redis holds).
func entryBytes(e coord.Entry) int {
	if entry.Reads(e.Format) {
		if n, err := entry.Size(e.Data); err == nil {
			return n
		}
	}
	return len(e.Data)
}

// readable reports whether this release reads e: entries of entry.Format, and
// entries without a format, which are deleted (acknowledged) or damaged
// (quarantined). Entries of another format are a newer release's.
func readable(e coord.Entry) bool {
	return entry.Reads(e.Format) || e.Format == ""
}
