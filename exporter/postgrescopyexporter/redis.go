package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/flush"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
)

// statsEvery is how often the backlog gauges are refreshed and the epoch
// markers checked; a variable so that tests can shorten it.
var statsEvery = 5 * time.Second

// Maintenance periods and limits of the Redis side.
const (
	consumerPruneEvery = 10 * time.Minute
	consumerIdleLimit  = time.Hour
	backpressureDelay  = time.Second
	// redisTimeout bounds every socket read and write to Redis (a blocking
	// read gets its block time on top, go-redis adds 10s to it): a half-open
	// connection fails the call instead of stopping a worker.
	redisTimeout = 5 * time.Second
)

// redisSide is the client's Redis coordination: the streams Consume adds to,
// the flush workers, and the loops that keep the backlog gauges and the
// ledger tidy.
type redisSide struct {
	rc  *RedisConfig
	rdb redis.UniversalClient
	cl  *redisClient
	// addr names the Redis in logs and errors (the config key and address).
	addr     string
	consumer string
	// adders are each signal's shards Consume adds to (redis::shards).
	adders map[string][]*coord.Stream
	// shards are each signal's shards the workers cover: the adders' and
	// those the registry names beyond them, being drained. Only start and
	// the maintenance loop touch it.
	shards map[string][]*coord.Stream
	// admission orders the writes of every signal's workers, oldest data
	// first, so that the signals fall behind together.
	admission *flush.Admission
	bg        context.Context
	reg       metric.Registration

	mu    sync.Mutex
	stats map[string]shardStats // last read, by stream
	// epochs holds each stream's epoch marker as last seen: one that
	// vanishes or changes means Redis lost the stream.
	epochs map[string]string
	// recent are the entries added lately, by stream (made at start, then
	// only read); nodes the run id of the server last seen holding each
	// stream (and its epoch then), suspects the entries missing since it
	// changed (redis_failover.go).
	recent   map[string]*recentAdds
	nodes    map[string]nodeSeen
	suspects map[string]*failoverSuspects
	// durability as last read; durabilityRead once it was.
	durability     coord.Durability
	durabilityRead bool
	// memory as last read (maxmemory-policy); memoryRead once it was.
	memory     coord.Memory
	memoryRead bool
	durReg     metric.Registration
	admReg     metric.Registration
}

// registerGauges registers the Redis side's gauges, all or none: the
// backlog, the durability and the write admission's waiting batches.
func (rs *redisSide) registerGauges(tb *metadata.TelemetryBuilder) error {
	var err error
	if rs.reg, err = tb.RegisterStreamGauges(rs.observe); err != nil {
		return err
	}
	if rs.durReg, err = tb.RegisterDurabilityGauge(rs.observeDurability); err != nil {
		rs.unregisterGauges()
		return err
	}
	if rs.admReg, err = tb.RegisterAdmissionGauge(rs.observeAdmission); err != nil {
		rs.unregisterGauges()
		return err
	}
	return nil
}

// unregisterGauges undoes registerGauges, at shutdown or when it failed.
func (rs *redisSide) unregisterGauges() {
	for _, reg := range []metric.Registration{rs.reg, rs.durReg, rs.admReg} {
		if reg != nil {
			_ = reg.Unregister()
		}
	}
}

// observeAdmission returns how many batches wait for the write admission,
// for the gauge; Waiting holds the admission's lock only to count, so the
// callback does not block.
func (rs *redisSide) observeAdmission() int64 {
	return int64(rs.admission.Waiting())
}

// observeDurability returns the durability last read, for the gauge.
func (rs *redisSide) observeDurability() (int64, string) {
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

// redisClient is the client of the configured Redis: a single node, a
// Sentinel-monitored primary or a Redis Cluster; where names it in messages.
type redisClient struct {
	rdb   redis.UniversalClient
	where string
	// user and secrets are the data nodes' user and the passwords that no
	// message may show.
	user    string
	secrets []string
	// masterName is redis::sentinel::master_name, sentinels the sentinels'
	// addresses (Sentinel mode only).
	masterName, sentinels string
}

// explain names a Redis error for what it is and says what fixes it, for
// clients' statuses and the logs; mem, when known, is the memory settings
// of the server that refused (an OOM). The error stays retryable and
// wrapped: Classify still sees it.
func (cl *redisClient) explain(err error, mem ...coord.Memory) error {
	switch coord.Classify(err) {
	case coord.KindUnknownMaster:
		return fmt.Errorf("sentinel does not know master_name %q: check redis::sentinel::master_name against "+
			"their sentinel monitor lines, or let them start monitoring it; retrying: %w", cl.masterName, err)
	case coord.KindNoSentinel:
		return fmt.Errorf("no sentinel of redis::sentinel::endpoints (%s) names a primary for %q; retrying: %w", cl.sentinels, cl.masterName, err)
	case coord.KindClusterDown:
		return fmt.Errorf("the Redis Cluster does not serve the slot (CLUSTERDOWN: a primary down and no replica promoted yet, "+
			"or slots not assigned); retrying: %w", err)
	case coord.KindOOM:
		if len(mem) == 0 || mem[0].Policy == "" {
			return fmt.Errorf("Redis is out of memory (at maxmemory): raise maxmemory or let the flush catch up; retrying: %w", err)
		}
		m := mem[0]
		where := ""
		if m.Addr != "" {
			where = " on " + m.Addr
		}
		return fmt.Errorf("Redis is out of memory%s (maxmemory %d bytes, policy %s): raise maxmemory or let the flush catch up; retrying: %w",
			where, m.MaxBytes, m.Policy, err)
	}
	return err
}

// newRedisClient builds the client. Every mode gets the same deadlines,
// TLS and data-node credentials.
func (rc *RedisConfig) newRedisClient(ctx context.Context) (*redisClient, error) {
	opt := &redis.Options{Username: rc.Username, Password: string(rc.Password), DB: rc.DB}
	if rc.Endpoint != "" {
		var err error
		if opt, err = rc.options(); err != nil {
			return nil, err
		}
	}
	if rc.TLS.HasValue() {
		tlsCfg, err := rc.TLS.Get().LoadTLSConfig(ctx)
		if err != nil {
			return nil, fmt.Errorf(`"redis::tls": %w`, err)
		}
		opt.TLSConfig = tlsCfg
	}
	// Cancelling a context must abort a blocked XREADGROUP at shutdown.
	opt.ContextTimeoutEnabled = true
	// Every call is timed, whatever the URL asked: without a read deadline a
	// half-open connection would hold a flush worker until shutdown.
	if opt.ReadTimeout <= 0 {
		opt.ReadTimeout = redisTimeout
	}
	if opt.WriteTimeout <= 0 {
		opt.WriteTimeout = redisTimeout
	}
	// Each flush worker may hold a connection in a blocked read; shards the
	// registry still names beyond redis::shards get a worker each.
	opt.PoolSize = max(opt.PoolSize, 3*rc.Workers*rc.Shards+16)
	user := opt.Username
	if user == "" {
		user = "default"
	}
	cl := &redisClient{user: user, secrets: []string{opt.Password}}
	switch {
	case rc.Sentinel.HasValue():
		sc := rc.Sentinel.Get()
		cl.secrets = append(cl.secrets, string(sc.Password))
		cl.masterName, cl.sentinels = sc.MasterName, strings.Join(sc.Endpoints, ",")
		cl.where = fmt.Sprintf("redis::sentinel master %q (sentinels %s)", sc.MasterName, strings.Join(sc.Endpoints, ","))
		cl.rdb = redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName: sc.MasterName, SentinelAddrs: sc.Endpoints,
			SentinelUsername: sc.Username, SentinelPassword: string(sc.Password),
			Username: opt.Username, Password: opt.Password, DB: opt.DB, TLSConfig: opt.TLSConfig,
			ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout, ContextTimeoutEnabled: true,
			PoolSize: opt.PoolSize,
		})
	case rc.Cluster.HasValue():
		eps := rc.Cluster.Get().Endpoints
		cl.where = "redis::cluster " + strings.Join(eps, ",")
		cl.rdb = redis.NewClusterClient(&redis.ClusterOptions{
			Addrs: eps, Username: opt.Username, Password: opt.Password, TLSConfig: opt.TLSConfig,
			ReadTimeout: opt.ReadTimeout, WriteTimeout: opt.WriteTimeout, ContextTimeoutEnabled: true,
			PoolSize: opt.PoolSize,
		})
	default:
		cl.where = "redis::endpoint " + opt.Addr
		cl.rdb = redis.NewClient(opt)
	}
	return cl, nil
}

// redact hides the configured passwords in err.
func (cl *redisClient) redact(err error) error {
	for _, s := range cl.secrets {
		err = redactErr(err, s)
	}
	return err
}

// startRedis creates the Redis client and starts the flush workers. Redis
// being down is not an error here: the workers wait for it and say so.
func (c *client) startRedis(ctx, bg context.Context) error {
	rc := c.cfg.Redis.Get()
	cl, err := rc.newRedisClient(ctx)
	if err != nil {
		return err
	}
	routeRedisLogs(c.logger)
	rs := &redisSide{
		rc:       rc,
		rdb:      cl.rdb,
		cl:       cl,
		addr:     cl.where,
		consumer: rc.Consumer,
		adders:   map[string][]*coord.Stream{},
		shards:   map[string][]*coord.Stream{},
		stats:    map[string]shardStats{},
		epochs:   map[string]string{},
		recent:   map[string]*recentAdds{},
		nodes:    map[string]nodeSeen{},
		suspects: map[string]*failoverSuspects{},
	}
	if rs.consumer == "" {
		rs.consumer = defaultConsumerName()
	}
	if err := c.checkRedis(ctx, rs); err != nil {
		_ = rs.rdb.Close()
		return err
	}
	rs.admission = flush.NewAdmission(admissionBound, admissionStale)
	if err := rs.registerGauges(c.tel); err != nil {
		_ = rs.rdb.Close()
		return err
	}
	c.redis = rs
	for _, sig := range signalNames {
		for i := 0; i < rc.Shards; i++ {
			s := coord.NewStream(rs.rdb, coord.ShardKeys(rc.KeyPrefix, sig, i), rs.bounds(), rs.consumer)
			s.RequireReplicas(rc.MinReplicas, rc.ReplicaTimeout)
			rs.adders[sig] = append(rs.adders[sig], s)
			rs.recent[s.Name()] = &recentAdds{}
		}
	}
	rs.bg = bg
	// Shards a larger redis::shards used before are drained too; when Redis
	// is not reachable yet, the maintenance loop registers them later.
	ever := rc.Shards
	rctx, cancel := context.WithTimeout(ctx, startAttempt)
	if n, err := coord.RegisterShards(rctx, rs.rdb, rc.KeyPrefix, rc.Shards); err == nil {
		ever = n
	}
	cancel()
	c.coverShards(ever)
	c.wg.Add(1)
	go c.maintainRedis(bg)
	c.logger.Info("coordinating through Redis", zap.String("redis", rs.addr),
		zap.String("key_prefix", rc.KeyPrefix), zap.String("consumer", rs.consumer), zap.Int("workers_per_signal", rc.Workers),
		zap.Int("shards", rc.Shards), zap.Int("shards_drained", ever-rc.Shards))
	return nil
}

// bounds are one shard's: redis::max_pending_* are per signal, split over
// its shards.
func (rs *redisSide) bounds() coord.Bounds {
	n := int64(rs.rc.Shards)
	return coord.Bounds{MaxBytes: ceilDiv(rs.rc.MaxPendingBytes, n), MaxEntries: ceilDiv(rs.rc.MaxPendingEntries, n)}
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// admissionBound is how far one signal's backlog may run ahead of another's
// before its writes wait: above the age a batch reaches without a backlog
// (max_wait, and a write's duration), so that only a backlog is ordered.
const admissionBound = 2 * time.Second

// admissionStale is how long a write in flight holds younger batches back:
// well above a write's duration, so that only a write held up (a lock, a
// dead server) stops counting.
const admissionStale = 5 * time.Second

// coverShards starts flush workers on every shard below n not yet covered:
// redis::workers on each shard Consume adds to, one on each shard only
// drained (a larger redis::shards used it before). Called at start and from
// the maintenance loop only.
func (c *client) coverShards(n int) {
	rs, rc := c.redis, c.redis.rc
	fc := flush.Config{
		MaxRows: rc.MaxRows, MaxBytes: rc.MaxBytes, MaxWait: rc.MaxWait, ClaimAfter: rc.ClaimAfter,
		Timeout: c.cfg.TimeoutConfig.Timeout, Quarantine: c.cfg.Schema + "." + pgwrite.QuarantineTable,
		NewBatch: c.cfg.newBatch, Admission: rs.admission,
	}
	for _, sig := range signalNames {
		tel := flush.Telemetry{
			Claimed: c.tel.PostgrescopyClaimedEntries, LedgerHits: c.tel.PostgrescopyLedgerHits,
			Undecodable: c.tel.PostgrescopyUndecodableEntries, BatchRows: c.tel.PostgrescopyBatchRows,
			Attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig))),
		}
		for i := len(rs.shards[sig]); i < n; i++ {
			keys := coord.ShardKeys(rc.KeyPrefix, sig, i)
			rs.shards[sig] = append(rs.shards[sig], coord.NewStream(rs.rdb, keys, rs.bounds(), rs.consumer))
			workers := rc.Workers
			if i >= rc.Shards {
				workers = 1
			}
			for w := 0; w < workers; w++ {
				name := fmt.Sprintf("%s-%s-%d", rs.consumer, sig, w)
				if i > 0 {
					name = fmt.Sprintf("%s-%s-%d-%d", rs.consumer, sig, i, w)
				}
				s := &workerStream{Stream: coord.NewStream(rs.rdb, keys, rs.bounds(), name), c: c}
				log := c.logger.With(zap.String("signal", sig), zap.Int("worker", w))
				if rc.Shards > 1 || i > 0 {
					log = log.With(zap.Int("shard", i))
				}
				f := flush.New(fc, s, flushWriter{c}, tel, log, c.writes)
				c.wg.Add(1)
				go func() {
					defer c.wg.Done()
					f.Run(rs.bg)
				}()
			}
		}
	}
}

// signalNames are the signals with a stream each.
var signalNames = []string{"traces", "metrics", "logs"}

// workerStream is a flush worker's stream: Ensure records the first epoch
// seen, which the maintenance loop compares with the epoch it reads.
type workerStream struct {
	*coord.Stream
	c *client
}

func (s *workerStream) Ensure(ctx context.Context) error {
	return s.c.redis.ensure(ctx, s.Stream)
}

// shardStats is one shard's backlog as last read.
type shardStats struct {
	sig string
	coord.Stats
}

// observe yields each signal's backlog, summed over its shards.
func (rs *redisSide) observe(yield func(signal string, entries, pending, bytes int64)) {
	rs.mu.Lock()
	sums := map[string]coord.Stats{}
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
func (rs *redisSide) ensure(ctx context.Context, s *coord.Stream) error {
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
// the loss with the backlog last seen unless counted says that the entry
// count reported it exactly.
func (rs *redisSide) lost(ctx context.Context, c *client, sig, stream, known string, st coord.Stats, counted bool) {
	rs.mu.Lock()
	if rs.epochs[stream] != known {
		rs.mu.Unlock()
		return
	}
	rs.epochs[stream] = st.Epoch
	last := rs.stats[stream].Stats
	rs.mu.Unlock()
	if !counted {
		c.reportLoss(ctx, sig, stream, last)
	}
}

// reportVanished says loudly that n entries left a stream without being
// written: the stream's entry count (kept with every add and ack) is above
// what the stream holds. Exact, whatever removed them.
func (c *client) reportVanished(ctx context.Context, sig, stream string, n int64) {
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig)))
	c.tel.PostgrescopyRedisDataLoss.Add(ctx, 1, attrs)
	c.tel.PostgrescopyRedisLostEntries.Add(ctx, n, attrs)
	c.logger.Error("Redis lost entries of a stream before they were written to PostgreSQL: the stream holds fewer entries than were added "+
		"and not acknowledged (the stream deleted or evicted, entries trimmed or deleted by hand); the requests were acknowledged to clients and are lost. "+
		"Use maxmemory-policy noeviction, and let nothing but the exporter delete its keys",
		zap.String("redis", c.redis.addr), zap.String("signal", sig), zap.String("stream", stream), zap.Int64("lost_entries", n))
}

// reportLoss says loudly that Redis lost a stream. What was lost is not
// known: the backlog last seen (up to statsEvery before) is the estimate.
func (c *client) reportLoss(ctx context.Context, sig, stream string, last coord.Stats) {
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig)))
	c.tel.PostgrescopyRedisDataLoss.Add(ctx, 1, attrs)
	c.tel.PostgrescopyRedisLostEntries.Add(ctx, last.Entries, attrs)
	c.logger.Error("Redis lost the stream and its consumer group (a restart without persistence, a failover to an empty replica, or deleted keys): "+
		"requests acknowledged to clients and not yet written to PostgreSQL are lost, up to the backlog last seen; "+
		"the stream and group are recreated and new requests are written. Turn on Redis persistence (appendonly yes) to keep them",
		zap.String("redis", c.redis.addr), zap.String("signal", sig), zap.String("stream", stream),
		zap.Int64("last_seen_entries", last.Entries), zap.Int64("last_seen_bytes", last.Bytes))
}

// maintainRedis refreshes the backlog gauges, notices when Redis lost a
// stream, and forgets dead consumers.
func (c *client) maintainRedis(ctx context.Context) {
	defer c.wg.Done()
	rs := c.redis
	tick := time.NewTicker(statsEvery)
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
		if n, err := coord.RegisterShards(ctx, rs.rdb, rs.rc.KeyPrefix, rs.rc.Shards); err == nil && n > len(rs.shards[signalNames[0]]) {
			c.logger.Info("Redis names more shards than this replica covers (another replica uses a larger redis::shards, or did); draining them too",
				zap.Int("shards", n))
			c.coverShards(n)
		}
		var failed error
		for _, sig := range signalNames {
			for _, s := range rs.shards[sig] {
				if err := c.checkShard(ctx, sig, s); err != nil && failed == nil {
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
				c.logger.Warn("cannot read the Redis streams; retrying", zap.String("redis", rs.addr), zap.String("error", msg))
			}
		case problem != "":
			problem = ""
			c.logger.Info("Redis streams readable again", zap.String("redis", rs.addr))
		}
		c.rereadDurability(ctx, rs)
		c.rereadEviction(ctx, rs)
		if time.Since(lastConsumers) >= consumerPruneEvery {
			lastConsumers = time.Now()
			for _, s := range rs.allShards() {
				if _, err := s.PruneConsumers(ctx, consumerIdleLimit); err != nil && ctx.Err() == nil {
					c.logger.Debug("consumer prune failed", zap.Error(err))
				}
			}
		}
	}
}

// allShards are the streams of every signal's shards.
func (rs *redisSide) allShards() []*coord.Stream {
	var all []*coord.Stream
	for _, sig := range signalNames {
		all = append(all, rs.shards[sig]...)
	}
	return all
}

// checkShard refreshes a shard's backlog and notices when Redis lost it;
// it returns why the backlog could not be read.
func (c *client) checkShard(ctx context.Context, sig string, s *coord.Stream) error {
	rs := c.redis
	stream := s.Keys().Stream
	rs.mu.Lock()
	known := rs.epochs[stream]
	rs.mu.Unlock()
	// The count first: entries that vanished since the last audit, exactly
	// (-1: no count, it starts now).
	vanished, err := s.Audit(ctx)
	if err != nil {
		return err
	}
	st, err := s.Stats(ctx)
	if err != nil {
		return err
	}
	if vanished > 0 {
		c.reportVanished(ctx, sig, stream, vanished)
	}
	// Before the first group creation (Redis unreachable at start)
	// there is nothing to compare with: the workers create it. A new epoch
	// with the count intact was reported exactly above; without it (Redis
	// lost every key) the backlog last seen is the estimate.
	wholesale := known != "" && st.Epoch != known
	if wholesale {
		rs.lost(ctx, c, sig, stream, known, st, vanished > 0)
	}
	c.auditFailover(ctx, sig, s, wholesale || vanished > 0)
	rs.mu.Lock()
	rs.stats[stream] = shardStats{sig: sig, Stats: st}
	rs.mu.Unlock()
	if known != "" && (st.GroupMissing || st.Epoch == "") {
		// Recreate it now rather than wait for a worker's NOGROUP.
		if err := rs.ensure(ctx, s); err != nil && ctx.Err() == nil {
			c.logger.Debug("recreating the consumer group failed", zap.String("stream", stream), zap.Error(err))
		}
	}
	return nil
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

// enqueue hands one request to its signal's stream. It succeeds only once
// Redis holds the entry; a full stream is a throttled, retryable error.
// key is the request's identity (request.NewKey), the flush workers' ledger
// key: the same for every entry of one request (a resent XADD).
func (c *client) enqueue(ctx context.Context, signal, key string, payload []byte, items int) error {
	rs := c.redis
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", signal)))
	shards := rs.adders[signal]
	s := shards[shardOf(key, len(shards))]
	id, err := s.AddEntry(ctx, key, entry.Format, payload, items)
	if errors.Is(err, coord.ErrBackpressure) {
		c.tel.PostgrescopyBackpressure.Add(ctx, 1, attrs)
		return exporterhelper.NewThrottleRetry(err, backpressureDelay)
	}
	if errors.Is(err, coord.ErrTooFewReplicas) {
		return fmt.Errorf("%s: not acknowledged, redis::min_replicas is %d: %w; start the replicas or lower redis::min_replicas",
			rs.addr, rs.rc.MinReplicas, err)
	}
	if err != nil {
		var mem coord.Memory
		if coord.Classify(err) == coord.KindOOM {
			// Read only when refused: what the operator must change.
			mem, _ = s.Memory(ctx)
		}
		return fmt.Errorf("%s: %w", rs.addr, rs.cl.redact(rs.cl.explain(err, mem)))
	}
	rs.recent[s.Name()].add(addedEntry{id: id, key: key, items: items, at: time.Now()})
	c.tel.PostgrescopyEntriesAdded.Add(ctx, 1, attrs)
	return nil
}

func (c *client) stopRedis() {
	if c.redis == nil {
		return
	}
	c.redis.unregisterGauges()
	_ = c.redis.rdb.Close()
}
