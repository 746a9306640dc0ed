package pgsink

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// A failover to an asynchronous standby loses the commits the standby had
// not received, acknowledged ones included. The sink remembers its recent
// commits (one ledger key each: a commit's ledger rows are all there or
// none is) with the server that committed them; once a new connection
// reaches another server (another system identifier, timeline or
// postmaster start), it reads those keys in the ledger there and reports
// the commits it lacks, with their rows, as lost.

// recentCommits is how many commits the sink remembers: at a flush's
// default size, minutes of full load, more than the lag of a standby that
// keeps up.
const recentCommits = 8192

// recentCommit is one commit the sink remembers.
type recentCommit struct {
	server pgwrite.Server
	key    pgwrite.LedgerKey
	rows   [tables.NumSignalTables]int
	at     time.Time
}

// commitRing holds the last recentCommits commits.
type commitRing struct {
	mu   sync.Mutex
	buf  []recentCommit
	head int // the oldest, once buf is full
}

func (r *commitRing) add(c recentCommit) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.buf) < recentCommits {
		r.buf = append(r.buf, c)
		return
	}
	r.buf[r.head] = c
	r.head = (r.head + 1) % len(r.buf)
}

// takeOthers removes and returns the commits made on another server than s.
func (r *commitRing) takeOthers(s pgwrite.Server) []recentCommit {
	r.mu.Lock()
	defer r.mu.Unlock()
	var taken []recentCommit
	kept := make([]recentCommit, 0, len(r.buf))
	for k := range r.buf {
		c := r.buf[(r.head+k)%len(r.buf)]
		if c.server.Same(s) {
			kept = append(kept, c)
		} else {
			taken = append(taken, c)
		}
	}
	r.buf, r.head = kept, 0
	return taken
}

// putBack returns commits takeOthers took, for a later check.
func (r *commitRing) putBack(cs []recentCommit) {
	for _, c := range cs {
		r.add(c)
	}
}

// connected is the pool's AfterConnect: it identifies the server every new
// connection reached and checks the recent commits when it is another one.
// A server that cannot be identified is written to all the same (its
// commits are not remembered).
func (c *Sink) connected(ctx context.Context, conn *pgx.Conn) error {
	srv, err := pgwrite.Identify(ctx, conn)
	if err != nil {
		c.logger.Debug("the server a connection reached was not identified", zap.Error(err))
		return nil
	}
	c.srvMu.Lock()
	prev := c.server
	c.server = srv
	c.srvMu.Unlock()
	if prev.Known() && !prev.Same(srv) {
		c.logger.Warn("PostgreSQL is another server now (a failover, a restore or a restart); checking it holds the recent commits",
			zap.String("target", c.describe(srv)), zap.String("previous", c.describe(prev)),
			zap.Uint32("timeline", srv.Timeline), zap.Uint32("previous_timeline", prev.Timeline))
		c.wantCheck()
	}
	return nil
}

// current is the server the last new connection reached.
func (c *Sink) current() pgwrite.Server {
	c.srvMu.Lock()
	defer c.srvMu.Unlock()
	return c.server
}

// describe names srv in logs as Target does, with the address reached.
func (c *Sink) describe(srv pgwrite.Server) string {
	cc := c.cfg.Pool.ConnConfig
	if srv.Addr == "" {
		return c.target
	}
	return fmt.Sprintf("%s@%s/%s", cc.User, srv.Addr, cc.Database)
}

// Reached names the server the last new connection reached, as Target
// does (Target names the endpoint's first host).
func (c *Sink) Reached() string { return c.describe(c.current()) }

// commit is the writers' OnCommit: it remembers a ledgered commit.
func (c *Sink) commit(cm pgwrite.Commit) {
	srv, ok := pgwrite.ServerOf(cm.Conn)
	if !ok {
		return
	}
	rc := recentCommit{server: srv, key: pgwrite.LedgerKey{Stream: cm.Ledger.Stream, ID: cm.Ledger.IDs[0]}, at: time.Now()}
	copy(rc.rows[:], cm.Rows[:tables.NumSignalTables])
	c.recent.add(rc)
	if cur := c.current(); cur.Known() && !srv.Same(cur) {
		// Committed on the previous server, heard of after the switch.
		c.wantCheck()
	}
}

func (c *Sink) wantCheck() {
	select {
	case c.checkNow <- struct{}{}:
	default:
	}
}

// checkLoop checks the recent commits each time a new server is reached,
// until shutdown; a check that fails is tried again.
func (c *Sink) checkLoop(ctx context.Context) {
	defer c.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.checkNow:
		}
		for !c.checkRecent(ctx) {
			if !sleep(ctx, time.Second) {
				return
			}
		}
	}
}

// checkRecent reads, on the server now reached, the ledger keys of the
// commits made on others, and reports those it lacks. It returns false
// when it could not tell (to be tried again).
func (c *Sink) checkRecent(ctx context.Context) bool {
	cur := c.current()
	taken := c.recent.takeOthers(cur)
	if len(taken) == 0 {
		return true
	}
	// Past half the ledger's retention, the ledger may have been pruned of
	// a commit: such commits are not checked.
	oldest := time.Now().Add(-c.cfg.LedgerRetention / 2)
	keys := make([]pgwrite.LedgerKey, 0, len(taken))
	checkable := taken[:0:0]
	for _, rc := range taken {
		if c.cfg.LedgerRetention <= 0 || rc.at.After(oldest) {
			keys = append(keys, rc.key)
			checkable = append(checkable, rc)
		}
	}
	if len(keys) == 0 {
		return true
	}
	held, srv, err := c.writer.LedgerHolds(ctx, keys)
	if err != nil || !srv.Same(cur) {
		c.recent.putBack(checkable)
		if err != nil && ctx.Err() == nil {
			c.logger.Debug("the recent commits were not checked yet", zap.Error(err))
		}
		return ctx.Err() != nil
	}
	c.report(ctx, srv, checkable, held)
	c.logReplication(ctx)
	return true
}

// report says which of checked the ledger of srv lacks: an Error line and
// the lost rows counter, by previous server.
func (c *Sink) report(ctx context.Context, srv pgwrite.Server, checked []recentCommit, held map[pgwrite.LedgerKey]bool) {
	type loss struct {
		server         pgwrite.Server
		checked, lost  int
		rows           [tables.NumSignalTables]int
		firstL, lastL  time.Time
		lostKeysSample []string
	}
	var losses []*loss
	find := func(s pgwrite.Server) *loss {
		for _, l := range losses {
			if l.server.Same(s) {
				return l
			}
		}
		l := &loss{server: s}
		losses = append(losses, l)
		return l
	}
	for _, rc := range checked {
		l := find(rc.server)
		l.checked++
		if held[rc.key] {
			continue
		}
		l.lost++
		for i, n := range rc.rows {
			l.rows[i] += n
		}
		if l.firstL.IsZero() || rc.at.Before(l.firstL) {
			l.firstL = rc.at
		}
		if rc.at.After(l.lastL) {
			l.lastL = rc.at
		}
		if len(l.lostKeysSample) < 3 {
			l.lostKeysSample = append(l.lostKeysSample, rc.key.Stream+"/"+rc.key.ID)
		}
	}
	for _, l := range losses {
		if l.lost == 0 {
			c.logger.Info("PostgreSQL now reached holds every recent commit made on the previous server",
				zap.String("target", c.describe(srv)), zap.String("previous", c.describe(l.server)),
				zap.Uint32("timeline", srv.Timeline), zap.Uint32("previous_timeline", l.server.Timeline),
				zap.Int("checked_commits", l.checked))
			continue
		}
		lost := map[string]int{}
		var names []string
		for i, n := range l.rows {
			if n > 0 {
				name := tables.Tables[i].Name
				lost[name] = n
				names = append(names, fmt.Sprintf("%s %d", name, n))
				c.rec.Lost(ctx, name, n)
			}
		}
		c.logger.Error("PostgreSQL now reached lacks commits made on the previous server (a failover to a standby that had not received them): their items were acknowledged and are lost: "+strings.Join(names, ", "),
			zap.String("target", c.describe(srv)), zap.String("previous", c.describe(l.server)),
			zap.Uint32("timeline", srv.Timeline), zap.Uint32("previous_timeline", l.server.Timeline),
			zap.Int("lost_commits", l.lost), zap.Int("checked_commits", l.checked), zap.Any("lost_rows", lost),
			zap.Time("first_lost_commit", l.firstL), zap.Time("last_lost_commit", l.lastL),
			zap.Strings("lost_ledger_keys_sample", l.lostKeysSample))
	}
}

// replicationSQL reads what a failover risks for this session's commits.
// pg_stat_replication shows a role without pg_read_all_stats its rows
// without their state: the synchronous count is then a lower bound.
const replicationSQL = `SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'),
	(SELECT count(*) FROM pg_stat_replication),
	(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum'))`

// logReplication says what an acknowledged item risks when the database
// fails over, from the server's replication settings and the exporter's
// synchronous_commit, as docs/delivery.md does.
func (c *Sink) logReplication(ctx context.Context) {
	var serverCommit, names string
	var standbys, syncStandbys int
	if err := c.pool.QueryRow(ctx, replicationSQL).Scan(&serverCommit, &names, &standbys, &syncStandbys); err != nil {
		if ctx.Err() == nil {
			c.logger.Debug("replication settings not read", zap.Error(err))
		}
		return
	}
	commit, from := serverCommit, "the server's"
	if c.cfg.SynchronousCommit != "" {
		commit, from = c.cfg.SynchronousCommit, "the exporter's"
	}
	fields := []zap.Field{zap.String("target", c.Reached()), zap.String("synchronous_commit", commit),
		zap.String("synchronous_commit_from", from), zap.String("synchronous_standby_names", names),
		zap.Int("standbys", standbys), zap.Int("synchronous_standbys", syncStandbys)}
	synchronous := names != "" && commit != "off" && commit != "local"
	local := ""
	if commit == "off" {
		local = "; synchronous_commit off: a crash of the server itself loses its last commits too"
	}
	switch {
	case synchronous && syncStandbys == 0 && standbys == 0:
		c.logger.Warn("PostgreSQL replication is synchronous and no standby streams: commits wait until one does, and nothing is acknowledged meanwhile", fields...)
	case synchronous && commit == "remote_write":
		c.logger.Info("PostgreSQL replication is synchronous (remote_write): an item is acknowledged once a synchronous standby received its commit; a failover to it loses nothing acknowledged, unless its operating system fails as well", fields...)
	case synchronous:
		c.logger.Info("PostgreSQL replication is synchronous: an item is acknowledged (in Redis mode: removed from Redis) once a synchronous standby flushed its commit; a failover to it loses nothing acknowledged", fields...)
	case standbys > 0:
		c.logger.Warn("PostgreSQL replication is asynchronous for this exporter's commits: a failover to a standby loses the commits it had not received, acknowledged items among them; the exporter reports them once it reaches the new primary (otelcol_postgrescopy_failover_lost_rows). "+
			"To lose none, set synchronous_standby_names on the server and synchronous_commit to on or remote_apply"+local, fields...)
	default:
		c.logger.Info("PostgreSQL has no standby streaming from it: a failover to a standby made later would lose the commits it had not received; the exporter reports them once it reaches the new primary"+local, fields...)
	}
}
