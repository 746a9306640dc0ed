package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/request"
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
	queue := metadata.NewDefaultSendingQueueConfig()
	return &Config{
		TimeoutConfig:   exporterhelper.TimeoutConfig{Timeout: 30 * time.Second},
		QueueConfig:     queue,
		MaxConns:        defaultMaxConns(queue),
		WorkMem:         pgwrite.DefaultWorkMem,
		RetryConfig:     defaultRetryConfig(),
		Schema:          "otel",
		CreateSchema:    true,
		Indexes:         true,
		Partitioning:    defaultPartitioningConfig(),
		LedgerRetention: 24 * time.Hour,
		Redis:           configoptional.Default(defaultRedisConfig()),
		// On by default: the product exists to show AI spend, and the
		// columns cost a NULL bit and a few key lookups on other spans.
		PromotePreset:   presetGenAI,
		Pricing:         defaultPricingConfig(),
		CostAttribution: defaultCostAttributionConfig(),
	}
}

// helperOptions builds the exporterhelper of a request-based exporter
// (xexporterhelper): the requests carry the key each got when it entered the
// exporter (internal/request) through the queue, the batcher and the retries.
func helperOptions[T any](cfg *Config, e *pgExporter, c *request.Codec[T]) []exporterhelper.Option {
	opts := []exporterhelper.Option{
		exporterhelper.WithCapabilities(consumer.Capabilities{MutatesData: false}),
		exporterhelper.WithTimeout(cfg.TimeoutConfig),
		exporterhelper.WithRetry(cfg.RetryConfig),
		exporterhelper.WithStart(e.start),
		exporterhelper.WithShutdown(e.shutdown),
	}
	// In Redis mode without a sending queue, Redis is the queue: no
	// queue option at all, or exporterhelper would end each refusal's log
	// line with "Try enabling sending_queue".
	if !cfg.Redis.HasValue() || cfg.QueueConfig.HasValue() {
		opts = append(opts, xexporterhelper.WithQueueBatch(cfg.QueueConfig, queueBatchSettings(cfg, c)))
	}
	return opts
}

func queueBatchSettings[T any](cfg *Config, c *request.Codec[T]) xexporterhelper.QueueBatchSettings {
	set := xexporterhelper.QueueBatchSettings{Encoding: request.NewEncoding(c)}
	if q := cfg.QueueConfig; q.HasValue() && (!q.Get().Batch.HasValue() || len(q.Get().Batch.Get().Partition.MetadataKeys) == 0) {
		// The exporterhelper refuses a merge function next to
		// metadata_keys, whose own merge it then uses.
		set.MergeCtx = mergeCallers
	}
	return set
}

func createTraces(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Traces, error) {
	cfg := c.(*Config)
	e, err := newExporter(cfg, set)
	if err != nil {
		return nil, err
	}
	exp, err := xexporterhelper.NewTracesRequest(ctx, helperSettings(set, e), converter(cfg, request.Traces), pusher(e, request.Traces),
		helperOptions(cfg, e, request.Traces)...)
	if err != nil {
		return nil, err
	}
	return tracesExporter{Traces: exp, stop: stopFirst{e: e, shutdown: exp.Shutdown}, split: newSplitter(cfg, request.Traces, cloneTraces)}, nil
}

func createMetrics(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Metrics, error) {
	cfg := c.(*Config)
	e, err := newExporter(cfg, set)
	if err != nil {
		return nil, err
	}
	exp, err := xexporterhelper.NewMetricsRequest(ctx, helperSettings(set, e), converter(cfg, request.Metrics), pusher(e, request.Metrics),
		helperOptions(cfg, e, request.Metrics)...)
	if err != nil {
		return nil, err
	}
	return metricsExporter{Metrics: exp, stop: stopFirst{e: e, shutdown: exp.Shutdown}, split: newSplitter(cfg, request.Metrics, cloneMetrics)}, nil
}

func createLogs(ctx context.Context, set exporter.Settings, c component.Config) (exporter.Logs, error) {
	cfg := c.(*Config)
	e, err := newExporter(cfg, set)
	if err != nil {
		return nil, err
	}
	exp, err := xexporterhelper.NewLogsRequest(ctx, helperSettings(set, e), converter(cfg, request.Logs), pusher(e, request.Logs),
		helperOptions(cfg, e, request.Logs)...)
	if err != nil {
		return nil, err
	}
	return logsExporter{Logs: exp, stop: stopFirst{e: e, shutdown: exp.Shutdown}, split: newSplitter(cfg, request.Logs, cloneLogs)}, nil
}
