package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

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
	rc       *RedisConfig
	rdb      *redis.Client
	addr     string
	consumer string
	adders   map[string]*coord.Stream
	reg      metric.Registration

	mu    sync.Mutex
	stats map[string]coord.Stats // last read, by signal
	// epochs holds each signal's epoch marker as last seen: one that
	// vanishes or changes means Redis lost the stream.
	epochs map[string]string
	// durability as last read; durabilityRead once it was.
	durability     coord.Durability
	durabilityRead bool
	durReg         metric.Registration
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

// startRedis creates the Redis client and starts the flush workers. Redis
// being down is not an error here: the workers wait for it and say so.
func (c *client) startRedis(ctx, bg context.Context) error {
	rc := c.cfg.Redis.Get()
	opt, err := rc.options()
	if err != nil {
		return err
	}
	if rc.TLS.HasValue() {
		tlsCfg, err := rc.TLS.Get().LoadTLSConfig(ctx)
		if err != nil {
			return fmt.Errorf(`"redis::tls": %w`, err)
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
	opt.PoolSize = max(opt.PoolSize, 3*rc.Workers+4)
	routeRedisLogs(c.logger)
	rs := &redisSide{
		rc:       rc,
		rdb:      redis.NewClient(opt),
		addr:     opt.Addr,
		consumer: rc.Consumer,
		adders:   map[string]*coord.Stream{},
		stats:    map[string]coord.Stats{},
		epochs:   map[string]string{},
	}
	if rs.consumer == "" {
		rs.consumer = defaultConsumerName()
	}
	if err := c.checkRedis(ctx, rs, opt); err != nil {
		_ = rs.rdb.Close()
		return err
	}
	reg, err := c.tel.RegisterStreamGauges(rs.observe)
	if err != nil {
		_ = rs.rdb.Close()
		return err
	}
	rs.reg = reg
	if rs.durReg, err = c.tel.RegisterDurabilityGauge(rs.observeDurability); err != nil {
		_ = rs.reg.Unregister()
		_ = rs.rdb.Close()
		return err
	}
	c.redis = rs
	bounds := coord.Bounds{MaxBytes: rc.MaxPendingBytes, MaxEntries: rc.MaxPendingEntries}
	fc := flush.Config{
		MaxRows: rc.MaxRows, MaxBytes: rc.MaxBytes, MaxWait: rc.MaxWait, ClaimAfter: rc.ClaimAfter,
		Timeout: c.cfg.TimeoutConfig.Timeout, Quarantine: c.cfg.Schema + "." + pgwrite.QuarantineTable,
		NewBatch: c.cfg.newBatch,
	}
	for _, sig := range signalNames {
		keys := coord.KeysFor(rc.KeyPrefix, sig)
		rs.adders[sig] = coord.NewStream(rs.rdb, keys, bounds, rs.consumer)
		rs.adders[sig].RequireReplicas(rc.MinReplicas, rc.ReplicaTimeout)
		tel := flush.Telemetry{
			Claimed: c.tel.PostgrescopyClaimedEntries, LedgerHits: c.tel.PostgrescopyLedgerHits,
			Undecodable: c.tel.PostgrescopyUndecodableEntries, BatchRows: c.tel.PostgrescopyBatchRows,
			Attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig))),
		}
		for w := 0; w < rc.Workers; w++ {
			s := &workerStream{Stream: coord.NewStream(rs.rdb, keys, bounds, fmt.Sprintf("%s-%s-%d", rs.consumer, sig, w)), c: c, sig: sig}
			f := flush.New(fc, s, flushWriter{c}, tel, c.logger.With(zap.String("signal", sig), zap.Int("worker", w)), c.writes)
			c.wg.Add(1)
			go func() {
				defer c.wg.Done()
				f.Run(bg)
			}()
		}
	}
	c.wg.Add(1)
	go c.maintainRedis(bg)
	c.logger.Info("coordinating through Redis", zap.String("redis", rs.addr),
		zap.String("key_prefix", rc.KeyPrefix), zap.String("consumer", rs.consumer), zap.Int("workers_per_signal", rc.Workers))
	return nil
}

// signalNames are the signals with a stream each.
var signalNames = []string{"traces", "metrics", "logs"}

// workerStream is a flush worker's stream: Ensure checks the epoch it returns
// against the one last seen, to report a Redis that lost the stream.
type workerStream struct {
	*coord.Stream
	c   *client
	sig string
}

func (s *workerStream) Ensure(ctx context.Context) error {
	return s.c.redis.ensure(ctx, s.c, s.sig, s.Stream)
}

func (rs *redisSide) observe(yield func(signal string, entries, pending, bytes int64)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for sig, st := range rs.stats {
		yield(sig, st.Entries, st.Pending, st.Bytes)
	}
}

// ensure creates a signal's stream and group when missing and checks the
// epoch it returns against the one last seen.
func (rs *redisSide) ensure(ctx context.Context, c *client, sig string, s *coord.Stream) error {
	epoch, err := s.Ensure(ctx)
	if err != nil {
		return err
	}
	rs.mu.Lock()
	known := rs.epochs[sig]
	rs.epochs[sig] = epoch
	last := rs.stats[sig]
	rs.mu.Unlock()
	if known != "" && known != epoch {
		c.reportLoss(ctx, sig, s.Keys().Stream, last)
	}
	return nil
}

// lost records that the epoch known, read before st, is gone; it reports
// the loss unless another caller (a flush worker recreating the group) did.
func (rs *redisSide) lost(ctx context.Context, c *client, sig, stream, known string, st coord.Stats) {
	rs.mu.Lock()
	if rs.epochs[sig] != known {
		rs.mu.Unlock()
		return
	}
	rs.epochs[sig] = st.Epoch
	last := rs.stats[sig]
	rs.mu.Unlock()
	c.reportLoss(ctx, sig, stream, last)
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
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for sig, s := range rs.adders {
			rs.mu.Lock()
			known := rs.epochs[sig]
			rs.mu.Unlock()
			st, err := s.Stats(ctx)
			if err != nil {
				continue
			}
			// Before the first group creation (Redis unreachable at start)
			// there is nothing to compare with: the workers create it.
			if known != "" && st.Epoch != known {
				rs.lost(ctx, c, sig, s.Keys().Stream, known, st)
			}
			rs.mu.Lock()
			rs.stats[sig] = st
			rs.mu.Unlock()
			if known != "" && (st.GroupMissing || st.Epoch == "") {
				// Recreate it now rather than wait for a worker's NOGROUP.
				if err := rs.ensure(ctx, c, sig, s); err != nil && ctx.Err() == nil {
					c.logger.Debug("recreating the consumer group failed", zap.String("stream", s.Keys().Stream), zap.Error(err))
				}
			}
		}
		c.rereadDurability(ctx, rs)
		if time.Since(lastConsumers) >= consumerPruneEvery {
			lastConsumers = time.Now()
			for _, s := range rs.adders {
				if _, err := s.PruneConsumers(ctx, consumerIdleLimit); err != nil && ctx.Err() == nil {
					c.logger.Debug("consumer prune failed", zap.Error(err))
				}
			}
		}
	}
}

// enqueue hands one request to its signal's stream. It succeeds only once
// Redis holds the entry; a full stream is a throttled, retryable error.
// key is the request's identity (newKey), the flush workers' ledger
// key: the same for every entry of one request (a resent XADD).
func (c *client) enqueue(ctx context.Context, signal, key string, payload []byte, items int) error {
	rs := c.redis
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", signal)))
	_, err := rs.adders[signal].AddEntry(ctx, key, entry.Format, payload, items)
	if errors.Is(err, coord.ErrBackpressure) {
		c.tel.PostgrescopyBackpressure.Add(ctx, 1, attrs)
		return exporterhelper.NewThrottleRetry(err, backpressureDelay)
	}
	if errors.Is(err, coord.ErrTooFewReplicas) {
		return fmt.Errorf("redis %s: not acknowledged, redis::min_replicas is %d: %w; start the replicas or lower redis::min_replicas",
			rs.addr, rs.rc.MinReplicas, err)
	}
	if err != nil {
		return fmt.Errorf("redis %s: %w", rs.addr, err)
	}
	c.tel.PostgrescopyEntriesAdded.Add(ctx, 1, attrs)
	return nil
}

func (c *client) stopRedis() {
	if c.redis == nil {
		return
	}
	if c.redis.reg != nil {
		_ = c.redis.reg.Unregister()
	}
	if c.redis.durReg != nil {
		_ = c.redis.durReg.Unregister()
	}
	_ = c.redis.rdb.Close()
}
