package pgwrite

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A write's transaction in two round trips. Everything a flush does before
// its COPYs (BEGIN, SET LOCAL work_mem, the ledger's and the quarantine's
// inserts, and the partition claims) goes in one pipeline with one Sync: the
// server runs it in order and stops at the first error, which leaves the
// transaction aborted and nothing of the batch written. Then the COPYs, the
// last one sent with COMMIT in the same message (COPY cannot be pipelined:
// the server must start the copy before it reads the data). A batch of one
// table thus waits for the server twice, whatever the statements it needs;
// each table more adds one COPY.
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
}

func (c tableCopy) partition() string {
	if c.claim == nil || !c.claim.holds {
		return ""
	}
	return c.claim.part.name
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
	if err != nil && !pc.IsClosed() && pc.TxStatus() != 'I' {
		// Best effort: when it fails the pool closes the connection.
		_, _ = pc.Exec(ctx, "ROLLBACK").ReadAll()
	}
	return err
}

func (f *flushTx) send(ctx context.Context, conn *pgx.Conn, pc *pgconn.PgConn, l *Ledger) error {
	w := f.w
	b := &pgconn.Batch{}
	var stages []stage
	queue := func(what string, wrap func(error) error, sql string, params [][]byte, oids []uint32, formats []int16) {
		b.ExecParams(sql, params, oids, formats, nil)
		stages = append(stages, stage{what, wrap})
	}
	queue("begin", nil, "BEGIN", nil, nil, nil)
	if w.workMem != "" {
		queue("set work_mem", nil, "SET LOCAL work_mem = '"+w.workMem+"'", nil, nil, nil)
	}
	if l != nil {
		params, oids, formats, err := ledgerParams(conn.TypeMap(), l)
		if err != nil {
			return err
		}
		queue("ledger", func(err error) error {
			if ledgerConflict(err) {
				return ErrAlreadyCommitted
			}
			return fmt.Errorf("record batch in ledger: %w", err)
		}, w.ledgerInsertSQL(), params, oids, formats)
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
		w.partitions.queueClaim(b, w.layout.Table(c.table).Store, c.claim)
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
	for k, c := range f.copies {
		sql := w.copySQLOf(c)
		last := k == len(f.copies)-1
		if last {
			// The server commits once the copy is in, without waiting for
			// another message.
			sql += "; COMMIT"
		}
		_, err := pc.CopyFrom(ctx, c.r, sql)
		if err == nil {
			continue
		}
		if c.partition() != "" {
			w.partitions.stale()
		}
		if rerr, ok := c.r.(interface{ Err() error }); ok && rerr.Err() != nil {
			// A reader that failed (a damaged entry): PostgreSQL only
			// heard that the COPY failed; say why.
			err = rerr.Err()
		}
		if last && !pc.IsClosed() && pc.TxStatus() == 'I' {
			// The copy went in and the commit failed (a deferred
			// constraint): nothing of the batch is committed.
			return fmt.Errorf("commit: %w", err)
		}
		return fmt.Errorf("copy into %s: %w", w.names[c.table], err)
	}
	if len(f.copies) > 0 && pc.TxStatus() != 'I' {
		return errors.New("pgwrite: the transaction is still open after its COMMIT")
	}
	return nil
}

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

func ledgerParams(m *pgtype.Map, l *Ledger) ([][]byte, []uint32, []int16, error) {
	oids := []uint32{pgtype.TextOID, pgtype.TextArrayOID}
	params, formats, err := encodeParams(m, oids, l.Stream, l.IDs)
	return params, oids, formats, err
}

func quarantineParams(m *pgtype.Map, qs []Quarantined) ([][]byte, []uint32, []int16, error) {
	stream, id, key, format, reason, payload := quarantineColumns(qs)
	oids := []uint32{pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID, pgtype.TextArrayOID,
		pgtype.TextArrayOID, pgtype.ByteaArrayOID}
	params, formats, err := encodeParams(m, oids, stream, id, key, format, reason, payload)
	return params, oids, formats, err
}
