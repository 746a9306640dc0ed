// Package postgrescopyexporter is an OpenTelemetry Collector exporter that
// writes spans, metric points and log records into PostgreSQL with binary
// COPY: typed columns for what people filter on, jsonb for the rest.
package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"
