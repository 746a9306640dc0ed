package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/flush"
	"github.com/postgrescopy/postgrescopy/internal/pgsink"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
)

// statsEvery is how often the backlog gauges are refreshed and the epoch
// markers checked; a variable so that tests can shorten it.
var statsEvery = 5 * time.Second

// backpressureDelay is how long the exporterhelper waits before retrying a
// request refused by a full stream.
const backpressureDelay = time.Second

// admissionBound is how far one signal's backlog may run ahead of another's
// before its writes wait: above the age a batch reaches without a backlog
// (max_wait, and a write's duration), so that only a backlog is ordered.
const admissionBound = 2 * time.Second

// admissionStale is how long a write in flight holds younger batches back:
// well above a write's duration, so that only a write held up (a lock, a
// dead server) stops counting.
const admissionStale = 5 * time.Second

// The sink is what the flush workers write to and the ledger the failover
// audit reads.
var (
	_ flush.Writer = (*pgsink.Sink)(nil)
	_ coord.Ledger = (*pgsink.Sink)(nil)
)

// signalNames are the signals with a stream each.
var signalNames = []string{"traces", "metrics", "logs"}

// redisSide wires the Redis runtime (internal/coord) to the flush workers
// and the telemetry: the runtime runs the workers the component makes, and
// reports losses through the recorder.
type redisSide struct {
	rt *coord.Runtime
	// admission orders the writes of every signal's workers, oldest data
	// first, so that the signals fall behind together.
	admission *flush.Admission
	regs      []metric.Registration
}

// registerGauges registers the Redis side's gauges, all or none: the
// backlog, the durability and the write admission's waiting batches.
func (rs *redisSide) registerGauges(tb *metadata.TelemetryBuilder) error {
	for _, register := range []func() (metric.Registration, error){
		func() (metric.Registration, error) { return tb.RegisterStreamGauges(rs.rt.Observe) },
		func() (metric.Registration, error) { return tb.RegisterDurabilityGauge(rs.rt.ObserveDurability) },
		func() (metric.Registration, error) {
			// Waiting holds the admission's lock only to count: the
			// callback does not block.
			return tb.RegisterAdmissionGauge(func() int64 { return int64(rs.admission.Waiting()) })
		},
	} {
		reg, err := register()
		if err != nil {
			rs.unregisterGauges()
			return err
		}
		rs.regs = append(rs.regs, reg)
	}
	return nil
}

// unregisterGauges undoes registerGauges, at shutdown or when it failed.
func (rs *redisSide) unregisterGauges() {
	for _, reg := range rs.regs {
		_ = reg.Unregister()
	}
	rs.regs = nil
}

// lossRecorder counts the losses the Redis runtime reports.
type lossRecorder struct{ tel *metadata.TelemetryBuilder }

func (r lossRecorder) Lost(ctx context.Context, sig string, entries int64) {
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig)))
	r.tel.PostgrescopyRedisDataLoss.Add(ctx, 1, attrs)
	r.tel.PostgrescopyRedisLostEntries.Add(ctx, entries, attrs)
}

// startRedis creates the Redis client and starts the runtime and its flush
// workers. Redis being down is not an error here: the workers wait for it
// and say so.
func (c *client) startRedis(ctx context.Context) error {
	rc := c.cfg.Redis.Get()
	opts, err := rc.clientOptions(ctx)
	if err != nil {
		return err
	}
	// Each flush worker may hold a connection in a blocked read; shards the
	// registry still names beyond redis::shards get a worker each.
	cl, err := coord.NewClient(opts, 3*rc.Workers*rc.Shards+16)
	if err != nil {
		return err
	}
	rs := &redisSide{admission: flush.NewAdmission(admissionBound, admissionStale)}
	rs.rt = coord.NewRuntime(cl, coord.Config{
		KeyPrefix: rc.KeyPrefix, Consumer: rc.Consumer, Signals: signalNames,
		Shards: rc.Shards, Workers: rc.Workers, MinReplicas: rc.MinReplicas, ReplicaTimeout: rc.ReplicaTimeout,
		MaxPendingBytes: rc.MaxPendingBytes, MaxPendingEntries: rc.MaxPendingEntries,
		RequireDurability: requireDurabilityLevels[rc.RequireDurability], RequireDurabilityName: rc.RequireDurability,
		StatsEvery: statsEvery,
	}, c.logger, lossRecorder{c.tel}, c.sink, c.newWorker(rs))
	if err := rs.registerGauges(c.tel); err != nil {
		_ = cl.Close()
		return err
	}
	if err := rs.rt.Start(ctx); err != nil {
		rs.unregisterGauges()
		_ = cl.Close()
		return err
	}
	c.redis = rs
	return nil
}

// newWorker makes the flush workers the Redis runtime runs: each reads its
// stream and writes through the PostgreSQL sink.
func (c *client) newWorker(rs *redisSide) coord.NewWorker {
	rc := c.cfg.Redis.Get()
	fc := flush.Config{
		MaxRows: rc.MaxRows, MaxBytes: rc.MaxBytes, MaxWait: rc.MaxWait, ClaimAfter: rc.ClaimAfter,
		Timeout: c.cfg.TimeoutConfig.Timeout, Quarantine: c.cfg.Schema + "." + pgwrite.QuarantineTable,
		NewBatch: c.cfg.newBatch, Admission: rs.admission,
	}
	return func(sig string, shard, worker int, s *coord.WorkerStream) func(context.Context) {
		tel := flush.Telemetry{
			Claimed: c.tel.PostgrescopyClaimedEntries, LedgerHits: c.tel.PostgrescopyLedgerHits,
			Undecodable: c.tel.PostgrescopyUndecodableEntries, BatchRows: c.tel.PostgrescopyBatchRows,
			Attrs: metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", sig))),
		}
		log := c.logger.With(zap.String("signal", sig), zap.Int("worker", worker))
		if rc.Shards > 1 || shard > 0 {
			log = log.With(zap.Int("shard", shard))
		}
		run := flush.New(fc, s, c.sink, tel, log, c.writes).Run
		if c.wrapWorker != nil {
			return c.wrapWorker(run)
		}
		return run
	}
}

// enqueue hands one request to its signal's stream. It succeeds only once
// Redis holds the entry; a full stream is a throttled, retryable error.
// key is the request's identity (request.NewKey), the flush workers' ledger
// key: the same for every entry of one request (a resent XADD).
func (c *client) enqueue(ctx context.Context, signal, key string, payload []byte, items int) error {
	attrs := metric.WithAttributeSet(attribute.NewSet(attribute.String("signal", signal)))
	err := c.redis.rt.Enqueue(ctx, signal, key, entry.Format, payload, items)
	if errors.Is(err, coord.ErrBackpressure) {
		c.tel.PostgrescopyBackpressure.Add(ctx, 1, attrs)
		return exporterhelper.NewThrottleRetry(err, backpressureDelay)
	}
	if err != nil {
		return err
	}
	c.tel.PostgrescopyEntriesAdded.Add(ctx, 1, attrs)
	return nil
}
