package pgwrite

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
)

// A write's transaction in two round trips. Everything a flush does before
// its COPYs (BEGIN, SET LOCAL work_mem, the ledger's and the quarantine's
// inserts, and the partition claims) goes in one pipeline with one Sync: the
// server runs it in order and stops at the first error, which leaves the
// transaction aborted and nothing of the batch written. Then every COPY and
// the COMMIT in one simple query, each COPY's data sent after it without
// waiting for the server (pgconn's CopyFrom sends one COPY; for several,
// copyMany speaks the protocol itself). A batch thus waits for the server
// twice, whatever the statements it needs and the tables it touches.
//
// Contexts not known committed are inserted before, in a transaction of
// their own (one round trip more, for the few batches that carry a new
// context): inside the batch's, an insert of a context that a concurrent
// flush (another signal's, another replica's) is inserting too waits until
// that flush commits, all its COPYs included. Committed first, a row is
// still never committed without its context, and the AI spend capture,
// which reads the contexts of the spans it copies, finds them.

// tableCopy is one table's COPY in a write.
type tableCopy struct {
	table     int
	r         io.Reader
	rows      int
	size      int
	claim     *claim // nil: not routed
	statement int    // index of the claim's bounds query in the pipeline
	// piece: these are some of the table's rows, split by partition
	// (Writer.plan); a refusal's line counts them, not the batch's.
	piece bool
}

func (c tableCopy) partition() string {
	if c.claim == nil || !c.claim.holds {
		return ""
	}
	return c.claim.part.name
}

// claims says whether a COPY of f claims a partition.
func (f *flushTx) claims() bool {
	for _, c := range f.copies {
		if c.claim != nil {
			return true
		}
	}
	return false
}

// flushTx is one write's transaction.
type flushTx struct {
	w        *Writer
	ids      [][16]byte // contexts inserted, remembered once committed (before the batch's transaction)
	contexts []contextInsert
	copies   []tableCopy
}

// stage names the statements of the pipeline, to say which one failed.
type stage struct {
	what string
	wrap func(error) error
}

// run writes f in one transaction, l into the ledger when set.
func (f *flushTx) run(ctx context.Context, l *Ledger) error {
	w := f.w
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A connection left in a transaction (an error on the way) is closed by
	// the pool on release rather than reused.
	defer conn.Release()
	pc := conn.Conn().PgConn()
	if len(f.contexts) > 0 {
		b := &pgconn.Batch{}
		for _, in := range f.contexts {
			b.ExecParams(in.sql, in.params, in.oids, in.formats, nil)
		}
		if _, err := pc.ExecBatch(ctx, b).ReadAll(); err != nil {
			return contextsError(err)
		}
		w.known.add(f.ids)
	}
	err = f.send(ctx, conn.Conn(), pc, l)
	if err != nil && forgetPrepared(pc, err) && !pc.IsClosed() {
		// The statements prepared on the connection are gone: nothing of
		// the batch was sent past them. Once more, preparing them again.
		if pc.TxStatus() != 'I' {
			_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()
		}
		err = f.send(ctx, conn.Conn(), pc, l)
	}
	if err != nil && !pc.IsClosed() && pc.TxStatus() != 'I' {
		// Best effort: when it fails the pool closes the connection.
		_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()
	}
	if err == nil {
		w.committed(pc, l, f.rows)
	}
	return err
}

// rows is the rows f copied into table i.
func (f *flushTx) rows(i int) int {
	n := 0
	for _, c := range f.copies {
		if c.table == i {
			n += c.rows
		}
	}
	return n
}

func (f *flushTx) send(ctx context.Context, conn *pgx.Conn, pc *pgconn.PgConn, l *Ledger) error {
	w := f.w
	var prepLedger, prepClaim string
	if l != nil || f.claims() {
		var err error
		if prepLedger, prepClaim, err = w.prepare(ctx, pc); err != nil {
			return err
		}
	}
	b := &pgconn.Batch{}
	var stages []stage
	queue := func(what string, wrap func(error) error, sql string, params [][]byte, oids []uint32, formats []int16) {
		b.ExecParams(sql, params, oids, formats, nil)
		stages = append(stages, stage{what, wrap})
	}
	queue("begin", nil, "BEGIN", nil, nil, nil)
	for _, set := range w.setLocals() {
		queue(strings.TrimPrefix(set, "SET LOCAL "), nil, set, nil, nil, nil)
	}
	if l != nil {
		params, oids, formats, err := ledgerParams(conn.TypeMap(), l)
		if err != nil {
			return err
		}
		ledgerErr := func(err error) error {
			if ledgerConflict(err) {
				return ErrAlreadyCommitted
			}
			return fmt.Errorf("record batch in ledger: %w", err)
		}
		if prepLedger != "" {
			b.ExecPrepared(prepLedger, params, formats, nil)
			stages = append(stages, stage{"ledger", ledgerErr})
		} else {
			queue("ledger", ledgerErr, w.ledgerInsertSQL(), params, oids, formats)
		}
		if len(l.Quarantine) > 0 {
			params, oids, formats, err := quarantineParams(conn.TypeMap(), l.Quarantine)
			if err != nil {
				return err
			}
			n := len(l.Quarantine)
			queue("quarantine", func(err error) error {
				return fmt.Errorf("store %d unreadable entries in %s: %w", n, QuarantineTable, err)
			}, w.quarantineInsertSQL(), params, oids, formats)
		}
	}
	for k := range f.copies {
		c := &f.copies[k]
		if c.claim == nil {
			continue
		}
		name := c.claim.part.name
		lockErr := func(err error) error {
			w.partitions.stale()
			return fmt.Errorf("lock partition %s: %w", name, err)
		}
		w.partitions.queueClaim(b, w.layout.Table(c.table).Store, c.claim, prepClaim)
		stages = append(stages, stage{"lock", lockErr}, stage{"lock", lockErr})
		c.statement = len(stages)
		stages = append(stages, stage{"claim", func(err error) error {
			w.partitions.stale()
			return fmt.Errorf("read partition %s: %w", name, err)
		}})
	}
	if len(f.copies) == 0 {
		queue("commit", nil, "COMMIT", nil, nil, nil)
	}
	results, err := pc.ExecBatch(ctx, b).ReadAll()
	if err != nil {
		// The statement that failed is the one after the last complete
		// result, or the last result when it carries the error.
		k := len(results)
		if k > 0 && results[k-1].Err != nil {
			k--
		}
		if k < len(stages) && stages[k].wrap != nil {
			return stages[k].wrap(err)
		}
		if k < len(stages) {
			return fmt.Errorf("%s: %w", stages[k].what, err)
		}
		return err
	}
	for _, c := range f.copies {
		if c.claim == nil {
			continue
		}
		if err := w.partitions.readClaim(results[c.statement], c.claim); err != nil {
			return err
		}
	}
	if len(f.copies) > 1 {
		if err := f.copyMany(ctx, pc); err != nil {
			return err
		}
	} else if len(f.copies) == 1 {
		c := f.copies[0]
		// The server commits once the copy is in, without waiting for
		// another message.
		if _, err := pc.CopyFrom(ctx, c.r, w.copySQLOf(c)+"; COMMIT"); err != nil {
			return f.copyError(pc, 0, err)
		}
	}
	if len(f.copies) > 0 && pc.TxStatus() != 'I' {
		return errors.New("pgwrite: the transaction is still open after its COMMIT")
	}
	return nil
}

// copyMany sends every COPY of f and the COMMIT in one message.
func (f *flushTx) copyMany(ctx context.Context, pc *pgconn.PgConn) error {
	sqls := make([]string, len(f.copies))
	readers := make([]io.Reader, len(f.copies))
	for k, c := range f.copies {
		sqls[k], readers[k] = f.w.copySQLOf(c), c.r
	}
	done, k, err := copyMany(ctx, pc, sqls, readers)
	if err == nil {
		return nil
	}
	if k > len(f.copies)-1 {
		k = len(f.copies) - 1
	}
	if done == len(f.copies) && !pc.IsClosed() && pc.TxStatus() == 'I' {
		return fmt.Errorf("commit: %w", err)
	}
	return f.copyError(pc, k, err)
}

// copyError is the error of the k-th COPY of f, err, as the write reports
// it: the reader's when it failed (a damaged entry), and the table named.
func (f *flushTx) copyError(pc *pgconn.PgConn, k int, err error) error {
	c := f.copies[k]
	if c.partition() != "" {
		f.w.partitions.stale()
	}
	if rerr, ok := c.r.(interface{ Err() error }); ok && rerr.Err() != nil {
		// A reader that failed (a damaged entry): PostgreSQL only heard
		// that the COPY failed; say why.
		err = rerr.Err()
	}
	if k == len(f.copies)-1 && !pc.IsClosed() && pc.TxStatus() == 'I' {
		// The copies went in and the commit failed (a deferred
		// constraint): nothing of the batch is committed.
		return fmt.Errorf("commit: %w", err)
	}
	if c.piece {
		err = pieceError{err}
	}
	return fmt.Errorf("copy into %s: %w", f.w.names[c.table], err)
}

// pieceError is a COPY's error when the COPY held part of its table's rows
// (split by partition): the line its context names is not the batch's row,
// so isolation does not take it for one (refusedRow).
type pieceError struct{ error }

func (e pieceError) Unwrap() error { return e.error }

func (w *Writer) ledgerInsertSQL() string {
	return "INSERT INTO " + w.ledgerTable + " (stream, entry_id) SELECT $1, unnest($2::text[])"
}

func (w *Writer) quarantineInsertSQL() string {
	return "INSERT INTO " + w.quarantineTable + " (stream, entry_id, ledger_key, format, reason, payload)" +
		" SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[])"
}

// encodeParams encodes values (of the types oids) in binary with m.
func encodeParams(m *pgtype.Map, oids []uint32, values ...any) ([][]byte, []int16, error) {
	params := make([][]byte, len(values))
	formats := make([]int16, len(values))
	for i, v := range values {
		buf, err := m.Encode(oids[i], pgtype.BinaryFormatCode, v, nil)
		if err != nil {
			return nil, nil, fmt.Errorf("encode parameter %d: %w", i+1, err)
		}
		params[i], formats[i] = buf, pgtype.BinaryFormatCode
	}
	return params, formats, nil
}

// ledgerOIDs are the types of the ledger insert's parameters.
var ledgerOIDs = []uint32{pgtype.TextOID, pgtype.TextArrayOID}

func ledgerParams(m *pgtype.Map, l *Ledger) ([][]byte, []uint32, []int16, error) {
	params, formats, err := encodeParams(m, ledgerOIDs, l.Stream, l.IDs)
	return params, ledgerOIDs, formats, err
}

func quarantineParams(m *pgtype.Map, qs []Quarantined) ([][]byte, []uint32, []int16, error) {
	stream, id, key, format, reason, payload := quarantineColumns(qs)
	oids := []uint32{pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID,
		pgtype.TextArrayOID, pgtype.ByteaArrayOID}
	params, formats, err := encodeParams(m, oids, stream, id, key, format, reason, payload)
	return params, oids, formats, err
}

// copyMany sends the COPYs sqls and COMMIT as one simple query, with each
// COPY's data from readers after it, and reads the server's answers while
// it sends (a refusal stops the server reading the copy, not the socket:
// it ignores the copy data that follows). It returns how many COPYs
// completed and the first error: a reader's (k, the table it failed on),
// the server's or the connection's. On a broken connection the connection
// is closed, and the pool drops it.
func copyMany(ctx context.Context, pc *pgconn.PgConn, sqls []string, readers []io.Reader) (done int, k int, err error) {
	type answer struct {
		done int
		err  error
	}
	answers := make(chan answer, 1)
	failed := make(chan struct{})
	fail := sync.OnceFunc(func() { close(failed) })
	go func() {
		var a answer
		var pgErr error
		defer func() {
			if a.err == nil {
				a.err = pgErr
			}
			answers <- a
		}()
		for {
			msg, err := pc.ReceiveMessage(ctx)
			if err != nil {
				a.err = err
				fail()
				return
			}
			switch m := msg.(type) {
			case *pgproto3.CommandComplete:
				a.done++
			case *pgproto3.ErrorResponse:
				if pgErr == nil {
					pgErr = pgconn.ErrorResponseToPgError(m)
					fail()
				}
			case *pgproto3.ReadyForQuery:
				return
			}
		}
	}()
	// Writes do not watch ctx as pgconn's reads do: a cancelled write makes
	// the connection unusable, and ReceiveMessage then returns.
	stop := context.AfterFunc(ctx, func() { _ = pc.Conn().SetWriteDeadline(time.Now()) })
	fe := pc.Frontend()
	k, sendErr, readErr := sendCopies(fe, sqls, readers, failed)
	if sendErr != nil {
		_ = pc.Conn().Close()
	}
	a := <-answers
	if !stop() {
		// ctx ended meanwhile: the write deadline may be set, or about to
		// be; the connection is not reused.
		_ = pc.Close(context.Background())
	}
	switch {
	case readErr != nil:
		return a.done, k, readErr
	case sendErr != nil:
		return a.done, k, sendErr
	}
	return a.done, a.done, a.err
}

// sendCopies writes the query of sqls and COMMIT, then every reader's data
// framed as copy data, each followed by CopyDone; it stops at a reader that
// fails (sending CopyFail), or once failed is closed.
func sendCopies(fe *pgproto3.Frontend, sqls []string, readers []io.Reader, failed <-chan struct{}) (k int, sendErr, readErr error) {
	fe.Send(&pgproto3.Query{String: strings.Join(sqls, "; ") + "; COMMIT"})
	if err := fe.Flush(); err != nil {
		return 0, err, nil
	}
	buf := make([]byte, 5+copyChunk)
	buf[0] = 'd'
	for k = range readers {
		for {
			select {
			case <-failed:
				return k, nil, nil
			default:
			}
			n, err := readers[k].Read(buf[5:])
			if n > 0 {
				binary.BigEndian.PutUint32(buf[1:], uint32(n+4))
				if werr := fe.SendUnbufferedEncodedCopyData(buf[:5+n]); werr != nil {
					return k, werr, nil
				}
			}
			if err == io.EOF {
				fe.Send(&pgproto3.CopyDone{})
				break
			}
			if err != nil {
				fe.Send(&pgproto3.CopyFail{Message: err.Error()})
				return k, fe.Flush(), err
			}
		}
	}
	return k, fe.Flush(), nil
}

// copyChunk is the copy data a message carries, as pgconn's CopyFrom sends it.
const copyChunk = 64 << 10
