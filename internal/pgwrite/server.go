package pgwrite

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Server identifies the PostgreSQL server a connection reached, as far as
// what it holds goes: its system identifier (pg_control_system()), which a
// physical standby shares with its primary, the timeline it writes on, which
// a promotion or a point-in-time restore changes, and when its postmaster
// started, which a restart changes. Two connections with the same Server see
// the same commits.
type Server struct {
	SystemID uint64
	Timeline uint32
	Started  time.Time
	// Addr is the host:port the connection reached (not part of the
	// identity: another address may reach the same server).
	Addr string
}

// Same reports whether s and o are one server's history: every commit one
// saw, the other holds.
func (s Server) Same(o Server) bool {
	return s.SystemID == o.SystemID && s.Timeline == o.Timeline && s.Started.Equal(o.Started)
}

// Known reports whether s was identified.
func (s Server) Known() bool { return s.SystemID != 0 }

// identifySQL reads the identity of the server. The timeline is the one WAL
// is inserted on, which pg_walfile_name names at once after a promotion
// (pg_control_checkpoint() names it only after the next checkpoint); a
// server in recovery has no insert position and gives its last checkpoint's.
const identifySQL = `SELECT s.system_identifier,
	CASE WHEN pg_is_in_recovery() THEN (SELECT timeline_id FROM pg_control_checkpoint())
	ELSE ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int END,
	pg_postmaster_start_time()
	FROM pg_control_system() s`

// serverKey is where Identify keeps a connection's Server
// (pgconn.PgConn.CustomData).
const serverKey = "postgrescopy.server"

// Identify reads which server conn reached and keeps it with the connection
// for ServerOf.
func Identify(ctx context.Context, conn *pgx.Conn) (Server, error) {
	var s Server
	var sysid int64
	var tli int32
	if err := conn.QueryRow(ctx, identifySQL).Scan(&sysid, &tli, &s.Started); err != nil {
		return Server{}, fmt.Errorf("identify the server: %w", err)
	}
	s.SystemID, s.Timeline = uint64(sysid), uint32(tli)
	s.Addr = Addr(conn.PgConn())
	conn.PgConn().CustomData()[serverKey] = s
	return s, nil
}

// ServerOf is the Server Identify read for pc; false when it did not.
func ServerOf(pc *pgconn.PgConn) (Server, bool) {
	s, ok := pc.CustomData()[serverKey].(Server)
	return s, ok
}

// Addr is the address pc reached (ip:port; of the several hosts an
// endpoint may name, the one it connected to).
func Addr(pc *pgconn.PgConn) string {
	if pc == nil || pc.Conn() == nil {
		return ""
	}
	return pc.Conn().RemoteAddr().String()
}

// Commit is one committed write, as Writer.OnCommit hears of it.
type Commit struct {
	Conn   *pgconn.PgConn // the connection that committed
	Ledger *Ledger
	// Rows is the rows of each table the transaction holds, refused rows
	// (in the rejects table) included.
	Rows [tables.NumTables]int
}

// OnCommit makes w call f after each write with a ledger that committed,
// on the writing goroutine. Call it before the first write.
func (w *Writer) OnCommit(f func(Commit)) { w.onCommit = f }

func (w *Writer) committed(pc *pgconn.PgConn, l *Ledger, rows func(i int) int) {
	if w.onCommit == nil || l == nil || len(l.IDs) == 0 {
		return
	}
	c := Commit{Conn: pc, Ledger: l}
	for i := range c.Rows {
		c.Rows[i] = rows(i)
	}
	w.onCommit(c)
}

// LedgerKey is one ledger row: the stream and an entry id (or request key).
type LedgerKey struct{ Stream, ID string }

// LedgerHolds returns which of keys the ledger holds, whatever their stream,
// read on one connection of the pool together with the server it reached,
// so that the answer is known to be that server's.
func (w *Writer) LedgerHolds(ctx context.Context, keys []LedgerKey) (map[LedgerKey]bool, Server, error) {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return nil, Server{}, err
	}
	defer conn.Release()
	srv, ok := ServerOf(conn.Conn().PgConn())
	if !ok {
		if srv, err = Identify(ctx, conn.Conn()); err != nil {
			return nil, Server{}, err
		}
	}
	streams, ids := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		streams[i], ids[i] = k.Stream, k.ID
	}
	rows, err := conn.Query(ctx, "SELECT l.stream, l.entry_id FROM "+w.ledgerTable+
		" l JOIN unnest($1::text[], $2::text[]) k(stream, entry_id) ON l.stream = k.stream AND l.entry_id = k.entry_id", streams, ids)
	if err != nil {
		return nil, Server{}, fmt.Errorf("read ledger: %w", err)
	}
	defer rows.Close()
	out := make(map[LedgerKey]bool, len(keys))
	for rows.Next() {
		var k LedgerKey
		if err := rows.Scan(&k.Stream, &k.ID); err != nil {
			return nil, Server{}, err
		}
		out[k] = true
	}
	return out, srv, rows.Err()
}
