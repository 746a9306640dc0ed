package pgwrite

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// The context dictionary (sql/003_contexts.sql). A batch carries one row per
// context its rows reference (rows.Batch writes it, an entry holds it like
// any table). They are not copied: a context is usually committed already,
// and COPY cannot skip a duplicate key. The writer inserts those it has not
// seen committed, with INSERT ... ON CONFLICT DO NOTHING, committed before
// the batch's rows: in a transaction of their own on the fast path
// (flushtx.go), first in the batch's transaction on the isolating one. A row
// is thus never committed without its context. The writer remembers the ids
// once they are committed, never before (a rolled back insert must be
// inserted again by the next batch). Ids are inserted in ascending order:
// two replicas inserting the same new contexts wait for each other instead
// of deadlocking.

// contextOIDs are the parameter types of a context row, in column order.
var contextOIDs = []uint32{2950 /* uuid */, 25, 25, 3802 /* jsonb */, 3802, 23 /* int4 */, 23, 25, 25}

// contextsPerInsert bounds the rows of one INSERT (9 parameters each; the
// protocol allows 65,535).
const contextsPerInsert = 1000

// maxKnownContexts bounds the ids a writer remembers; past it the set starts
// over (a forgotten context costs one INSERT that does nothing).
const maxKnownContexts = 1 << 16

// knownContexts is the set of context ids seen committed, shared by the
// writers of one process.
type knownContexts struct {
	mu  sync.Mutex
	ids map[[16]byte]struct{}
}

func (k *knownContexts) has(id [16]byte) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	_, ok := k.ids[id]
	return ok
}

func (k *knownContexts) add(ids [][16]byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.ids == nil || len(k.ids)+len(ids) > maxKnownContexts {
		k.ids = make(map[[16]byte]struct{}, len(ids))
	}
	for _, id := range ids {
		k.ids[id] = struct{}{}
	}
}

// contextsSQL is the INSERT of n context rows into schemaName's dictionary.
func contextsSQL(schemaName string, n int) string {
	t := tables.Tables[tables.IdxContexts]
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	var b strings.Builder
	b.WriteString("INSERT INTO " + schema.Qualified(schemaName, t.Store) + " (" + strings.Join(cols, ", ") + ") VALUES ")
	p := 1
	for r := range n {
		if r > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('(')
		for c := range cols {
			if c > 0 {
				b.WriteString(", ")
			}
			b.WriteString("$" + strconv.Itoa(p))
			p++
		}
		b.WriteByte(')')
	}
	// No conflict target: naming one needs SELECT on the table, and the
	// writer role may only insert.
	b.WriteString(" ON CONFLICT DO NOTHING")
	return b.String()
}

// contextInsert is one INSERT of context rows, its parameters the COPY
// fields' bytes as they are (binary).
type contextInsert struct {
	sql     string
	params  [][]byte
	oids    []uint32
	formats []int16
}

// insertContexts inserts the contexts of r (a binary COPY stream of the
// dictionary's rows) that are not known committed, and returns the ids it
// sent: the caller remembers them once the transaction commits.
func (w *Writer) insertContexts(ctx context.Context, pc *pgconn.PgConn, r io.Reader) ([][16]byte, int, error) {
	ids, inserts, err := w.contextInserts(r)
	if err != nil {
		return nil, 0, err
	}
	for _, in := range inserts {
		if _, err := pc.ExecParams(ctx, in.sql, in.params, in.oids, in.formats, nil).Close(); err != nil {
			return nil, 0, contextsError(err)
		}
	}
	return ids, len(ids), nil
}

func contextsError(err error) error {
	return fmt.Errorf("insert into %s: %w", tables.Tables[tables.IdxContexts].Store, err)
}

// contextInserts reads the contexts of r that are not known committed into
// the INSERTs that write them, in ascending id order, and returns their ids.
func (w *Writer) contextInserts(r io.Reader) ([][16]byte, []contextInsert, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return nil, nil, err
	}
	if rerr, ok := r.(interface{ Err() error }); ok && rerr.Err() != nil {
		return nil, nil, rerr.Err()
	}
	h, t := len(pgcopy.Header()), len(pgcopy.Trailer())
	if len(data) < h+t || !bytes.Equal(data[:h], pgcopy.Header()) {
		return nil, nil, fmt.Errorf("contexts: not a binary COPY stream")
	}
	fields := len(tables.Tables[tables.IdxContexts].Columns)
	type row struct {
		id   [16]byte
		vals [][]byte
	}
	var todo []row
	seen := map[[16]byte]bool{}
	err = pgcopy.EachRow(data[h:len(data)-t], fields, func(vals [][]byte) {
		if len(vals[0]) != 16 {
			return
		}
		id := [16]byte(vals[0])
		if seen[id] || w.known.has(id) {
			return
		}
		seen[id] = true
		todo = append(todo, row{id, slices.Clone(vals)})
	})
	if err != nil {
		return nil, nil, fmt.Errorf("contexts: %w", err)
	}
	slices.SortFunc(todo, func(a, b row) int { return bytes.Compare(a.id[:], b.id[:]) })
	ids := make([][16]byte, len(todo))
	for i, r := range todo {
		ids[i] = r.id
	}
	var out []contextInsert
	for len(todo) > 0 {
		chunk := todo[:min(len(todo), contextsPerInsert)]
		todo = todo[len(chunk):]
		in := contextInsert{sql: contextsSQL(w.schema, len(chunk)), params: make([][]byte, 0, len(chunk)*fields)}
		in.oids = make([]uint32, 0, cap(in.params))
		in.formats = make([]int16, 0, cap(in.params))
		for _, r := range chunk {
			in.params = append(in.params, r.vals...)
			in.oids = append(in.oids, contextOIDs...)
			for range fields {
				in.formats = append(in.formats, 1) // binary: the COPY field's bytes as they are
			}
		}
		out = append(out, in)
	}
	return ids, out, nil
}
