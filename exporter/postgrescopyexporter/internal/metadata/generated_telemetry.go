package metadata

import (
	"errors"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric"
)

// Meter returns the exporter's meter.
func Meter(settings component.TelemetrySettings) metric.Meter {
	return settings.MeterProvider.Meter(ScopeName)
}

// TelemetryBuilder holds the exporter's own metrics, documented in
// documentation.md.
type TelemetryBuilder struct {
	PostgrescopyRows         metric.Int64Counter
	PostgrescopyBytes        metric.Int64Counter
	PostgrescopyCopyDuration metric.Float64Histogram
	PostgrescopyBatches      metric.Int64Counter
}

// NewTelemetryBuilder creates every instrument.
func NewTelemetryBuilder(settings component.TelemetrySettings) (*TelemetryBuilder, error) {
	m := Meter(settings)
	var tb TelemetryBuilder
	var err, errs error
	tb.PostgrescopyRows, err = m.Int64Counter("otelcol_postgrescopy_rows",
		metric.WithDescription("Rows handled, by table and outcome (written, failed)."),
		metric.WithUnit("{row}"))
	errs = errors.Join(errs, err)
	tb.PostgrescopyBytes, err = m.Int64Counter("otelcol_postgrescopy_copy_bytes",
		metric.WithDescription("Bytes of binary COPY data written, by table."),
		metric.WithUnit("By"))
	errs = errors.Join(errs, err)
	tb.PostgrescopyCopyDuration, err = m.Float64Histogram("otelcol_postgrescopy_write_duration",
		metric.WithDescription("Duration of one batch's transaction (every COPY and the commit), by outcome."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30))
	errs = errors.Join(errs, err)
	tb.PostgrescopyBatches, err = m.Int64Counter("otelcol_postgrescopy_batches",
		metric.WithDescription("Batches (transactions) attempted, by outcome (written, retryable, data, config)."),
		metric.WithUnit("{batch}"))
	errs = errors.Join(errs, err)
	return &tb, errs
}
