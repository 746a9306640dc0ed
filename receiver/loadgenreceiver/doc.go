// Package loadgenreceiver is a Collector receiver that synthesises the
// AI-usage workload of the "67,000 telemetry events per second in Postgres"
// benchmark: simulated users, each with about 1,900 correlated spans, metric
// data points and log records of about 3 KB, deterministic for a given seed.
// NewGenerator produces the same batches without a Collector, for benchmarks.
package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
