// Package postgrescopyexporter is an OpenTelemetry Collector exporter that
// writes spans, metric points and log records into PostgreSQL with binary
// COPY: typed columns for what people filter on, jsonb for the rest. It holds
// the factory, the config, the per-signal push (direct, through the
// Collector's queue and batcher) or enqueue (Redis mode, one stream entry per
// request), and the lifecycle of the client the signals share (pool, Redis
// client, flush workers from internal/flush, maintenance loops).
package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"
