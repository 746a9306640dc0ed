package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Maintenance periods and limits of the Redis side.
const (
	consumerPruneEvery = 10 * time.Minute
	consumerIdleLimit  = time.Hour
	// startAttempt bounds what Start asks Redis, so that an unreachable
	// Redis delays the collector's start only briefly.
	startAttempt = 10 * time.Second
)

// Config is what the runtime needs of the redis section.
type Config struct {
	KeyPrefix string
	// Consumer names this replica in the groups; empty: host, pid and a
	// random suffix.
	Consumer string
	// Signals have a stream each (per shard).
	Signals []string
	// Shards per signal, and Workers per shard that Consume adds to.
	Shards, Workers int
	// MinReplicas must hold an entry before Enqueue returns, within
	// ReplicaTimeout.
	MinReplicas    int
	ReplicaTimeout time.Duration
	// MaxPendingBytes and MaxPendingEntries bound one signal's backlog,
	// split over its shards.
	MaxPendingBytes, MaxPendingEntries int64
	// RequireDurability is the least durability Start accepts
	// (DurabilityUnknown: any), RequireDurabilityName its configured name.
	RequireDurability     Durability
	RequireDurabilityName string
	// StatsEvery is how often the backlog is read, the epochs, entry counts
	// and servers compared, and the durability re-read.
	StatsEvery time.Duration
}

// Recorder receives what the runtime counts; the component implements it
// with its own telemetry.
type Recorder interface {
	// Lost counts one report that Redis lost entries of sig's stream, and
	// the entries it lost (or, for a stream lost whole, the backlog last
	// seen).
	Lost(ctx context.Context, sig string, entries int64)
}

// Ledger is PostgreSQL's ledger as the failover audit reads it.
type Ledger interface {
	// Committed returns which of keys the ledger of stream holds.
	Committed(ctx context.Context, stream string, keys []string) (map[string]bool, error)
}

// NewWorker returns the loop of one flush worker of sig's shard, reading s;
// the runtime runs it until shutdown. The component makes it
// (internal/flush).
type NewWorker func(sig string, shard, worker int, s *WorkerStream) func(ctx context.Context)

// Runtime is the Redis side of one configuration: the streams Enqueue adds
// to, the flush workers' streams, and the loop that keeps the backlog read,
// notices losses and tidies the consumers.
type Runtime struct {
	cfg       Config
	cl        *Client
	rdb       redis.UniversalClient
	addr      string
	consumer  string
	logger    *zap.Logger
	rec       Recorder
	ledger    Ledger
	newWorker NewWorker

	// adders are each signal's shards Enqueue adds to (redis::shards).
	adders map[string][]*Stream
	// shards are each signal's shards the workers cover: the adders' and
	// those the registry names beyond them, being drained. Only Start and
	// the maintenance loop touch it.
	shards map[string][]*Stream

	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}

	mu    sync.Mutex
	stats map[string]shardStats // last read, by stream
	// epochs holds each stream's epoch marker as last seen: one that
	// vanishes or changes means Redis lost the stream.
	epochs map[string]string
	// recent are the entries added lately, by stream (made at start, then
	// only read); nodes the run id of the server last seen holding each
	// stream (and its epoch then), suspects the entries missing since it
	// changed (failover.go).
	recent   map[string]*recentAdds
	nodes    map[string]nodeSeen
	suspects map[string]*failoverSuspects
	// unsettled holds the streams whose epoch changed or vanished lately,
	// not yet decided lost (settleEpoch).
	unsettled map[string]*epochChange
	// now is the clock of the failover audit's waits (a test's own).
	now func() time.Time
	// sentinels are the clients of the configured sentinels (Sentinel
	// mode only), sentinelView what they said at the last tick (and
	// sentinelRefusalSaid: their refusal of SENTINEL MASTER was logged),
	// waiting the streams whose checks wait for the server reached to be
	// the primary they name, away those whose server seen did not answer
	// meanwhile (sentinels.go).
	sentinels           []*redis.SentinelClient
	sentinelView        sentinelView
	sentinelRefusalSaid bool
	waiting             map[string]bool
	away                map[string]bool
	// refusing: Enqueue refuses, a majority of the sentinels name another
	// primary than the server reached (set at each check).
	refusing atomic.Bool
	// durability as last read; durabilityRead once it was.
	durability     Durability
	durabilityRead bool
	// memory as last read (maxmemory-policy); memoryRead once it was.
	memory     Memory
	memoryRead bool
}

// NewRuntime returns the runtime of cl, without I/O.
func NewRuntime(cl *Client, cfg Config, logger *zap.Logger, rec Recorder, ledger Ledger, newWorker NewWorker) *Runtime {
	rs := &Runtime{
		cfg: cfg, cl: cl, rdb: cl.rdb, addr: cl.where, consumer: cfg.Consumer, logger: logger,
		rec: rec, ledger: ledger, newWorker: newWorker,
		adders:    map[string][]*Stream{},
		shards:    map[string][]*Stream{},
		stats:     map[string]shardStats{},
		epochs:    map[string]string{},
		recent:    map[string]*recentAdds{},
		nodes:     map[string]nodeSeen{},
		suspects:  map[string]*failoverSuspects{},
		unsettled: map[string]*epochChange{},
		now:       time.Now,
		sentinels: cl.sentinelClients,
		waiting:   map[string]bool{},
		away:      map[string]bool{},
		done:      make(chan struct{}),
	}
	if rs.consumer == "" {
		rs.consumer = defaultConsumerName()
	}
	return rs
}

// Where names the Redis in logs and errors.
func (rs *Runtime) Where() string { return rs.addr }

// ObserveDurability returns the durability last read, for the gauge.
func (rs *Runtime) ObserveDurability() (int64, string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return int64(rs.durability), rs.durability.String()
}

func defaultConsumerName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// Start checks the credentials, the permissions, the eviction policy and
// the durability, and starts the flush workers and the maintenance loop.
// Redis being down is not an error here: the workers wait for it and say so.
// A failed Start leaves nothing running; the caller closes the client.
func (rs *Runtime) Start(ctx context.Context) error {
	routeRedisLogs(rs.logger)
	if err := rs.check(ctx); err != nil {
		close(rs.done)
		return err
	}
	for _, sig := range rs.cfg.Signals {
		for i := 0; i < rs.cfg.Shards; i++ {
			s := NewStream(rs.rdb, ShardKeys(rs.cfg.KeyPrefix, sig, i), rs.bounds(), rs.consumer)
			s.RequireReplicas(rs.cfg.MinReplicas, rs.cfg.ReplicaTimeout)
			rs.adders[sig] = append(rs.adders[sig], s)
			rs.recent[s.Name()] = &recentAdds{}
		}
	}
	// Shards a larger redis::shards used before are drained too; when Redis
	// is not reachable yet, the maintenance loop registers them later.
	ever := rs.cfg.Shards
	rctx, cancel := context.WithTimeout(ctx, startAttempt)
	if n, err := RegisterShards(rctx, rs.rdb, rs.cfg.KeyPrefix, rs.cfg.Shards); err == nil {
		ever = n
	}
	cancel()
	bg, stop := context.WithCancel(context.Background())
	rs.cancel = stop
	rs.coverShards(bg, ever)
	rs.wg.Add(1)
	go rs.maintain(bg)
	go func() {
		rs.wg.Wait()
		close(rs.done)
	}()
	rs.logger.Info("coordinating through Redis", zap.String("redis", rs.addr),
		zap.String("key_prefix", rs.cfg.KeyPrefix), zap.String("consumer", rs.consumer), zap.Int("workers_per_signal", rs.cfg.Workers),
		zap.Int("shards", rs.cfg.Shards), zap.Int("shards_drained", ever-rs.cfg.Shards))
	return nil
}

// Stop cancels the flush workers' loops and the maintenance loop; Done is
// closed once they returned.
func (rs *Runtime) Stop() {
	if rs.cancel != nil {
		rs.cancel()
	}
}

// Done is closed once every goroutine of the runtime returned: after Stop,
// or at once when Start failed. Before Start it stays open.
func (rs *Runtime) Done() <-chan struct{} { return rs.done }

// Close closes the Redis client.
func (rs *Runtime) Close() error {
	return rs.cl.Close()
}

// bounds are one shard's: redis::max_pending_* are per signal, split over
// its shards.
func (rs *Runtime) bounds() Bounds {
	n := int64(rs.cfg.Shards)
	return Bounds{MaxBytes: ceilDiv(rs.cfg.MaxPendingBytes, n), MaxEntries: ceilDiv(rs.cfg.MaxPendingEntries, n)}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// coverShards starts flush workers on every shard below n not yet covered:
// redis::workers on each shard Enqueue adds to, one on each shard only
// drained (a larger redis::shards used it before). Called at start and from
// the maintenance loop only.
func (rs *Runtime) coverShards(bg context.Context, n int) {
	for _, sig := range rs.cfg.Signals {
		for i := len(rs.shards[sig]); i < n; i++ {
			keys := ShardKeys(rs.cfg.KeyPrefix, sig, i)
			rs.shards[sig] = append(rs.shards[sig], NewStream(rs.rdb, keys, rs.bounds(), rs.consumer))
			workers := rs.cfg.Workers
			if i >= rs.cfg.Shards {
				workers = 1
			}
			for w := 0; w < workers; w++ {
				name := fmt.Sprintf("%s-%s-%d", rs.consumer, sig, w)
				if i > 0 {
					name = fmt.Sprintf("%s-%s-%d-%d", rs.consumer, sig, i, w)
				}
				run := rs.newWorker(sig, i, w, &WorkerStream{Stream: NewStream(rs.rdb, keys, rs.bounds(), name), rs: rs})
				rs.wg.Add(1)
				go func() {
					defer rs.wg.Done()
					run(bg)
				}()
			}
		}
	}
}

// WorkerStream is a flush worker's stream: Ensure records the first epoch
// seen, which the maintenance loop compares with the epoch it reads.
type WorkerStream struct {
	*Stream
	rs *Runtime
}

// Ensure creates the stream and group when missing.
func (s *WorkerStream) Ensure(ctx context.Context) error {
	return s.rs.ensure(ctx, s.Stream)
}

// shardStats is one shard's backlog as last read.
type shardStats struct {
	sig string
	Stats
	// at is when the read began: an entry added before it is counted.
	at time.Time
}

// Observe yields each signal's backlog, summed over its shards, for the
// gauges.
func (rs *Runtime) Observe(yield func(signal string, entries, pending, bytes int64)) {
	rs.mu.Lock()
	sums := map[string]Stats{}
	for _, st := range rs.stats {
		sum := sums[st.sig]
		sum.Entries += st.Entries
		sum.Pending += st.Pending
		sum.Bytes += st.Bytes
		sums[st.sig] = sum
	}
	rs.mu.Unlock()
	for sig, st := range sums {
		yield(sig, st.Entries, st.Pending, st.Bytes)
	}
}

// ensure creates a signal's stream and group when missing, and records the
// first epoch seen. A changed epoch is left to the maintenance loop, the one
// place that reports losses: it knows the entry count too.
func (rs *Runtime) ensure(ctx context.Context, s *Stream) error {
	epoch, err := s.Ensure(ctx)
	if err != nil {
		return err
	}
	stream := s.Keys().Stream
	rs.mu.Lock()
	if rs.epochs[stream] == "" {
		rs.epochs[stream] = epoch
	}
	rs.mu.Unlock()
	return nil
}

// lost records that the epoch known, read before st, is gone, and reports
// the loss unless ch.counted says that the entry count reported it exactly.
// When every entry the stream held at the last read is known (none, or all
// delivered to workers and added by this collector), what was lost is
// exactly those and the entries this collector added since, less what is
// in PostgreSQL (lostSince); else the backlog last seen is the estimate.
func (rs *Runtime) lost(ctx context.Context, sig string, s *Stream, known string, st Stats, ch *epochChange) {
	stream := s.Name()
	rs.mu.Lock()
	if rs.epochs[stream] != known {
		rs.mu.Unlock()
		return
	}
	rs.epochs[stream] = st.Epoch
	rs.mu.Unlock()
	if ch.counted {
		return
	}
	if ch.last.Held() {
		if lost, ok := rs.lostSince(ctx, s, ch.lastAt, ch.last.PendingIDs); ok {
			rs.reportLostSince(ctx, sig, stream, ch.lastAt, ch.last.Entries, lost)
			return
		}
	}
	rs.reportLoss(ctx, sig, stream, ch.last)
}

// lostSince returns the entries this collector added to s at or after t,
// and those of held (the ids the stream held when read at t), that are
// neither in the stream now (added since it was recreated) nor in the
// ledger: with the stream lost whole and holding only held at t, those are
// exactly what it lost of this collector's. ok is false when the entries
// remembered do not reach back to t or do not include every one of held
// (another collector's, or one added before the window), or the stream or
// the ledger could not be read.
func (rs *Runtime) lostSince(ctx context.Context, s *Stream, t time.Time, held []string) ([]addedEntry, bool) {
	if t.IsZero() {
		return nil, false
	}
	added, whole := rs.recent[s.Name()].since(t)
	if !whole {
		return nil, false
	}
	if len(held) > 0 {
		before, all := rs.recent[s.Name()].byID(held)
		if !all {
			return nil, false
		}
		added = mergeEntries(before, added)
	}
	return rs.missing(ctx, s, added)
}

// reportVanished says loudly that n entries left a stream without being
// written: the stream's entry count (kept with every add and ack) is above
// what the stream holds. Exact, whatever removed them.
func (rs *Runtime) reportVanished(ctx context.Context, sig, stream string, n int64) {
	rs.rec.Lost(ctx, sig, n)
	rs.logger.Error("Redis lost entries of a stream before they were written to PostgreSQL: the stream holds fewer entries than were added "+
		"and not acknowledged (the stream deleted or evicted, entries trimmed or deleted by hand); the requests were acknowledged to clients and are lost. "+
		"Use maxmemory-policy noeviction, and let nothing but the exporter delete its keys",
		zap.String("redis", rs.addr), zap.String("signal", sig), zap.String("stream", stream), zap.Int64("lost_entries", n))
}

// reportLoss says loudly that Redis lost a stream. What was lost is not
// known: the backlog last seen (up to StatsEvery before) is the estimate.
func (rs *Runtime) reportLoss(ctx context.Context, sig, stream string, last Stats) {
	rs.rec.Lost(ctx, sig, last.Entries)
	rs.logger.Error("Redis lost the stream and its consumer group (a restart without persistence, a failover to an empty replica, or deleted keys): "+
		"requests acknowledged to clients and not yet written to PostgreSQL are lost, up to the backlog last seen; "+
		"the stream and group are recreated and new requests are written. Turn on Redis persistence (appendonly yes) to keep them",
		zap.String("redis", rs.addr), zap.String("signal", sig), zap.String("stream", stream),
		zap.Int64("last_seen_entries", last.Entries), zap.Int64("last_seen_bytes", last.Bytes))
}

// reportLostSince reports a stream lost whole that, when last read at t,
// held only held entries this collector had added (none: it was empty):
// lost are those and the entries it added since, not written. None lost is
// said once, as a warning, and counts no loss.
func (rs *Runtime) reportLostSince(ctx context.Context, sig, stream string, t time.Time, held int64, lost []addedEntry) {
	fields := []zap.Field{zap.String("redis", rs.addr), zap.String("signal", sig), zap.String("stream", stream),
		zap.Time("last_read_at", t), zap.Int64("held_when_last_read", held)}
	if len(lost) == 0 {
		rs.logger.Warn("Redis lost the stream and its consumer group (a restart without persistence, a failover to an empty replica, or deleted keys); "+
			"when last read it held only entries this collector had added (or none), and every one of them and of those it added since is in PostgreSQL: "+
			"nothing acknowledged was lost. The stream and group are recreated. Turn on Redis persistence (appendonly yes) to keep a backlog through a restart",
			fields...)
		return
	}
	rs.rec.Lost(ctx, sig, int64(len(lost)))
	rs.logger.Error("Redis lost the stream and its consumer group (a restart without persistence, a failover to an empty replica, or deleted keys): "+
		"when last read it held only entries this collector had added (or none), and of those and of the entries it added since, "+
		"these are neither in it nor in PostgreSQL; the requests were acknowledged to clients and are lost. "+
		"The stream and group are recreated and new requests are written. Turn on Redis persistence (appendonly yes) to keep them",
		append(fields, lostFields(lost)...)...)
}

// maintain refreshes the backlog, notices when Redis lost a stream, and
// forgets dead consumers.
func (rs *Runtime) maintain(ctx context.Context) {
	defer rs.wg.Done()
	tick := time.NewTicker(rs.cfg.StatsEvery)
	defer tick.Stop()
	var lastConsumers time.Time
	// problem is the last failure said, so that a lasting one is said once.
	problem := ""
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// A shard registered by another replica (a larger redis::shards)
		// gets workers here too.
		if n, err := RegisterShards(ctx, rs.rdb, rs.cfg.KeyPrefix, rs.cfg.Shards); err == nil && n > len(rs.shards[rs.cfg.Signals[0]]) {
			rs.logger.Info("Redis names more shards than this replica covers (another replica uses a larger redis::shards, or did); draining them too",
				zap.Int("shards", n))
			rs.coverShards(ctx, n)
		}
		rs.readSentinels(ctx)
		var failed error
		for _, sig := range rs.cfg.Signals {
			for _, s := range rs.shards[sig] {
				if err := rs.checkShard(ctx, sig, s); err != nil && failed == nil {
					failed = err
				}
			}
		}
		switch {
		case ctx.Err() != nil:
			return
		case failed != nil:
			if msg := rs.cl.redact(rs.cl.explain(failed)).Error(); msg != problem {
				problem = msg
				rs.logger.Warn("cannot read the Redis streams; retrying", zap.String("redis", rs.addr), zap.String("error", msg))
			}
		case problem != "":
			problem = ""
			rs.logger.Info("Redis streams readable again", zap.String("redis", rs.addr))
		}
		rs.rereadDurability(ctx)
		rs.rereadEviction(ctx)
		if time.Since(lastConsumers) >= consumerPruneEvery {
			lastConsumers = time.Now()
			for _, s := range rs.allShards() {
				if _, err := s.PruneConsumers(ctx, consumerIdleLimit); err != nil && ctx.Err() == nil {
					rs.logger.Debug("consumer prune failed", zap.Error(err))
				}
			}
		}
	}
}

// allShards are the streams of every signal's shards.
func (rs *Runtime) allShards() []*Stream {
	var all []*Stream
	for _, sig := range rs.cfg.Signals {
		all = append(all, rs.shards[sig]...)
	}
	return all
}

// checkShard refreshes a shard's backlog and notices when Redis lost it;
// it returns why the backlog could not be read.
func (rs *Runtime) checkShard(ctx context.Context, sig string, s *Stream) error {
	stream := s.Keys().Stream
	rs.mu.Lock()
	known := rs.epochs[stream]
	rs.mu.Unlock()
	// In Sentinel mode nothing is read, counted or decided while the
	// server reached is not the primary the sentinels name: what it holds
	// says nothing about what was lost. The audit then looks up the adds
	// remembered, whichever server it settles on.
	var node string
	if len(rs.sentinels) > 0 {
		var err error
		if node, err = s.Node(ctx); err != nil {
			return err
		}
		if !rs.reachesNamedPrimary(stream, node) {
			rs.markAway(stream, node)
			return nil
		}
	}
	// The count first: entries that vanished since the last audit, exactly
	// (-1: no count, it starts now).
	at := rs.now()
	var vanished int64
	var st Stats
	var err error
	if node != "" {
		// Read on one connection with the run id of the server that
		// answered: another connection of the pool may reach another server.
		var answered string
		if answered, vanished, st, err = s.AuditStats(ctx); err != nil {
			return err
		}
		if answered != node {
			rs.logger.Debug("a check's reads were answered by another server than the primary the sentinels name; ignored",
				zap.String("stream", stream), zap.String("named_run_id", node), zap.String("answered_run_id", answered))
			rs.markAway(stream, answered)
			return nil
		}
	} else {
		if vanished, err = s.Audit(ctx); err != nil {
			return err
		}
		if st, err = s.Stats(ctx); err != nil {
			return err
		}
	}
	if vanished > 0 {
		rs.reportVanished(ctx, sig, stream, vanished)
	}
	// A changed or vanished epoch is decided only once it lasted
	// (settleEpoch); meanwhile the failover audit waits, its adds and
	// suspects kept.
	switch rs.settleEpoch(ctx, sig, s, node, known, st, vanished > 0) {
	case epochLost:
		rs.auditFailover(ctx, sig, s, node, true)
	case epochSteady:
		rs.auditFailover(ctx, sig, s, node, vanished > 0)
	}
	rs.mu.Lock()
	rs.stats[stream] = shardStats{sig: sig, Stats: st, at: at}
	rs.mu.Unlock()
	if known != "" && (st.GroupMissing || st.Epoch == "") {
		// Recreate it now rather than wait for a worker's NOGROUP.
		if err := rs.ensure(ctx, s); err != nil && ctx.Err() == nil {
			rs.logger.Debug("recreating the consumer group failed", zap.String("stream", stream), zap.Error(err))
		}
	}
	return nil
}

// markAway notes that node, a server other than the one last seen holding
// stream, answered: what the client acknowledged meanwhile is looked up once
// the check settles on a server again.
func (rs *Runtime) markAway(stream, node string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if seen := rs.nodes[stream]; seen.runID != "" && seen.runID != node {
		rs.away[stream] = true
	}
}

// shardOf picks the shard of a request from its key: random keys spread
// evenly, and a retry of the request goes to the same shard.
func shardOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// Enqueue hands one request to its signal's stream. It succeeds only once
// Redis holds the entry; a full stream is ErrBackpressure, returned as it
// is, for the caller to throttle. key is the request's identity, the flush
// workers' ledger key: the same for every entry of one request (a resent
// XADD).
func (rs *Runtime) Enqueue(ctx context.Context, signal, key, format string, payload []byte, items int) error {
	shards := rs.adders[signal]
	s := shards[shardOf(key, len(shards))]
	if err := rs.refusal(); err != nil {
		return err
	}
	id, err := s.AddEntry(ctx, key, format, payload, items)
	if errors.Is(err, ErrBackpressure) {
		return err
	}
	if errors.Is(err, ErrTooFewReplicas) {
		return fmt.Errorf("%s: not acknowledged, redis::min_replicas is %d: %w; start the replicas or lower redis::min_replicas",
			rs.addr, rs.cfg.MinReplicas, err)
	}
	if err != nil {
		var mem Memory
		if Classify(err) == KindOOM {
			// Read only when refused: what the operator must change.
			mem, _ = s.Memory(ctx)
		}
		return fmt.Errorf("%s: %w", rs.addr, rs.cl.redact(rs.cl.explain(err, mem)))
	}
	rs.recent[s.Name()].add(addedEntry{id: id, key: key, items: items, at: rs.now()})
	return nil
}
