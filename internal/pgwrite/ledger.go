package pgwrite

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// Ledger names a batch in the ledger table: the stream it came from and the
// ids of its entries (for a direct write, the keys of its requests), and the
// entries among them that cannot be read, which go to the quarantine table
// in the same transaction.
type Ledger struct {
	Stream     string
	IDs        []string
	Quarantine []Quarantined
}

// ErrAlreadyCommitted means an id of the batch is already in the ledger:
// another transaction committed it (a retry after an ambiguous commit, or a
// replica that claimed the same entry). Nothing of the batch was written.
var ErrAlreadyCommitted = errors.New("batch already committed (ledger)")

const (
	stateUniqueViolation = "23505"
	ledgerPrimaryKey     = "ledger_pkey"
)

// insertLedger records l inside tx, its quarantined entries too (the
// isolating write; the fast path sends the same statements in its pipeline,
// flushtx.go). It runs before the COPYs, so a conflict costs no COPY, and a
// concurrent writer of the same ids waits on the key until the first commits
// or rolls back.
func (w *Writer) insertLedger(ctx context.Context, tx pgx.Tx, l *Ledger) error {
	_, err := tx.Exec(ctx, w.ledgerInsertSQL(), l.Stream, l.IDs)
	if ledgerConflict(err) {
		return ErrAlreadyCommitted
	}
	if err != nil {
		return fmt.Errorf("record batch in ledger: %w", err)
	}
	return w.insertQuarantine(ctx, tx, l)
}

// ledgerConflict reports whether err is a unique violation of the ledger's
// primary key: by SQLSTATE and constraint family, which on Citus names the
// shard (ledger_pkey_104027) and arrives without the constraint field (the
// coordinator re-raises the worker's message alone), so the name is read
// from the message then, whatever its language quotes it with.
func ledgerConflict(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != stateUniqueViolation {
		return false
	}
	if pgErr.ConstraintName != "" {
		return ledgerKeyRe.MatchString(pgErr.ConstraintName)
	}
	return ledgerKeyInRe.MatchString(pgErr.Message)
}

// The ledger's primary key, and on a Citus worker its shards' copies.
var (
	ledgerKeyRe   = regexp.MustCompile(`^` + ledgerPrimaryKey + `(_[0-9]+)?$`)
	ledgerKeyInRe = regexp.MustCompile(`(^|[^A-Za-z0-9_])` + ledgerPrimaryKey + `(_[0-9]+)?([^A-Za-z0-9_]|$)`)
)

// Committed returns which of ids the ledger holds for stream.
func (w *Writer) Committed(ctx context.Context, stream string, ids []string) (map[string]bool, error) {
	rows, err := w.pool.Query(ctx, "SELECT entry_id FROM "+w.ledgerTable+" WHERE stream = $1 AND entry_id = ANY($2::text[])", stream, ids)
	if err != nil {
		return nil, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	out := make(map[string]bool)
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		out[id] = true
	}
	return out, rows.Err()
}

// PruneLedger deletes ledger rows older than retention.
func (w *Writer) PruneLedger(ctx context.Context, retention time.Duration) (int64, error) {
	tag, err := w.pool.Exec(ctx, "DELETE FROM "+w.ledgerTable+" WHERE committed_at < now() - make_interval(secs => $1)", retention.Seconds())
	if err != nil {
		return 0, fmt.Errorf("prune ledger: %w", err)
	}
	return tag.RowsAffected(), nil
}

// WriteLedgered is Write with l recorded in the ledger in the same
// transaction; it returns ErrAlreadyCommitted when an id of l is there.
func (w *Writer) WriteLedgered(ctx context.Context, b *rows.Batch, l *Ledger) ([]TableResult, error) {
	return w.write(ctx, b, l)
}
