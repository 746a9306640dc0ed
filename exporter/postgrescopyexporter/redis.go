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
	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// Maintenance periods of the Redis side.
const (
	statsEvery         = 5 * time.Second
	consumerPruneEvery = 10 * time.Minute
	consumerIdleLimit  = time.Hour
	backpressureDelay  = time.Second
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
	stats map[string]coord.Stats
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
	opt.PoolSize = max(opt.PoolSize, 3*rc.Workers+4)
	rs := &redisSide{
		rc:       rc,
		rdb:      redis.NewClient(opt),
		addr:     opt.Addr,
		consumer: rc.Consumer,
		adders:   map[string]*coord.Stream{},
		stats:    map[string]coord.Stats{},
	}
	if rs.consumer == "" {
		rs.consumer = defaultConsumerName()
	}
	bounds := coord.Bounds{MaxBytes: rc.MaxPendingBytes, MaxEntries: rc.MaxPendingEntries}
	for _, sig := range signals {
		keys := coord.KeysFor(rc.KeyPrefix, sig.name)
		rs.adders[sig.name] = coord.NewStream(rs.rdb, keys, bounds, rs.consumer)
		for w := 0; w < rc.Workers; w++ {
			f := &flusher{
				c:      c,
				sig:    sig,
				batch:  c.cfg.newBatch(c.layout),
				stream: coord.NewStream(rs.rdb, keys, bounds, fmt.Sprintf("%s-%s-%d", rs.consumer, sig.name, w)),
				rc:     rc,
				logger: c.logger.With(zap.String("signal", sig.name), zap.Int("worker", w)),
				attrs:  metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig.name))),
			}
			c.wg.Add(1)
			go f.run(bg)
		}
	}
	reg, err := c.tel.RegisterStreamGauges(rs.observe)
	if err != nil {
		return err
	}
	rs.reg = reg
	c.redis = rs
	c.wg.Add(1)
	go c.maintainRedis(bg)
	c.logger.Info("coordinating through Redis", zap.String("redis", rs.addr),
		zap.String("key_prefix", rc.KeyPrefix), zap.String("consumer", rs.consumer), zap.Int("workers_per_signal", rc.Workers))
	return nil
}

func (rs *redisSide) observe(yield func(signal string, entries, pending, bytes int64)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for sig, st := range rs.stats {
		yield(sig, st.Entries, st.Pending, st.Bytes)
	}
}

// maintainRedis refreshes the backlog gauges and forgets dead consumers.
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
			if st, err := s.Stats(ctx); err == nil {
				rs.mu.Lock()
				rs.stats[sig] = st
				rs.mu.Unlock()
			}
		}
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
func (c *client) enqueue(ctx context.Context, signal, key string, payload []byte, items int) error {
	_ = key // the entry's ledger key; stored in the entry by the flusher's owner
	rs := c.redis
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", signal)))
	_, err := rs.adders[signal].AddFormat(ctx, rows.EntryFormat, payload, items)
	if errors.Is(err, coord.ErrBackpressure) {
		c.tel.PostgrescopyBackpressure.Add(ctx, 1, attrs)
		return exporterhelper.NewThrottleRetry(err, backpressureDelay)
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
	_ = c.redis.rdb.Close()
}
