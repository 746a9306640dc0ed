package metadata

// The exporter's own metrics, documented in documentation.md, built the way
// mdatagen's telemetry builder builds them.

import (
	"context"
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Meter returns the exporter's meter.
func Meter(settings component.TelemetrySettings) metric.Meter {
	return settings.MeterProvider.Meter(ScopeName)
}

// TelemetryBuilder holds the exporter's own metrics, documented in
// documentation.md.
type TelemetryBuilder struct {
	meter                          metric.Meter
	PostgrescopyRows               metric.Int64Counter
	PostgrescopyBytes              metric.Int64Counter
	PostgrescopyCopyDuration       metric.Float64Histogram
	PostgrescopyBatches            metric.Int64Counter
	PostgrescopyBatchRows          metric.Int64Histogram
	PostgrescopyEntriesAdded       metric.Int64Counter
	PostgrescopyBackpressure       metric.Int64Counter
	PostgrescopyClaimedEntries     metric.Int64Counter
	PostgrescopyLedgerHits         metric.Int64Counter
	PostgrescopyUndecodableEntries metric.Int64Counter
	PostgrescopyRejectedRows       metric.Int64Counter
	PostgrescopyFailoverLostRows   metric.Int64Counter
	PostgrescopyRedisDataLoss      metric.Int64Counter
	PostgrescopyRedisLostEntries   metric.Int64Counter
}

// NewTelemetryBuilder creates every instrument.
func NewTelemetryBuilder(settings component.TelemetrySettings) (*TelemetryBuilder, error) {
	m := Meter(settings)
	tb := TelemetryBuilder{meter: m}
	var err, errs error
	counter := func(name, desc, unit string) metric.Int64Counter {
		c, e := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = errors.Join(errs, e)
		return c
	}
	tb.PostgrescopyRows = counter("otelcol_postgrescopy_rows",
		"Rows handled, by table and outcome (written, failed).", "{row}")
	tb.PostgrescopyBytes = counter("otelcol_postgrescopy_copy_bytes",
		"Bytes of binary COPY data written, by table.", "By")
	tb.PostgrescopyBatches = counter("otelcol_postgrescopy_batches",
		"Batches (transactions) attempted, by outcome (written, retryable, data, config, duplicate, damaged).", "{batch}")
	tb.PostgrescopyEntriesAdded = counter("otelcol_postgrescopy_redis_entries_added",
		"Requests added to a Redis stream, by signal.", "{entry}")
	tb.PostgrescopyBackpressure = counter("otelcol_postgrescopy_redis_backpressure",
		"Requests refused because the signal's stream was at max_pending_bytes or max_pending_entries, by signal.", "{request}")
	tb.PostgrescopyClaimedEntries = counter("otelcol_postgrescopy_redis_claimed_entries",
		"Entries claimed from consumers idle longer than claim_after, by signal.", "{entry}")
	tb.PostgrescopyLedgerHits = counter("otelcol_postgrescopy_ledger_hits",
		"Redelivered entries found already committed in the ledger (acknowledged, not rewritten), by signal.", "{entry}")
	tb.PostgrescopyUndecodableEntries = counter("otelcol_postgrescopy_redis_undecodable_entries",
		"Stream entries that could not be read (malformed rows, a failed checksum, invalid OTLP), stored in the quarantine table and acknowledged, by signal.", "{entry}")
	tb.PostgrescopyRejectedRows = counter("otelcol_postgrescopy_rejected_rows",
		"Rows PostgreSQL refused, stored in the rejects table instead of their own, by table.", "{row}")
	tb.PostgrescopyFailoverLostRows = counter("otelcol_postgrescopy_failover_lost_rows",
		"Rows committed and acknowledged that PostgreSQL lacks after a failover: the server reached with another system identifier, timeline or start has no ledger row of their commit (a standby promoted before it received them), by table.", "{row}")
	tb.PostgrescopyRedisDataLoss = counter("otelcol_postgrescopy_redis_data_loss",
		"Times Redis was found to have lost a signal's stream (its epoch marker vanished or changed, a restart without persistence, deleted keys), entries that left a stream unwritten (its entry count above its length, as when the stream is deleted or evicted or entries are trimmed) or, after a failover, entries this collector had added and not yet written, by signal.", "{event}")
	tb.PostgrescopyRedisLostEntries = counter("otelcol_postgrescopy_redis_lost_entries",
		"Requests lost in Redis, by signal; for a stream lost with its entry count (every key gone), exact when it was empty or held only entries this collector added and its workers had read when last seen (those and the entries added since that PostgreSQL does not hold), else the entries it held when last seen (an estimate); for entries that left a stream unwritten, the entry count above the stream's length (exact); for a failover, the entries this collector had added that the new primary lacks and PostgreSQL does not hold (exact).", "{entry}")
	tb.PostgrescopyCopyDuration, err = m.Float64Histogram("otelcol_postgrescopy_write_duration",
		metric.WithDescription("Duration of one batch's transaction (every COPY and the commit), by outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	errs = errors.Join(errs, err)
	tb.PostgrescopyBatchRows, err = m.Int64Histogram("otelcol_postgrescopy_redis_batch_rows",
		metric.WithDescription("Rows per batch flushed from a Redis stream, by signal."),
		metric.WithUnit("{row}"),
		metric.WithExplicitBucketBoundaries(10, 100, 500, 1000, 2500, 5000, 10000, 20000, 50000))
	errs = errors.Join(errs, err)
	return &tb, errs
}

// RegisterStreamGauges reports the Redis backlog per signal from observe,
// which must not block: it returns the last values a background loop read.
func (tb *TelemetryBuilder) RegisterStreamGauges(observe func(yield func(signal string, entries, pending, bytes int64))) (metric.Registration, error) {
	entries, err1 := tb.meter.Int64ObservableGauge("otelcol_postgrescopy_redis_stream_entries",
		metric.WithDescription("Entries in the signal's Redis stream (not yet flushed)."), metric.WithUnit("{entry}"))
	pending, err2 := tb.meter.Int64ObservableGauge("otelcol_postgrescopy_redis_pending_entries",
		metric.WithDescription("Entries delivered to a flush worker and not yet acknowledged."), metric.WithUnit("{entry}"))
	bytes, err3 := tb.meter.Int64ObservableGauge("otelcol_postgrescopy_redis_stream_bytes",
		metric.WithDescription("Payload bytes in the signal's Redis stream."), metric.WithUnit("By"))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	return tb.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		observe(func(signal string, e, p, b int64) {
			attrs := metric.WithAttributes(attribute.String("signal", signal))
			o.ObserveInt64(entries, e, attrs)
			o.ObserveInt64(pending, p, attrs)
			o.ObserveInt64(bytes, b, attrs)
		})
		return nil
	}, entries, pending, bytes)
}

// RegisterDurabilityGauge reports the Redis durability last read: observe
// returns its level (weakest first, 0 for unknown) and its name, the
// durability attribute. It must not block.
func (tb *TelemetryBuilder) RegisterDurabilityGauge(observe func() (level int64, name string)) (metric.Registration, error) {
	g, err := tb.meter.Int64ObservableGauge("otelcol_postgrescopy_redis_durability",
		metric.WithDescription("What Redis offers an acknowledged request, as last read from INFO persistence and CONFIG GET: 0 unknown, 1 volatile, 2 rdb_snapshots, 3 aof, 4 aof_everysec, 5 aof_always, 6 replicated (min_replicas confirmed and connected); the durability attribute names it."),
		metric.WithUnit("1"))
	if err != nil {
		return nil, err
	}
	return tb.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		level, name := observe()
		o.ObserveInt64(g, level, metric.WithAttributes(attribute.String("durability", name)))
		return nil
	}, g)
}

// RegisterAdmissionGauge reports the flush batches waiting for the write
// admission from observe, which must not block.
func (tb *TelemetryBuilder) RegisterAdmissionGauge(observe func() int64) (metric.Registration, error) {
	g, err := tb.meter.Int64ObservableGauge("otelcol_postgrescopy_admission_waiting",
		metric.WithDescription("Flush batches waiting for older data to be written first (write admission)."),
		metric.WithUnit("{batch}"))
	if err != nil {
		return nil, err
	}
	return tb.meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(g, observe())
		return nil
	}, g)
}
