package schema

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

//go:embed citus/distribute.sql
var citusSQL string

// CitusDDL is the SQL that distributes schemaName's tables on a Citus
// coordinator (see citus/distribute.sql).
func CitusDDL(schemaName string) string { return Render(citusSQL, schemaName) }

// ErrNoCitus is returned when distribution: citus meets a server without the
// citus extension.
var ErrNoCitus = errors.New("distribution is citus but the citus extension is not installed in this database (CREATE EXTENSION citus on the coordinator)")

// Distribute makes schemaName's tables distributed and reference tables on
// a Citus coordinator, once; it holds the migration lock.
func Distribute(ctx context.Context, conn *pgx.Conn, schemaName string) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schemaName)); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		var ok bool
		if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&ok); err != nil {
			return err
		}
		if !ok {
			return ErrNoCitus
		}
		return execScript(ctx, tx, "distribute tables with citus", CitusDDL(schemaName), true)
	})
}
