package pgwrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
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
//   - On Citus the coordinator re-raises a worker's refusal without its line
//     or SQLSTATE (CitusForwarded), and every COPY into a distributed table
//     costs a round of the workers: halving took 25 s for 55 bad rows of
//     500. So the rows are first checked against the table's constraints on
//     the coordinator: copied, with line numbers, into a temporary table
//     made LIKE it (INCLUDING CONSTRAINTS: its CHECKs and NOT NULLs), which
//     is then rolled back. The rows it accepts go to the distributed table
//     in one COPY; only when the workers still refuse some (a constraint or
//     trigger on the shards alone) is that run halved on the distributed
//     table.
//
// Isolation is bounded: by isolationBudget refused COPYs and by time (half
// the write's deadline, at most maxIsolation). Rows not tried alone by then
// go to the rejects table, bytes intact, marked ErrNotIsolated: a batch that
// cannot be isolated in time is kept there, never retried forever.
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

// maxIsolation bounds the time one isolation may take when the write's
// context allows more (see isolate).
const maxIsolation = 10 * time.Second

// maxDetail bounds the detail kept with a reject: for a CHECK violation it
// holds the whole row, which the row_json column has already.
const maxDetail = 1024

const savepoint = "postgrescopy_isolate"

// checkSavepoint holds a constraint check's temporary table until it is
// rolled back.
const checkSavepoint = "postgrescopy_check"

// useLineNumbers lets tests take the halving path that translated server
// messages force.
var useLineNumbers = true

// ErrNotIsolated marks rows that isolation did not try alone because the
// batch used up its budget; they may be good.
var ErrNotIsolated = errors.New("not isolated")

// notIsolated is the reason stored for a row given up on.
type notIsolated struct {
	budget string // what ran out
	last   error
}

func (e *notIsolated) Error() string {
	return fmt.Sprintf("%v: the batch reached %s and this row was not tried alone; the last refusal: %v",
		ErrNotIsolated, e.budget, e.last)
}

func (e *notIsolated) Is(target error) bool { return target == ErrNotIsolated }

func (e *notIsolated) Unwrap() error { return e.last }

// IsolationStats describes one isolation, for tests and the report.
type IsolationStats struct {
	Copies  int // COPY statements sent in the isolating transaction
	Refused int // of which PostgreSQL refused
	Checked int // of which into a constraint check's temporary table
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
	// citus: refusals come from Citus workers, without lines: check the
	// rows against the constraints on the coordinator first.
	citus    bool
	deadline time.Time
	// passed holds, by table, the runs its check accepted, once checked.
	passed  [tables.NumTables][]span
	checked [tables.NumTables]bool
}

// isolate writes b again after the fast path failed with the data error
// first, refusing only the rows PostgreSQL refuses.
func (w *Writer) isolate(ctx context.Context, b *rows.Batch, l *Ledger, first error) ([]TableResult, error) {
	var out []TableResult
	var stats IsolationStats
	var ids [][16]byte
	var pc *pgconn.PgConn
	err := pgx.BeginTxFunc(ctx, w.pool, w.tx, func(tx pgx.Tx) error {
		out = out[:0]
		pc = tx.Conn().PgConn()
		b.ClearRejects()
		s := isolator{w: w, b: b, pc: tx.Conn().PgConn(), first: first, citus: CitusForwarded(first),
			deadline: isolationDeadline(ctx)}
		for i := range w.copySQL {
			if _, err := b.Data(i); err != nil {
				return err
			}
		}
		if s.citus {
			// Before the ledger's insert: the transaction has touched no
			// worker yet, so Citus keeps the check's many savepoints on the
			// coordinator instead of sending each to every worker.
			for i := range w.copySQL {
				if b.Rows(i) == 0 || i == tables.IdxContexts {
					continue
				}
				passed, err := s.check(ctx, i, []span{{0, b.Rows(i)}})
				if err != nil {
					return err
				}
				s.passed[i], s.checked[i] = passed, true
			}
		}
		if l != nil {
			if err := w.insertLedger(ctx, tx, l); err != nil {
				return err
			}
		}
		for _, i := range tableOrder {
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
			written, n, err := s.table(ctx, i)
			if err != nil {
				return err
			}
			rejected := 0
			for _, r := range b.Rejects() {
				if r.Table == i {
					rejected++
				}
			}
			out = append(out, TableResult{Table: w.names[i], Rows: written, Bytes: n, Rejected: rejected})
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
	w.committed(pc, l, b.Rows)
	if w.onIsolate != nil {
		w.onIsolate(stats)
	}
	return out, nil
}

// isolationDeadline is when isolation stops trying rows alone: half the
// write's remaining time (the rest commits the good rows and the rejects),
// at most maxIsolation.
func isolationDeadline(ctx context.Context) time.Time {
	limit := maxIsolation
	if d, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(d)/2)
	}
	return time.Now().Add(limit)
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
	if s.citus {
		passed := s.passed[i]
		if !s.checked[i] {
			// Citus showed itself on an earlier table of this batch.
			var err error
			if passed, err = s.check(ctx, i, todo); err != nil {
				return 0, 0, err
			}
		}
		tuples := make([][]byte, 0, len(passed))
		n := 0
		for _, sp := range passed {
			tuples = append(tuples, s.b.Tuples(i, sp.lo, sp.hi))
			n += sp.hi - sp.lo
		}
		if n == 0 {
			return 0, 0, nil
		}
		err = s.copy(ctx, s.w.copySQL[i], pgcopy.NewReader(tuples...))
		if err == nil {
			for _, t := range tuples {
				size += len(t)
			}
			return n, size + framing, nil
		}
		if Classify(err) != Data {
			return 0, 0, fmt.Errorf("copy into %s: %w", name, err)
		}
		// The workers refuse what the coordinator's check accepted: halve.
		s.stats.Refused++
		s.last = err
		todo = passed
	}
	accepted, err := s.narrow(ctx, i, s.w.copySQL[i], todo)
	if err != nil {
		return 0, 0, fmt.Errorf("copy into %s: %w", name, err)
	}
	for _, sp := range accepted {
		written += sp.hi - sp.lo
		size += len(s.b.Tuples(i, sp.lo, sp.hi))
	}
	if written > 0 {
		size += framing
	}
	return written, size, nil
}

// narrow copies the runs of todo with sql, each behind the savepoint, and
// splits every refused run until its refused rows are found and rejected;
// it returns the runs accepted.
func (s *isolator) narrow(ctx context.Context, i int, sql string, todo []span) ([]span, error) {
	store := s.w.stores[i] // what PostgreSQL's error context names
	var accepted []span
	for len(todo) > 0 {
		sp := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if sp.lo >= sp.hi {
			continue
		}
		if budget := s.spent(); budget != "" {
			for r := sp.lo; r < sp.hi; r++ {
				s.reject(i, r, &notIsolated{budget: budget, last: s.last})
			}
			continue
		}
		err := s.copy(ctx, sql, pgcopy.NewReader(s.b.Tuples(i, sp.lo, sp.hi)))
		if err == nil {
			accepted = append(accepted, sp)
			continue
		}
		if Classify(err) != Data {
			return nil, err
		}
		s.stats.Refused++
		s.last = err
		if CitusForwarded(err) {
			s.citus = true
		}
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
	return accepted, nil
}

// spent says which bound isolation has reached, "" while it has not.
func (s *isolator) spent() string {
	switch {
	case s.stats.Refused >= isolationBudget:
		return fmt.Sprintf("%d refused COPYs", isolationBudget)
	case time.Now().After(s.deadline):
		return "its isolation time"
	}
	return ""
}

// check finds, among the runs of todo, the rows that table i's constraints
// refuse, without the distributed table: they are copied into a temporary
// table LIKE it, with its CHECK and NOT NULL constraints, whose refusals
// carry their line, and which is rolled back. It rejects those rows and
// returns the runs it accepted.
func (s *isolator) check(ctx context.Context, i int, todo []span) ([]span, error) {
	t := s.w.layout.Table(i)
	tmp := pgx.Identifier{"pg_temp", t.Store}.Sanitize()
	var prefix string
	outer := spNone
	switch s.state {
	case spFailed:
		prefix = "ROLLBACK TO SAVEPOINT " + savepoint + "; "
		outer = spClean
	case spClean:
		outer = spClean
	}
	// The same name as the table, so that refusals read as they would on
	// one node ("new row for relation "spans_rows" violates ...", "COPY
	// spans_rows, line 3").
	// Its distribution column is NOT NULL too: Citus refuses a NULL there.
	table := schema.Qualified(s.w.schema, t.Store)
	if _, err := s.pc.Exec(ctx, prefix+"SAVEPOINT "+checkSavepoint+"; CREATE TEMPORARY TABLE "+tmp+
		" (LIKE "+table+" INCLUDING DEFAULTS INCLUDING CONSTRAINTS); "+
		"DO $pgc$ DECLARE c text; BEGIN "+
		"SELECT column_to_column_name(logicalrelid, partkey) INTO c FROM pg_dist_partition WHERE logicalrelid = '"+table+"'::regclass; "+
		"IF c IS NOT NULL THEN EXECUTE format('ALTER TABLE "+tmp+" ALTER COLUMN %I SET NOT NULL', c); END IF; "+
		"END $pgc$").ReadAll(); err != nil {
		return nil, fmt.Errorf("check rows of %s: %w", t.Name, err)
	}
	s.state = spNone
	before := s.stats.Copies
	passed, err := s.narrow(ctx, i, CopySQL("pg_temp", *t), todo)
	s.stats.Checked += s.stats.Copies - before
	if err != nil {
		return nil, fmt.Errorf("check rows of %s: %w", t.Name, err)
	}
	if _, err := s.pc.Exec(ctx, "ROLLBACK TO SAVEPOINT "+checkSavepoint+"; RELEASE SAVEPOINT "+checkSavepoint).ReadAll(); err != nil {
		return nil, fmt.Errorf("check rows of %s: %w", t.Name, err)
	}
	s.state = outer
	return passed, nil
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
	var piece pieceError
	if !useLineNumbers || !errors.As(err, &pgErr) || CitusForwarded(err) || errors.As(err, &piece) {
		// A Citus coordinator's context names the line it was reading when
		// a worker's refusal came back, not the refused row; a COPY of part
		// of the rows (split by partition) counts lines from its first.
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
