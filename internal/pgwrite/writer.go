package pgwrite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// TableResult is what one table's COPY wrote.
type TableResult struct {
	Table    string
	Rows     int // rows written
	Bytes    int
	Rejected int // rows refused and stored in the rejects table instead
	// Partition is the partition the rows were copied into, when routing
	// picked one (partitions.go); empty when they went through Table's
	// stored table. A table's rows over several partitions are copied into
	// each in a COPY of its own, one TableResult each.
	Partition string
}

// Writer writes batches into one schema through a pool. It is safe for
// concurrent use: each Write takes its own connection from the pool.
type Writer struct {
	pool            *pgxpool.Pool
	layout          *tables.Layout
	copySQL         [len(tables.Tables)]string
	names           [len(tables.Tables)]string // as queries read them (spans)
	stores          [len(tables.Tables)]string // as rows are copied into them (spans_rows)
	schema          string
	known           *knownContexts
	partitions      *partitions
	ledgerTable     string
	quarantineTable string
	rejectsSQL      string
	tx              pgx.TxOptions        // how an isolating write's transaction begins (SetWorkMem)
	workMem         string               // SET LOCAL in every write's transaction; "" keeps the server's
	onIsolate       func(IsolationStats) // tests observe isolation here
	prepared        bool                 // the ledger insert and the claims are prepared statements (prepared.go)
	ledgerStmt      string               // their names, from their text, when prepared
	claimStmt       string
	syncCommit      string       // SET LOCAL synchronous_commit in every write's transaction; "" keeps the server's
	onCommit        func(Commit) // told of each ledgered commit (server.go)
}

// DefaultWorkMem is the work_mem the exporter gives its writes unless
// configured otherwise: more than a flush's spans at the default flush size.
const DefaultWorkMem = "64MB"

// workMem is a PostgreSQL memory size as SET takes it: a number and an
// optional unit, nothing that needs quoting.
var workMem = regexp.MustCompile(`^[1-9][0-9]{0,9}(B|kB|MB|GB|TB)?$`)

// ValidWorkMem says whether v can be given to SetWorkMem ("" included).
func ValidWorkMem(v string) bool { return v == "" || workMem.MatchString(v) }

// SetWorkMem makes every write's transaction run with work_mem v (SET
// LOCAL, sent with its BEGIN: no round trip more, nothing left on a pooled
// or PgBouncer server connection afterwards); "" keeps the server's. The AI
// spend capture trigger holds a COPY's spans in a transition table, at full
// width, which spills to a temporary file past work_mem (the server's
// default is 4MB). Call it before the first write.
func (w *Writer) SetWorkMem(v string) error {
	if !ValidWorkMem(v) {
		return fmt.Errorf("work_mem %q is not a PostgreSQL memory size such as 64MB", v)
	}
	w.workMem = v
	w.setBegin()
	return nil
}

// SynchronousCommits are the values of synchronous_commit, from the most
// durable: on and remote_apply wait for the synchronous standbys to flush
// (remote_apply: and replay) a commit, remote_write for them to receive it.
var SynchronousCommits = []string{"remote_apply", "on", "remote_write", "local", "off"}

// SetSynchronousCommit makes every write's transaction run with
// synchronous_commit v (SET LOCAL, as SetWorkMem); "" keeps the server's.
// Call it before the first write.
func (w *Writer) SetSynchronousCommit(v string) error {
	if v != "" && !slices.Contains(SynchronousCommits, v) {
		return fmt.Errorf("synchronous_commit %q is not one of %s", v, strings.Join(SynchronousCommits, ", "))
	}
	w.syncCommit = v
	w.setBegin()
	return nil
}

// setLocals are the SET LOCAL statements a write's transaction begins with.
func (w *Writer) setLocals() []string {
	var out []string
	if w.workMem != "" {
		out = append(out, "SET LOCAL work_mem = '"+w.workMem+"'")
	}
	if w.syncCommit != "" {
		out = append(out, "SET LOCAL synchronous_commit = '"+w.syncCommit+"'")
	}
	return out
}

// setBegin sets how an isolating write's transaction begins: its SET LOCALs
// sent with the BEGIN.
func (w *Writer) setBegin() {
	w.tx = pgx.TxOptions{}
	if sets := w.setLocals(); len(sets) > 0 {
		w.tx.BeginQuery = "BEGIN; " + strings.Join(sets, "; ")
	}
}

// NewWriter prepares the COPY statements of the built-in tables
// (tables.DefaultLayout) for schemaName.
func NewWriter(pool *pgxpool.Pool, schemaName string) *Writer {
	return NewLayoutWriter(pool, schemaName, tables.DefaultLayout())
}

// NewLayoutWriter prepares the COPY statements of layout's tables for
// schemaName; it writes only batches of that layout.
func NewLayoutWriter(pool *pgxpool.Pool, schemaName string, layout *tables.Layout) *Writer {
	w := &Writer{pool: pool, layout: layout, schema: schemaName, known: &knownContexts{},
		partitions: newPartitions(schemaName, layout), ledgerTable: schema.Qualified(schemaName, "ledger"),
		quarantineTable: schema.Qualified(schemaName, QuarantineTable), rejectsSQL: rejectsCopySQL(schemaName),
		prepared: preparesStatements(pool.Config().ConnConfig.DefaultQueryExecMode)}
	if w.prepared {
		w.ledgerStmt, w.claimStmt = statementName(w.ledgerInsertSQL()), statementName(claimSQL)
	}
	for i := range tables.Tables {
		t := layout.Table(i)
		w.names[i], w.stores[i] = t.Name, t.Store
		w.copySQL[i] = CopySQL(schemaName, *t)
	}
	return w
}

// errLayout is a batch encoded for other columns than the writer's: COPY
// would refuse every row, and isolation would reject them all.
var errLayout = errors.New("pgwrite: the batch's layout is not the writer's")

// ShareContexts makes w remember committed contexts with other, so that the
// writers of one process (one per column layout met) insert each once.
func (w *Writer) ShareContexts(other *Writer) { w.known = other.known }

// CopySQL is the COPY statement for table t in schemaName (into t.Store,
// t.Name when it has none), quoted throughout.
func CopySQL(schemaName string, t tables.Table) string {
	quoted := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		quoted[i] = pgx.Identifier{c}.Sanitize()
	}
	name := t.Store
	if name == "" {
		name = t.Name
	}
	return "COPY " + schema.Qualified(schemaName, name) + " (" + strings.Join(quoted, ", ") +
		") FROM STDIN WITH (FORMAT binary)"
}

// Write copies every non-empty table of b in one transaction and commits.
// When PostgreSQL refuses rows on data, the batch is written again without
// them and they go to the rejects table (see isolate.go; b.Rejects lists
// them). On error nothing of b is committed, and the error says which table
// failed.
func (w *Writer) Write(ctx context.Context, b *rows.Batch) ([]TableResult, error) {
	return w.write(ctx, b, nil)
}

func (w *Writer) write(ctx context.Context, b *rows.Batch, l *Ledger) ([]TableResult, error) {
	if b.Layout() != w.layout {
		return nil, errLayout
	}
	out, err := w.copyAll(ctx, l, func(i int) (io.Reader, int, int, error) {
		data, err := b.Data(i)
		return bytes.NewReader(data), b.Rows(i), len(data), err
	}, func(i int) ([]byte, bool) {
		e := b.Encoder(i)
		return e.Tuples(0, e.Rows()), true
	})
	if err != nil && Classify(err) == Data {
		return w.isolate(ctx, b, l, err)
	}
	return out, err
}

// WriteEntries is WriteLedgered for stream entries read straight into COPY
// (entry.Entries), without building a batch. It does not isolate: when
// PostgreSQL refuses a row (Classify says Data) or an entry turns out damaged
// (the error wraps entry.ErrMalformed), nothing is committed, and the caller
// writes the entries again through a Batch, whose write finds the row and
// whose entry.AddTo finds the entry.
func (w *Writer) WriteEntries(ctx context.Context, s *entry.Entries, l *Ledger) ([]TableResult, error) {
	if s.Layout() != w.layout {
		return nil, errLayout
	}
	return w.copyAll(ctx, l, func(i int) (io.Reader, int, int, error) {
		if s.Rows(i) == 0 {
			return nil, 0, 0, nil
		}
		return s.TableReader(i), s.Rows(i), s.Size(i) + framing, nil
	}, s.Tuples)
}

// tableOrder is the order a batch's tables are written in: the dictionary
// first, so that its statement runs before any COPY of the isolation path
// can leave the transaction aborted back to a savepoint.
var tableOrder = func() []int {
	o := []int{tables.IdxContexts}
	for i := range tables.NumSignalTables {
		o = append(o, i)
	}
	return o
}()

// framing is a COPY stream's bytes around its tuples.
var framing = len(pgcopy.Header()) + len(pgcopy.Trailer())

// copyAll runs one transaction: l into the ledger (when set), then one COPY
// per table that table returns a reader for (nil: no rows), into the
// partition its rows' first column falls in when tuples gives the rows and
// routing finds one (partitions.go), else into the table; rows over several
// partitions in one COPY per partition. It costs two round trips however
// many statements the flush needs (flushtx.go).
func (w *Writer) copyAll(ctx context.Context, l *Ledger, table func(i int) (r io.Reader, rows, size int, err error),
	tuples func(i int) ([]byte, bool)) ([]TableResult, error) {
	w.partitions.refresh(ctx, w.pool)
	f := flushTx{w: w}
	for _, i := range tableOrder {
		r, n, size, err := table(i)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			continue
		}
		if i == tables.IdxContexts {
			// Not a TableResult: the results count the signal rows.
			if f.ids, f.contexts, err = w.contextInserts(r); err != nil {
				return nil, err
			}
			continue
		}
		f.copies = append(f.copies, w.plan(i, r, n, size, tuples)...)
	}
	if err := f.run(ctx, l); err != nil {
		return nil, err
	}
	out := make([]TableResult, len(f.copies))
	for k, c := range f.copies {
		out[k] = TableResult{Table: w.names[c.table], Rows: c.rows, Bytes: c.size, Partition: c.partition()}
	}
	return out, nil
}

// plan is table i's COPY: into the partition its rows all fall in when
// routing finds one, to be claimed in the transaction, else into the table.
// Rows over several partitions listed are split into one COPY each
// (maxPieces at most), any below the first one listed into a COPY into the
// table: through the stored table, PostgreSQL would insert them one at a
// time under the AI spend capture's transition table.
func (w *Writer) plan(i int, r io.Reader, n, size int, tuples func(i int) ([]byte, bool)) []tableCopy {
	c := tableCopy{table: i, r: r, rows: n, size: size}
	parts := w.partitions.of(w.layout.Table(i).Store)
	if len(parts) == 0 {
		return []tableCopy{c}
	}
	data, ok := tuples(i) // only now: the range reads every row
	if !ok {
		return []tableCopy{c}
	}
	fields := len(w.layout.Table(i).Columns)
	lo, hi, ok := pgcopy.FirstInt64Range(data, fields)
	if !ok {
		return []tableCopy{c}
	}
	first, last := partitionIndex(parts, lo), partitionIndex(parts, hi)
	if first == last {
		if first >= 0 {
			c.claim = &claim{part: parts[first], lo: lo, hi: hi}
		}
		return []tableCopy{c}
	}
	if last-first+1 > maxPieces {
		return []tableCopy{c}
	}
	bounds := make([]int64, 0, last-first)
	for k := first + 1; k <= last; k++ {
		bounds = append(bounds, parts[k].lo)
	}
	pieces, ok := pgcopy.SplitFirstInt64(data, fields, bounds)
	if !ok {
		return []tableCopy{c}
	}
	out := make([]tableCopy, 0, len(pieces))
	for k, p := range pieces {
		if p.Rows == 0 {
			continue
		}
		pc := tableCopy{table: i, r: pgcopy.NewReader(p.Tuples), rows: p.Rows, size: len(p.Tuples) + framing, piece: true}
		if first+k >= 0 {
			pc.claim = &claim{part: parts[first+k], lo: p.Lo, hi: p.Hi}
		}
		out = append(out, pc)
	}
	return out
}

// maxPieces is the most COPYs one table's rows are split into, by
// partition: past it (a backfill over many partitions) they go through the
// stored table in one.
const maxPieces = 32

// copySQL is the COPY statement of c: into its partition when the claim
// holds, else into the table.
func (w *Writer) copySQLOf(c tableCopy) string {
	if c.claim == nil || !c.claim.holds {
		return w.copySQL[c.table]
	}
	t := *w.layout.Table(c.table)
	t.Store = c.claim.part.name
	return CopySQL(w.schema, t)
}
