package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"

	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
)

// quarantined is an entry of stream that cannot be read, for the quarantine
// table, with why.
func quarantined(stream string, e keyedEntry, err error) pgwrite.Quarantined {
	return pgwrite.Quarantined{Stream: stream, EntryID: e.ID, LedgerKey: e.key, Format: e.Format, Reason: err.Error(), Payload: e.Data}
}

// reportQuarantined counts and logs entries once their quarantine has
// committed. The payload is never logged: it is telemetry, and in the table.
func (f *flusher) reportQuarantined(ctx context.Context, q []pgwrite.Quarantined) {
	if len(q) == 0 {
		return
	}
	f.c.tel.PostgrescopyUndecodableEntries.Add(ctx, int64(len(q)), f.attrs)
	for _, e := range q {
		f.logger.Error("stream entry cannot be decoded; stored it in the quarantine table and acknowledged it",
			zap.String("stream", e.Stream), zap.String("entry", e.EntryID), zap.String("format", e.Format),
			zap.Int("bytes", len(e.Payload)), zap.String("table", f.c.cfg.Schema+"."+pgwrite.QuarantineTable),
			zap.String("reason", e.Reason))
	}
}
