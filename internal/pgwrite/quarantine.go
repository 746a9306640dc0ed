package pgwrite

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// QuarantineTable holds stream entries that cannot be read
// (sql/001_schema.sql).
const QuarantineTable = "quarantine"

// QuarantineColumns are the quarantine table's columns the writer fills;
// quarantined_at takes its default.
var QuarantineColumns = []string{"stream", "entry_id", "ledger_key", "format", "reason", "payload"}

// Quarantined is a stream entry that cannot be read. Listed in a Ledger, it
// is stored, bytes intact, in the quarantine table in the transaction that
// records the ledger, so that it leaves the stream only once it is kept.
type Quarantined struct {
	Stream    string // the stream key
	EntryID   string // the entry's stream id
	LedgerKey string
	Format    string
	Reason    string
	Payload   []byte
}

// insertQuarantine stores l's quarantined entries inside tx.
func (w *Writer) insertQuarantine(ctx context.Context, tx pgx.Tx, l *Ledger) error {
	if len(l.Quarantine) == 0 {
		return nil
	}
	stream, id, key, format, reason, payload := quarantineColumns(l.Quarantine)
	_, err := tx.Exec(ctx, w.quarantineInsertSQL(), stream, id, key, format, reason, payload)
	if err != nil {
		return fmt.Errorf("store %d unreadable entries in %s: %w", len(l.Quarantine), QuarantineTable, err)
	}
	return nil
}

// quarantineColumns are the quarantine table's columns of qs, as the
// INSERT's arrays.
func quarantineColumns(qs []Quarantined) (stream, id, key, format, reason []string, payload [][]byte) {
	n := len(qs)
	stream, id, key, format, reason = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	payload = make([][]byte, n)
	for i, q := range qs {
		// Text that PostgreSQL refuses (NUL, invalid UTF-8: a format field
		// from a foreign writer) would fail the batch and wedge the stream.
		stream[i], id[i], key[i] = clean(q.Stream), clean(q.EntryID), clean(q.LedgerKey)
		format[i], reason[i] = clean(q.Format), clean(q.Reason)
		payload[i] = q.Payload
		if payload[i] == nil {
			payload[i] = []byte{} // NOT NULL: an empty payload is still one
		}
	}
	return stream, id, key, format, reason, payload
}

func clean(s string) string {
	if pgcopy.IsClean(s) {
		return s
	}
	return string(pgcopy.AppendClean(nil, s))
}
