package coord

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// The loss audit driven check by check: each maintenance tick is one
// checkShard call against the server the client would reach then, and the
// audit's clock is the test's, so what is decided depends on the servers'
// state and the ticks only, never on how fast the machine is.

// committedKeys is the PostgreSQL ledger as the audit reads it: the request
// keys committed.
type committedKeys struct {
	mu   sync.Mutex
	keys map[string]bool
}

func (l *committedKeys) commit(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keys[key] = true
}

func (l *committedKeys) Committed(_ context.Context, _ string, keys []string) (map[string]bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]bool{}
	for _, k := range keys {
		if l.keys[k] {
			out[k] = true
		}
	}
	return out, nil
}

// lossReports are the runtime's Lost calls: the entries of each.
type lossReports struct {
	mu      sync.Mutex
	entries []int64
}

func (r *lossReports) Lost(_ context.Context, _ string, entries int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.entries = append(r.entries, entries)
}

func (r *lossReports) all() []int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int64(nil), r.entries...)
}

// auditClock is the audit's clock, moved by the test only.
type auditClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *auditClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *auditClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// auditBench is one runtime's audit of the traces stream under prefix,
// without its loops: the test calls each check.
type auditBench struct {
	t      *testing.T
	rs     *Runtime
	keys   Keys
	rec    *lossReports
	ledger *committedKeys
	clock  *auditClock
	logs   *observer.ObservedLogs
	n      int // requests enqueued
}

// auditStatsEvery stands for redis::stats_every between two checks.
const auditStatsEvery = 100 * time.Millisecond

func newAuditBench(t *testing.T, first *redis.Client) *auditBench {
	core, logs := observer.New(zapcore.InfoLevel)
	b := &auditBench{
		t: t, keys: ShardKeys("audit", "traces", 0), rec: &lossReports{}, ledger: &committedKeys{keys: map[string]bool{}},
		clock: &auditClock{t: time.Unix(1_800_000_000, 0)}, logs: logs,
	}
	cl := &Client{rdb: first, where: "test"}
	b.rs = NewRuntime(cl, Config{KeyPrefix: "audit", Signals: []string{"traces"}, Shards: 1, Workers: 1, StatsEvery: auditStatsEvery},
		zap.New(core), b.rec, b.ledger, nil)
	b.rs.now = b.clock.now
	b.rs.recent[b.keys.Stream] = &recentAdds{}
	s := b.on(first)
	require.NoError(t, b.rs.ensure(context.Background(), s))
	return b
}

// on is the traces stream as reached through rdb.
func (b *auditBench) on(rdb *redis.Client) *Stream {
	return NewStream(rdb, b.keys, Bounds{}, "audit-test")
}

// enqueue acknowledges n requests of 20 spans through rdb, as Enqueue does
// when the client reaches that server, and returns their keys.
func (b *auditBench) enqueue(rdb *redis.Client, n int) []string {
	b.rs.adders["traces"] = []*Stream{b.on(rdb)}
	var keys []string
	for range n {
		key := "req-" + strconv.Itoa(b.n)
		b.n++
		require.NoError(b.t, b.rs.Enqueue(context.Background(), "traces", key, "test", []byte("payload"), 20))
		keys = append(keys, key)
	}
	return keys
}

// check is one maintenance tick reaching rdb.
func (b *auditBench) check(rdb *redis.Client) {
	b.rs.readSentinels(context.Background())
	require.NoError(b.t, b.rs.checkShard(context.Background(), "traces", b.on(rdb)))
	b.clock.advance(auditStatsEvery)
}

// errors are the Error logs said so far.
func (b *auditBench) errors() []observer.LoggedEntry {
	return b.logs.FilterLevelExact(zapcore.ErrorLevel).All()
}

func (b *auditBench) said() string {
	var lines []string
	for _, e := range b.logs.All() {
		lines = append(lines, fmt.Sprintf("%s %s %v", e.Level, e.Message, e.ContextMap()))
	}
	return strings.Join(lines, "\n")
}

// promote makes replica a copy of primary's data, then a primary of its own
// (Sentinel's promotion): the stream with its epoch and the entries it had
// received, on a server with another run id.
func promote(t *testing.T, replica, primary *redis.Client, keys Keys) {
	ctx := context.Background()
	host, port, ok := strings.Cut(primary.Options().Addr, ":")
	require.True(t, ok)
	require.NoError(t, replica.Do(ctx, "REPLICAOF", host, port).Err())
	want, err := primary.XLen(ctx, keys.Stream).Result()
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := replica.Info(ctx, "replication").Result()
		n, _ := replica.XLen(ctx, keys.Stream).Result()
		return err == nil && strings.Contains(info, "master_link_status:up") && n == want
	}, 10*time.Second, 10*time.Millisecond, "the replica does not receive the stream")
	require.NoError(t, replica.Do(ctx, "REPLICAOF", "NO", "ONE").Err())
}

// failoverWithReturn plays a Sentinel failover in which the old primary
// comes back empty and the client reaches it for two checks before it
// settles on the promoted replica: primary holds 6 requests, the replica
// receives them and is promoted, lagging requests reach the primary only,
// during meanwhile reach the empty old primary, of which committed are
// flushed from it. It returns the bench after enough checks for every wait
// of the audit to have ended.
func failoverWithReturn(t *testing.T, lagging, during, committed int) *auditBench {
	volatile := []string{"--save", "", "--appendonly", "no"}
	// The full sync starts at once (its default waits 5s for more replicas).
	primary := throwawayRedis(t, append(volatile, "--repl-diskless-sync-delay", "0")...)
	replica, restarted := throwawayRedis(t, volatile...), throwawayRedis(t, volatile...)
	b := newAuditBench(t, primary)
	b.enqueue(primary, 6)
	b.check(primary)
	b.check(primary)
	promote(t, replica, primary, b.keys)
	b.enqueue(primary, lagging)

	b.check(replica) // the client follows the promoted replica
	// A sentinel still names the old primary's address, where it is back
	// empty: two checks reach it, and the stream is not there.
	for _, key := range b.enqueue(restarted, during)[:committed] {
		b.ledger.commit(key)
	}
	b.check(restarted)
	b.check(restarted)
	assert.Empty(t, b.rec.all(), "a loss decided while the failover settles:\n%s", b.said())
	// Settled on the promoted replica, for longer than every wait.
	b.check(replica)
	b.clock.advance(FailoverGrace)
	for range epochTicks + 2 {
		b.check(replica)
	}
	return b
}

// TestLossAuditFailoverSettlingIsNoLoss: with min_replicas every
// acknowledged entry is on the promoted replica; a server without the
// stream answering for two checks while the failover settles (the old
// primary back empty, still named by a sentinel) is no loss, and nothing may
// say one.
func TestLossAuditFailoverSettlingIsNoLoss(t *testing.T) {
	b := failoverWithReturn(t, 0, 0, 0)
	assert.Empty(t, b.rec.all(), "a loss counted where nothing was lost:\n%s", b.said())
	assert.Empty(t, b.errors(), "an Error where nothing was lost:\n%s", b.said())
	assert.NotEmpty(t, b.logs.FilterMessageSnippet("server holding a stream changed").All(), "the failover went unnoticed")
}

// TestLossAuditFailoverSettlingMeasuresTheLoss: without min_replicas what
// the primary acknowledged and the replica lacked is lost, and so is what
// the empty old primary acknowledged while it answered, unless it was
// flushed from there: reported once, exactly, as a failover's loss, and the
// stream not reported lost whole.
func TestLossAuditFailoverSettlingMeasuresTheLoss(t *testing.T) {
	const lagging, during, committed = 4, 3, 1
	b := failoverWithReturn(t, lagging, during, committed)
	want := int64(lagging + during - committed)
	assert.Equal(t, []int64{want}, b.rec.all(), "one loss, counted exactly:\n%s", b.said())
	failover := b.logs.FilterMessageSnippet("Redis lost entries in a failover").All()
	require.Len(t, failover, 1, b.said())
	assert.Equal(t, want, failover[0].ContextMap()["lost_entries"])
	assert.Equal(t, 20*want, failover[0].ContextMap()["lost_items"])
	assert.Empty(t, b.logs.FilterMessageSnippet("Redis lost the stream").All(), "the stream was not lost:\n%s", b.said())
}

// TestLossAuditStreamLostAfterTicksAndGrace: a stream whose epoch stays
// gone (a restart without persistence) is reported lost whole once it has
// been missing for epochTicks checks and FailoverGrace, not before, with the
// backlog last seen with its epoch; once, and not again as a failover's
// loss.
func TestLossAuditStreamLostAfterTicksAndGrace(t *testing.T) {
	volatile := []string{"--save", "", "--appendonly", "no"}
	before, after := throwawayRedis(t, volatile...), throwawayRedis(t, volatile...)
	b := newAuditBench(t, before)
	b.enqueue(before, 4)
	b.check(before)
	b.check(before)

	// Many checks in little time: not yet.
	for range 3 * epochTicks {
		b.check(after)
	}
	require.Empty(t, b.rec.all(), "decided before FailoverGrace:\n%s", b.said())
	// The grace over, but counted in checks since it restarted: not yet
	// either.
	b2 := newAuditBench(t, before)
	b2.enqueue(before, 2)
	b2.check(before)
	b2.check(after)
	b2.clock.advance(2 * FailoverGrace)
	for range epochTicks - 2 {
		b2.check(after)
	}
	require.Empty(t, b2.rec.all(), "decided before epochTicks checks:\n%s", b2.said())
	b2.check(after)
	assert.Len(t, b2.rec.all(), 1, "decided after epochTicks checks and FailoverGrace:\n%s", b2.said())

	b.clock.advance(FailoverGrace)
	b.check(after)
	assert.Equal(t, []int64{4}, b.rec.all(), "the backlog last seen:\n%s", b.said())
	lost := b.logs.FilterMessageSnippet("Redis lost the stream").All()
	require.Len(t, lost, 1)
	assert.EqualValues(t, 4, lost[0].ContextMap()["last_seen_entries"])
	for range epochTicks + 2 {
		b.check(after)
	}
	b.clock.advance(FailoverGrace)
	for range epochTicks + 2 {
		b.check(after)
	}
	assert.Len(t, b.rec.all(), 1, "reported once:\n%s", b.said())
	assert.Empty(t, b.logs.FilterMessageSnippet("Redis lost entries in a failover").All())
}

// write is a worker writing everything in the stream rdb holds: the keys
// committed to the ledger, then the entries acknowledged and deleted.
func (b *auditBench) write(rdb *redis.Client) {
	s := b.on(rdb)
	es, err := s.ReadNew(context.Background(), 1000, time.Millisecond)
	require.NoError(b.t, err)
	for _, e := range es {
		b.ledger.commit(e.Key)
	}
	require.NoError(b.t, s.Ack(context.Background(), es))
}

// A stream lost whole that was empty when last read lost exactly the
// entries this collector added since and did not write: none is a warning
// and no loss (the stream of an idle signal, or one PostgreSQL kept up with,
// whose server restarted empty), some are counted one by one, not estimated
// from the backlog.
func TestLossAuditStreamLostEmptyCountsTheAddsSince(t *testing.T) {
	volatile := []string{"--save", "", "--appendonly", "no"}
	for _, tc := range []struct {
		name           string
		unwritten      int // entries added after the last read, not written
		written        int // entries added after the last read, written
		afterwards     int // entries added to the recreated stream, not written yet
		wantLost       []int64
		wantLostEntry  int
		wantLevel      zapcore.Level
		wantInTheError string
	}{
		{name: "nothing added since", wantLevel: zapcore.WarnLevel},
		{name: "added since and written", written: 3, wantLevel: zapcore.WarnLevel},
		{name: "added since and not written", written: 1, unwritten: 2, wantLost: []int64{2}, wantLostEntry: 2, wantLevel: zapcore.ErrorLevel},
		{name: "added to the recreated stream", written: 1, afterwards: 3, wantLevel: zapcore.WarnLevel},
		{name: "lost, then added to the recreated stream", unwritten: 2, afterwards: 3, wantLost: []int64{2}, wantLostEntry: 2, wantLevel: zapcore.ErrorLevel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := throwawayRedis(t, volatile...), throwawayRedis(t, volatile...)
			b := newAuditBench(t, before)
			b.enqueue(before, 5)
			b.write(before)
			b.check(before)
			b.check(before)
			b.enqueue(before, tc.written)
			b.write(before)
			b.enqueue(before, tc.unwritten)

			b.check(after)
			// The client goes on adding to the stream recreated on the
			// server back empty; a worker has not written them yet.
			b.enqueue(after, tc.afterwards)
			said := b.decideLost(after, tc.wantLost, tc.wantLevel)
			if tc.wantLostEntry > 0 {
				assert.EqualValues(t, tc.wantLostEntry, said.ContextMap()["lost_entries"])
				assert.EqualValues(t, 20*tc.wantLostEntry, said.ContextMap()["lost_items"])
			}
			assert.NotContains(t, said.ContextMap(), "last_seen_entries", "counted, not estimated")
			for range epochTicks + 2 {
				b.check(after)
			}
			b.clock.advance(FailoverGrace)
			b.check(after)
			assert.Equal(t, tc.wantLost, b.rec.all(), "decided once:\n%s", b.said())
			assert.Empty(t, b.logs.FilterMessageSnippet("Redis lost entries in a failover").All())
		})
	}
}

// decideLost runs the checks, on rdb, that decide a stream lost whole, and
// returns what was said of it: once, at level, counting wantLost.
func (b *auditBench) decideLost(rdb *redis.Client, wantLost []int64, level zapcore.Level) observer.LoggedEntry {
	b.t.Helper()
	b.clock.advance(FailoverGrace)
	for range epochTicks {
		b.check(rdb)
	}
	assert.Equal(b.t, wantLost, b.rec.all(), "the loss counted:\n%s", b.said())
	said := b.logs.FilterMessageSnippet("Redis lost the stream").All()
	require.Len(b.t, said, 1, "said once:\n%s", b.said())
	assert.Equal(b.t, level, said[0].Level)
	return said[0]
}

// read is a worker reading everything in the stream rdb holds, not yet
// written: the entries stay pending, delivered to it.
func (b *auditBench) read(rdb *redis.Client) []Entry {
	es, err := b.on(rdb).ReadNew(context.Background(), 1000, time.Millisecond)
	require.NoError(b.t, err)
	return es
}

// A stream lost whole that, when last read, held only entries this
// collector added and a worker had read (being written, as under load) is
// counted exactly too: those of them and of the adds since that are not in
// PostgreSQL. One the stream held undelivered, or one this collector did not
// add, leaves the backlog last seen as the estimate.
func TestLossAuditStreamLostHeldByWorkersIsCounted(t *testing.T) {
	volatile := []string{"--save", "", "--appendonly", "no"}
	for _, tc := range []struct {
		name          string
		held          int  // entries read by a worker at the last read
		heldWritten   int  // of them, written before the loss was decided
		undelivered   int  // entries in the stream at the last read, not read
		foreign       bool // one held entry was added by another collector
		unwritten     int  // entries added after the last read, not written
		wantLost      []int64
		wantLevel     zapcore.Level
		wantEstimated bool
	}{
		{name: "held, all written", held: 4, heldWritten: 4, wantLost: nil, wantLevel: zapcore.WarnLevel},
		{name: "held, some not written", held: 4, heldWritten: 1, unwritten: 2, wantLost: []int64{5}, wantLevel: zapcore.ErrorLevel},
		{name: "an entry undelivered", held: 4, heldWritten: 4, undelivered: 1, wantLost: []int64{5}, wantLevel: zapcore.ErrorLevel, wantEstimated: true},
		{name: "another collector's entry held", held: 4, heldWritten: 4, foreign: true, wantLost: []int64{5}, wantLevel: zapcore.ErrorLevel, wantEstimated: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := throwawayRedis(t, volatile...), throwawayRedis(t, volatile...)
			b := newAuditBench(t, before)
			b.enqueue(before, 3)
			b.write(before)
			b.check(before)
			keys := b.enqueue(before, tc.held)
			if tc.foreign {
				// Added by another collector: not among this one's adds.
				_, err := b.on(before).AddEntry(context.Background(), "other-collector", "test", []byte("payload"), 20)
				require.NoError(t, err)
			}
			held := b.read(before)
			require.Len(t, held, len(keys)+map[bool]int{true: 1}[tc.foreign])
			b.enqueue(before, tc.undelivered)
			b.check(before)
			b.enqueue(before, tc.unwritten)

			b.check(after)
			// The worker commits some of what it held; its acknowledgement
			// fails on the server back empty, so they stay lost there.
			for _, key := range keys[:tc.heldWritten] {
				b.ledger.commit(key)
			}
			said := b.decideLost(after, tc.wantLost, tc.wantLevel)
			if tc.wantEstimated {
				assert.EqualValues(t, tc.wantLost[0], said.ContextMap()["last_seen_entries"], "estimated from the backlog")
			} else {
				assert.NotContains(t, said.ContextMap(), "last_seen_entries", "counted, not estimated")
				assert.EqualValues(t, tc.held, said.ContextMap()["held_when_last_read"])
			}
			if tc.wantLevel == zapcore.ErrorLevel && !tc.wantEstimated {
				assert.EqualValues(t, tc.wantLost[0], said.ContextMap()["lost_entries"])
				assert.EqualValues(t, 20*tc.wantLost[0], said.ContextMap()["lost_items"])
			}
		})
	}
}

// A stream lost whole whose adds since its last read are no longer all
// remembered (more than failoverTracked, or older than failoverWindow) is
// estimated from the backlog as before: nothing exact to count.
func TestLossAuditStreamLostEmptyWithoutTheAddsIsEstimated(t *testing.T) {
	volatile := []string{"--save", "", "--appendonly", "no"}
	before, after := throwawayRedis(t, volatile...), throwawayRedis(t, volatile...)
	b := newAuditBench(t, before)
	b.check(before)
	b.enqueue(before, 2)
	// What add trims past the window: the list no longer reaches back.
	b.rs.recent[b.keys.Stream].forget(b.clock.now())
	b.clock.advance(time.Millisecond)
	b.check(after)
	// The backlog last seen, as an estimate.
	said := b.decideLost(after, []int64{0}, zapcore.ErrorLevel)
	assert.EqualValues(t, 0, said.ContextMap()["last_seen_entries"])
}

// runID is the run id of the server rdb reaches.
func runID(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	id, err := NewStream(rdb, Keys{}, Bounds{}, "").Node(context.Background())
	require.NoError(t, err)
	return id
}

// sentinelsOf are clients of the sentinels at addrs, watched by b's runtime
// as it watches those of redis::sentinel.
func (b *auditBench) watchSentinels(master string, addrs []string) []*redis.SentinelClient {
	var scs []*redis.SentinelClient
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: a})
		b.t.Cleanup(func() { _ = sc.Close() })
		scs = append(scs, sc)
	}
	b.rs.cl.masterName = master
	b.rs.sentinels = scs
	return scs
}

// monitor makes every sentinel monitor rdb's server as master, as a
// failover ends, and waits until each names it by its run id.
func monitor(t *testing.T, scs []*redis.SentinelClient, master string, rdb *redis.Client) {
	ctx := context.Background()
	host, port, ok := strings.Cut(rdb.Options().Addr, ":")
	require.True(t, ok)
	for _, sc := range scs {
		require.NoError(t, sc.Remove(ctx, master).Err())
		require.NoError(t, sc.Monitor(ctx, master, host, port, "2").Err())
	}
	namedBy(t, scs, master, rdb)
}

// namedBy waits until every sentinel names rdb's server, up, by its run id.
func namedBy(t *testing.T, scs []*redis.SentinelClient, master string, rdb *redis.Client) {
	want := runID(t, rdb)
	for _, sc := range scs {
		require.Eventually(t, func() bool {
			m, err := sc.Master(context.Background(), master).Result()
			return err == nil && m["runid"] == want && m["flags"] == "master"
		}, 10*time.Second, 10*time.Millisecond, "the sentinel does not name the primary")
	}
}

// TestLossAuditWaitsForTheSentinelsPrimary: the client stays on a server
// that is not the primary the sentinels name (the old primary back empty,
// the sentinels naming the promoted replica) for many checks and longer
// than every wait. Nothing is decided and requests are refused meanwhile;
// once it reaches the primary they name, what the old primary's stay and
// the failover lost is reported once, exactly, and the stream not lost
// whole.
func TestLossAuditWaitsForTheSentinelsPrimary(t *testing.T) {
	const lagging, during, committed = 4, 3, 1
	const master = "audit"
	volatile := []string{"--save", "", "--appendonly", "no"}
	ps := redistest.Start(t, "", append(volatile, "--repl-diskless-sync-delay", "0")...)
	primary := redistest.Client(t, ps)
	replica, restarted := throwawayRedis(t, volatile...), throwawayRedis(t, volatile...)
	addrs := redistest.StartSentinels(t, ps, 3, redisserver.SentinelOptions{Master: master})
	b := newAuditBench(t, primary)
	scs := b.watchSentinels(master, addrs)
	namedBy(t, scs, master, primary)

	b.enqueue(primary, 6)
	b.check(primary)
	b.check(primary)
	promote(t, replica, primary, b.keys)
	b.enqueue(primary, lagging)
	monitor(t, scs, master, replica)
	b.check(replica) // the client follows the promoted replica

	// It reaches the old primary, back empty, while the sentinels name the
	// promoted replica: what it adds before the next check is acknowledged
	// there.
	for _, key := range b.enqueue(restarted, during)[:committed] {
		b.ledger.commit(key)
	}
	for range 3 * epochTicks {
		b.check(restarted)
	}
	b.clock.advance(3 * FailoverGrace)
	for range 3 * epochTicks {
		b.check(restarted)
	}
	assert.Empty(t, b.rec.all(), "decided on a server the sentinels do not name:\n%s", b.said())
	assert.Empty(t, b.errors(), b.said())
	b.rs.adders["traces"] = []*Stream{b.on(restarted)}
	err := b.rs.Enqueue(context.Background(), "traces", "refused", "test", []byte("payload"), 20)
	require.ErrorIs(t, err, ErrNotNamedPrimary, "a request acknowledged by a server the sentinels do not name:\n%s", b.said())
	assert.Contains(t, err.Error(), "retrying")

	// On the primary the sentinels name, for longer than every wait.
	b.check(replica)
	b.enqueue(replica, 1)
	b.clock.advance(FailoverGrace)
	for range epochTicks + 2 {
		b.check(replica)
	}
	want := int64(lagging + during - committed)
	assert.Equal(t, []int64{want}, b.rec.all(), "one loss, counted exactly:\n%s", b.said())
	failover := b.logs.FilterMessageSnippet("Redis lost entries in a failover").All()
	require.Len(t, failover, 1, b.said())
	assert.Equal(t, want, failover[0].ContextMap()["lost_entries"])
	assert.Empty(t, b.logs.FilterMessageSnippet("Redis lost the stream").All(), "the stream was not lost:\n%s", b.said())
}

// TestLossAuditSentinelRefusingMasterAuditsAsWithout: a sentinel user that
// may not run SENTINEL MASTER leaves nothing to compare with; the audit
// runs as without the sentinels (a stream lost whole is reported), and says
// so once.
func TestLossAuditSentinelRefusingMasterAuditsAsWithout(t *testing.T) {
	const master = "audit"
	volatile := []string{"--save", "", "--appendonly", "no"}
	bs := redistest.Start(t, "", volatile...)
	before, after := redistest.Client(t, bs), throwawayRedis(t, volatile...)
	addrs := redistest.StartSentinels(t, bs, 1, redisserver.SentinelOptions{Master: master})
	admin := redis.NewClient(&redis.Options{Addr: addrs[0]})
	defer admin.Close()
	require.NoError(t, admin.Do(context.Background(), "ACL", "SETUSER", "limited", "on", ">limited-secret", "+@all", "-sentinel|master").Err())
	b := newAuditBench(t, before)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addrs[0], Username: "limited", Password: "limited-secret"})
	defer sc.Close()
	b.rs.cl.masterName, b.rs.sentinels = master, []*redis.SentinelClient{sc}
	b.enqueue(before, 4)
	b.check(before)
	b.check(before)
	b.check(after)
	b.clock.advance(FailoverGrace)
	b.check(after)
	assert.Equal(t, []int64{4}, b.rec.all(), "the stream lost, reported as without sentinels:\n%s", b.said())
	assert.Len(t, b.logs.FilterMessageSnippet("refuse SENTINEL MASTER").All(), 1, b.said())
}

// singleTo sends a client's single commands to another client, and leaves
// its pipelines to its own connections: a pool holding connections to two
// servers, as a Sentinel client's may in a failover, with a check's commands
// landing on both.
type singleTo struct{ other *redis.Client }

func (h singleTo) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h singleTo) ProcessHook(redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { return h.other.Process(ctx, cmd) }
}

func (h singleTo) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLossAuditIgnoresReadsOfAnotherServer: in Sentinel mode a check whose
// server is the primary the sentinels name, but whose reads another
// connection of the pool answers from another server (the old primary back
// empty), decides nothing from them: the stream is not lost for lacking
// there, however long that lasts.
func TestLossAuditIgnoresReadsOfAnotherServer(t *testing.T) {
	const master = "audit"
	volatile := []string{"--save", "", "--appendonly", "no"}
	ps := redistest.Start(t, "", volatile...)
	primary := redistest.Client(t, ps)
	empty := throwawayRedis(t, volatile...)
	addrs := redistest.StartSentinels(t, ps, 3, redisserver.SentinelOptions{Master: master})
	b := newAuditBench(t, primary)
	scs := b.watchSentinels(master, addrs)
	namedBy(t, scs, master, primary)
	b.enqueue(primary, 3)
	b.check(primary)
	b.check(primary)

	split := redis.NewClient(empty.Options())
	t.Cleanup(func() { _ = split.Close() })
	split.AddHook(singleTo{other: primary})
	for range 3 * epochTicks {
		b.check(split)
	}
	b.clock.advance(3 * FailoverGrace)
	for range 3 * epochTicks {
		b.check(split)
	}
	assert.Empty(t, b.rec.all(), "a loss decided from another server's answers:\n%s", b.said())
	assert.Empty(t, b.logs.FilterMessageSnippet("Redis lost the stream").All(), b.said())

	b.check(primary)
	b.clock.advance(FailoverGrace)
	for range epochTicks + 2 {
		b.check(primary)
	}
	assert.Empty(t, b.rec.all(), "nothing was lost:\n%s", b.said())
	assert.Empty(t, b.errors(), b.said())
}
