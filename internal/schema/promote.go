package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Column is a column added after the migrations: a promoted attribute. Type
// is an SQL type name (text, bigint, double precision, boolean, timestamptz).
type Column struct {
	Table, Name, Type string
}

// AddColumnsSQL is the DDL that adds cols, for an operator who runs with
// create_schema: false: to the table that stores the rows (spans_rows for
// spans), then to the views (postgrescopy_views). On a partitioned table it
// adds the column to every partition; a nullable column without a default is
// a catalog change only, instant whatever the table's size.
func AddColumnsSQL(schemaName string, cols []Column) string {
	var b strings.Builder
	for _, c := range cols {
		fmt.Fprintf(&b, "ALTER TABLE %s ADD COLUMN IF NOT EXISTS %s %s;\n",
			Qualified(schemaName, tables.StoreName(c.Table)), pgx.Identifier{c.Name}.Sanitize(), c.Type)
	}
	if len(cols) > 0 {
		fmt.Fprintf(&b, "SELECT %s();\n", Qualified(schemaName, "postgrescopy_views"))
	}
	return b.String()
}

// AddColumns adds the columns of cols that do not exist yet, holding the
// migration lock so that replicas starting together add them once. Existing
// columns cost no DDL: ALTER TABLE would take an ACCESS EXCLUSIVE lock on the
// table, queued behind any long query and blocking every writer meanwhile.
// It then checks that every column has its type (see WrongTypes).
func AddColumns(ctx context.Context, conn *pgx.Conn, schemaName string, cols []Column) error {
	if len(cols) == 0 {
		return nil
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schemaName)); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		var missing []Column
		for _, c := range cols {
			var exists bool
			err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped)`,
				Qualified(schemaName, tables.StoreName(c.Table)), c.Name).Scan(&exists)
			if err != nil {
				return fmt.Errorf("look up column %s.%s: %w", c.Table, c.Name, err)
			}
			if !exists {
				missing = append(missing, c)
			}
		}
		if len(missing) > 0 {
			if _, err := tx.Exec(ctx, AddColumnsSQL(schemaName, missing)); err != nil {
				return fmt.Errorf("add promoted columns: %w", err)
			}
		}
		wrong, err := wrongTypes(ctx, tx, schemaName, cols)
		if err != nil {
			return err
		}
		if len(wrong) > 0 {
			return fmt.Errorf("%w: %s (drop or rename the column, or promote into another name)", ErrColumnType, strings.Join(wrong, ", "))
		}
		return nil
	})
}

// ErrColumnType is a promoted column that exists with another type: binary
// COPY would refuse every row.
var ErrColumnType = errors.New("promoted column has another type")

// WrongTypes lists, as "table.column is X, want Y", the columns of cols that
// exist with another type. Missing columns are Missing's business.
func WrongTypes(ctx context.Context, conn *pgx.Conn, schemaName string, cols []Column) ([]string, error) {
	return wrongTypes(ctx, conn, schemaName, cols)
}

type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func wrongTypes(ctx context.Context, q queryRower, schemaName string, cols []Column) ([]string, error) {
	var out []string
	for _, c := range cols {
		var have string
		var same bool
		err := q.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), atttypid = $3::regtype
FROM pg_attribute WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped`,
			Qualified(schemaName, tables.StoreName(c.Table)), c.Name, c.Type).Scan(&have, &same)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("check type of %s.%s: %w", c.Table, c.Name, err)
		}
		if !same {
			out = append(out, fmt.Sprintf("%s.%s is %s, want %s", c.Table, c.Name, have, c.Type))
		}
	}
	return out, nil
}

// PromotedColumns lists the promoted columns of a row layout as AddColumns
// takes them.
func PromotedColumns(l *tables.Layout) []Column {
	var out []Column
	for _, i := range []int{tables.IdxSpans, tables.IdxLogs} {
		t := l.Table(i)
		names := l.Promoted(i)
		kinds := l.PromotedKinds(i)
		for j, n := range names {
			out = append(out, Column{Table: t.Name, Name: n, Type: kinds[j].SQLType()})
		}
	}
	return out
}
