package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
)

// NewFactory creates the postgrescopy exporter factory.
func NewFactory() exporter.Factory {
	return exporter.NewFactory(
		metadata.Type,
		createDefaultConfig,
		exporter.WithTraces(createTraces, metadata.TracesStability),
		exporter.WithMetrics(createMetrics, metadata.MetricsStability),
		exporter.WithLogs(createLogs, metadata.LogsStability),
	)
}

func createDefaultConfig() component.Config {
	return &Config{
		TimeoutConfig:   exporterhelper.TimeoutConfig{Timeout: 30 * time.Second},
		QueueConfig:     metadata.NewDefaultSendingQueueConfig(),
		RetryConfig:     defaultRetryConfig(),
		Schema:          "otel",
		CreateSchema:    true,
		Indexes:         true,
		Partitioning:    defaultPartitioningConfig(),
		LedgerRetention: 24 * time.Hour,
		Redis:           configoptional.Default(defaultRedisConfig()),
		// On by default: the product exists to show AI spend, and the
		// columns cost a NULL bit and a few key lookups on other spans.
		PromotePreset: presetGenAI,
	}
}

func helperOptions(cfg *Config, e *pgExporter) []exporterhelper.Option {
	return []exporterhelper.Option{
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		exporterhelper.WithTimeout(cfg.TimeoutConfig),
		exporterhelper.WithRetry(cfg.RetryConfig),
		exporterhelper.WithQueue(cfg.QueueConfig),
		exporterhelper.WithStart(e.start),
		exporterhelper.WithShutdown(e.shutdown),
	}
}

func createTraces(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Traces, error) {
	cfg := c.(*Config)
	e, err := newExporter(cfg, set)
	if err != nil {
		return nil, err
	}
	return exporterhelper.NewTraces(ctx, set, cfg, e.pushTraces, helperOptions(cfg, e)...)
}

func createMetrics(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Metrics, error) {
	cfg := c.(*Config)
	e, err := newExporter(cfg, set)
	if err != nil {
		return nil, err
	}
	return exporterhelper.NewMetrics(ctx, set, cfg, e.pushMetrics, helperOptions(cfg, e)...)
}

func createLogs(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Logs, error) {
	cfg := c.(*Config)
	e, err := newExporter(cfg, set)
	if err != nil {
		return nil, err
	}
	return exporterhelper.NewLogs(ctx, set, cfg, e.pushLogs, helperOptions(cfg, e)...)
}
