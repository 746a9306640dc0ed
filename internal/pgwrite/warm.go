package pgwrite

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Warming a connection. A server process's first COPY into a table loads
// what every later one finds cached: the table's, its partitions' and
// their indexes' descriptors, the type input functions, and the AI spend
// capture trigger's function, compiled and planned once per partition it
// fires on. That first COPY costs a few milliseconds more a table, and the
// first flush of each new connection pays it for every table it touches:
// in a short burst after a start, most flushes are first flushes. Warm pays
// it before the writes: a COPY of no rows into every stored table and into
// the partition of each that now falls in, in a transaction rolled back,
// which changes nothing (the capture statement runs over no rows) and takes
// the locks a write takes. The flush statements are prepared too.

// warmLockTimeout bounds the warm-up's wait for each table's lock.
const warmLockTimeout = "100ms"

// warmKey is the key of a connection's custom data that marks it warmed.
const warmKey = "postgrescopy.pgwrite.warm"

// currentPartitionsSQL lists, for the stored tables $2 of schema $1, the
// plain partitions of each: parent and partition name. Only names are
// read (partitionStart parses their lower bound): no catalog function that
// locks a partition someone else may hold.
const currentPartitionsSQL = `
SELECT pr.relname, lf.relname
FROM pg_class pr
JOIN pg_inherits i ON i.inhparent = pr.oid AND NOT i.inhdetachpending
JOIN pg_class lf ON lf.oid = i.inhrelid AND lf.relkind = 'r'
WHERE pr.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)
  AND pr.relname = ANY($2::text[]) AND pr.relkind = 'p'`

// Warm readies pc for w's writes (see above). A connection warmed once is
// not warmed again. Nothing fails a write for want of it: the caller may
// ignore the error, after which pc is idle (or closed when it broke).
func (w *Writer) Warm(ctx context.Context, conn *pgx.Conn) error {
	pc := conn.PgConn()
	if pc.CustomData()[warmKey] != nil {
		return nil
	}
	if _, _, err := w.prepare(ctx, pc); err != nil {
		return err
	}
	targets, err := w.warmTargets(ctx, conn, time.Now())
	if err != nil {
		return err
	}
	// A table someone holds locked (an ALTER, a VACUUM FULL) is not waited
	// for: the warm-up gives up, and the first write waits as it must.
	if _, err := pc.Exec(ctx, "BEGIN; SET LOCAL lock_timeout = '"+warmLockTimeout+"'").ReadAll(); err != nil {
		return fmt.Errorf("warm a connection: %w", err)
	}
	empty := append(pgcopy.Header(), pgcopy.Trailer()...)
	for _, sql := range targets {
		if _, err = pc.CopyFrom(ctx, bytes.NewReader(empty), sql); err != nil {
			err = fmt.Errorf("warm a connection: %w", err)
			break
		}
	}
	if _, rbErr := pc.Exec(ctx, "ROLLBACK").ReadAll(); rbErr != nil && err == nil {
		err = fmt.Errorf("warm a connection: %w", rbErr)
	}
	if err != nil {
		return err
	}
	pc.CustomData()[warmKey] = true
	return nil
}

// warmTargets are the COPY statements Warm runs: into every stored signal
// table, and into the partition of each that holds now, when its name says
// which (as postgrescopy_maintain names them).
func (w *Writer) warmTargets(ctx context.Context, conn *pgx.Conn, now time.Time) ([]string, error) {
	stores := make([]string, 0, tables.NumSignalTables)
	for i := range tables.NumSignalTables {
		stores = append(stores, w.stores[i])
	}
	rows, err := conn.Query(ctx, currentPartitionsSQL, w.schema, stores)
	if err != nil {
		return nil, fmt.Errorf("warm a connection: list the partitions of schema %q: %w", w.schema, err)
	}
	at := pgcopy.TimestamptzMicros(now)
	current := map[string]partition{}
	var parent, name string
	_, err = pgx.ForEachRow(rows, []any{&parent, &name}, func() error {
		if lo, ok := partitionStart(parent, name); ok && lo <= at {
			if p, seen := current[parent]; !seen || lo > p.lo {
				current[parent] = partition{name: name, lo: lo}
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("warm a connection: list the partitions of schema %q: %w", w.schema, err)
	}
	var out []string
	for i := range tables.NumSignalTables {
		out = append(out, w.copySQL[i])
		if p, ok := current[w.stores[i]]; ok {
			t := *w.layout.Table(i)
			t.Store = p.name
			out = append(out, CopySQL(w.schema, t))
		}
	}
	return out, nil
}
