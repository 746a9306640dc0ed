package pgwrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Isolation. COPY is all-or-nothing: one row that PostgreSQL refuses fails
// the batch. When the fast path fails on data, isolate writes the batch again
// in a new transaction, each COPY guarded by a savepoint, and narrows every
// failing run of rows down to the rows that fail:
//
//   - PostgreSQL's error context names the row it was on ("COPY spans, line
//     37"): that row is refused, the rows before it passed, so the run splits
//     around it into the rows before (sent again, and expected to pass) and
//     the rows after (sent on). A table with k bad rows costs at most 2k
//     COPYs, k-1 of them refused (the fast path found the first), and the
//     server inserts each good row at most twice, once rolled back: it stops
//     reading a stream at its first bad row.
//   - Without a usable line (messages translated by lc_messages), the run is
//     halved instead: at most about 2k·log2(n) COPYs.
//
// Savepoint statements travel in the same simple-query message as the COPY
// that follows them, so they add no round trip. The refused rows are copied
// into the rejects table in the same transaction, which then commits once:
// the good rows land exactly once and the refused ones are kept, with the
// reason, for replay.

// RejectsTable is the table that holds refused rows (sql/001_schema.sql).
const RejectsTable = "rejects"

// RejectsColumns are the rejects table's columns the writer fills;
// rejected_at takes its default.
var RejectsColumns = []string{"signal", "table_name", "sqlstate", "error", "detail", "row_json", "tuple"}

// isolationBudget bounds the refused COPYs one batch may cost. When a whole
// batch is bad (a new constraint that no row meets, a missing partition),
// isolating row by row would take a round trip per row; past the budget the
// rows not yet tried alone go to the rejects table with ErrNotIsolated.
const isolationBudget = 1000

// maxDetail bounds the detail kept with a reject: for a CHECK violation it
// holds the whole row, which the row_json column has already.
const maxDetail = 1024

const savepoint = "postgrescopy_isolate"

// useLineNumbers lets tests take the halving path that translated server
// messages force.
var useLineNumbers = true

// ErrNotIsolated marks rows that isolation did not try alone because the
// batch used up its budget; they may be good.
var ErrNotIsolated = errors.New("not isolated")

// notIsolated is the reason stored for a row given up on.
type notIsolated struct{ last error }

func (e *notIsolated) Error() string {
	return fmt.Sprintf("%v: the batch reached %d refused COPYs and this row was not tried alone; the last refusal: %v",
		ErrNotIsolated, isolationBudget, e.last)
}

func (e *notIsolated) Is(target error) bool { return target == ErrNotIsolated }

func (e *notIsolated) Unwrap() error { return e.last }

// IsolationStats describes one isolation, for tests and the report.
type IsolationStats struct {
	Copies  int // COPY statements sent in the isolating transaction
	Refused int // of which PostgreSQL refused
	Rejects int
}

// rejectsCopySQL is the COPY statement for the rejects table.
func rejectsCopySQL(schemaName string) string {
	return CopySQL(schemaName, tables.Table{Name: RejectsTable, Columns: RejectsColumns})
}

type spState uint8

const (
	spNone   spState = iota // no savepoint yet
	spClean                 // set, and the last statement succeeded
	spFailed                // set, and the transaction is aborted back to it
)

type span struct{ lo, hi int }

// isolator runs one isolating transaction.
type isolator struct {
	w     *Writer
	b     *rows.Batch
	pc    *pgconn.PgConn
	first error // the fast path's error: its line names a bad row
	last  error // the last refusal, for rows given up on
	state spState
	stats IsolationStats
}

// isolate writes b again after the fast path failed with the data error
// first, refusing only the rows PostgreSQL refuses.
func (w *Writer) isolate(ctx context.Context, b *rows.Batch, l *Ledger, first error) ([]TableResult, error) {
	var out []TableResult
	var stats IsolationStats
	var ids [][16]byte
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		out = out[:0]
		b.ClearRejects()
		if l != nil {
			if err := w.insertLedger(ctx, tx, l); err != nil {
				return err
			}
		}
		s := isolator{w: w, b: b, pc: tx.Conn().PgConn(), first: first}
		for _, i := range tableOrder {
			if _, err := b.Data(i); err != nil {
				return err
			}
			if b.Rows(i) == 0 {
				continue
			}
			if i == tables.IdxContexts {
				// Before any savepoint: the rows that follow need them.
				var err error
				if ids, _, err = w.insertContexts(ctx, s.pc, pgcopy.NewReader(b.Tuples(i, 0, b.Rows(i)))); err != nil {
					return err
				}
				continue
			}
			before := len(b.Rejects())
			written, n, err := s.table(ctx, i)
			if err != nil {
				return err
			}
			out = append(out, TableResult{Table: w.names[i], Rows: written, Bytes: n,
				Rejected: len(b.Rejects()) - before})
		}
		err := s.writeRejects(ctx)
		stats = s.stats
		return err
	})
	if err != nil {
		b.ClearRejects()
		return nil, err
	}
	w.known.add(ids)
	if w.onIsolate != nil {
		w.onIsolate(stats)
	}
	return out, nil
}

// table writes every row of table i that PostgreSQL accepts and records the
// others as rejects.
func (s *isolator) table(ctx context.Context, i int) (written, size int, err error) {
	name := s.w.names[i]
	store := s.w.stores[i] // what PostgreSQL's error context names
	todo := []span{{0, s.b.Rows(i)}}
	if r, ok := refusedRow(s.first, store, todo[0]); ok {
		// The fast path already found this one.
		s.reject(i, r, s.first)
		todo = []span{{r + 1, todo[0].hi}, {0, r}}
	}
	for len(todo) > 0 {
		sp := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if sp.lo >= sp.hi {
			continue
		}
		if s.stats.Refused >= isolationBudget {
			for r := sp.lo; r < sp.hi; r++ {
				s.reject(i, r, &notIsolated{last: s.last})
			}
			continue
		}
		tuples := s.b.Tuples(i, sp.lo, sp.hi)
		err := s.copy(ctx, s.w.copySQL[i], pgcopy.NewReader(tuples))
		if err == nil {
			written += sp.hi - sp.lo
			size += len(tuples)
			continue
		}
		if Classify(err) != Data {
			return 0, 0, fmt.Errorf("copy into %s: %w", name, err)
		}
		s.stats.Refused++
		s.last = err
		if r, ok := refusedRow(err, store, sp); ok {
			s.reject(i, r, err)
			todo = append(todo, span{r + 1, sp.hi}, span{sp.lo, r})
			continue
		}
		if sp.hi-sp.lo == 1 {
			s.reject(i, sp.lo, err)
			continue
		}
		mid := (sp.lo + sp.hi) / 2
		todo = append(todo, span{mid, sp.hi}, span{sp.lo, mid})
	}
	if written > 0 {
		size += 21 // one stream's header and trailer
	}
	return written, size, nil
}

func (s *isolator) reject(i, r int, err error) {
	s.b.AddReject(rows.Reject{Table: i, Row: r, Err: err})
}

// copy runs one COPY behind the savepoint: it first releases the savepoint
// after a success, or rolls back to it after a failure, in the same message.
func (s *isolator) copy(ctx context.Context, sql string, r io.Reader) error {
	var prefix string
	switch s.state {
	case spNone:
		prefix = "SAVEPOINT " + savepoint + "; "
	case spClean:
		prefix = "RELEASE SAVEPOINT " + savepoint + "; SAVEPOINT " + savepoint + "; "
	case spFailed:
		prefix = "ROLLBACK TO SAVEPOINT " + savepoint + "; "
	}
	s.stats.Copies++
	_, err := s.pc.CopyFrom(ctx, r, prefix+sql)
	if err != nil {
		s.state = spFailed
	} else {
		s.state = spClean
	}
	return err
}

// writeRejects copies the batch's rejects into the rejects table, and leaves
// the transaction ready to commit.
func (s *isolator) writeRejects(ctx context.Context) error {
	rej := s.b.Rejects()
	s.stats.Rejects = len(rej)
	if len(rej) > 0 {
		var e pgcopy.Encoder
		err := s.copy(ctx, s.w.rejectsSQL, s.encodeRejects(&e, true))
		if err != nil && Classify(err) == Data {
			// jsonb refused a row's JSON rendering (the very reason the row
			// was refused, perhaps): keep the rows as tuples alone.
			err = s.copy(ctx, s.w.rejectsSQL, s.encodeRejects(&e, false))
		}
		if err != nil {
			return fmt.Errorf("copy into %s: %w", RejectsTable, err)
		}
	}
	if s.state == spFailed {
		if _, err := s.pc.Exec(ctx, "ROLLBACK TO SAVEPOINT "+savepoint).ReadAll(); err != nil {
			return err
		}
	}
	return nil
}

func (s *isolator) encodeRejects(e *pgcopy.Encoder, withJSON bool) io.Reader {
	e.Reset()
	var js []byte
	for _, r := range s.b.Rejects() {
		t := s.w.layout.Table(r.Table)
		tuple := s.b.Tuples(r.Table, r.Row, r.Row+1)
		code, msg, detail := describe(r.Err)
		e.BeginRow(len(RejectsColumns))
		e.Text(t.Signal)
		e.Text(t.Name)
		e.Text(code)
		e.Text(msg)
		e.TextOrNull(detail)
		var ok bool
		if withJSON {
			js, ok = rows.AppendLayoutRowJSON(js[:0], s.w.layout, r.Table, tuple)
		}
		if ok {
			e.JSONB(js)
		} else {
			e.Null()
		}
		pos := e.Begin() // bytea: the raw bytes
		e.Raw(tuple)
		e.End(pos)
	}
	data, _ := e.Bytes() // the rows above have their field counts
	return bytes.NewReader(data)
}

// describe splits a refusal into SQLSTATE, message and detail.
func describe(err error) (code, msg, detail string) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code, msg, detail = pgErr.Code, pgErr.Message, pgErr.Detail
	}
	var ni *notIsolated
	if errors.As(err, &ni) || msg == "" {
		msg = err.Error()
	}
	if len(detail) > maxDetail {
		detail = string(pgcopy.AppendCleanLimit(nil, detail, maxDetail))
	}
	return code, msg, detail
}

// refusedRow reads the row a COPY of sp failed on from the error context,
// "COPY <table>, line <n>[, column <c>]", where n counts the stream's rows
// from 1. It reports false when the context is missing, translated or out of
// range, and the caller halves the run instead.
func refusedRow(err error, table string, sp span) (int, bool) {
	var pgErr *pgconn.PgError
	if !useLineNumbers || !errors.As(err, &pgErr) {
		return 0, false
	}
	prefix := "COPY " + table + ", line "
	// A trigger's context comes first: the COPY's line is the outermost.
	for line := range strings.SplitSeq(pgErr.Where, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil || n < 1 || n > sp.hi-sp.lo || end < len(rest) && rest[end] != ',' {
			return 0, false
		}
		return sp.lo + n - 1, true
	}
	return 0, false
}
