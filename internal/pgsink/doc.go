// Package pgsink is the PostgreSQL runtime below the exporter: the pool and
// its TLS, the start that waits for a server not reachable yet, the schema
// preparation (migrate, or check with create_schema: false), the maintenance
// loops (partitions, ledger pruning, prices), the cache of other replicas'
// column layouts, and the writes through internal/pgwrite with their
// telemetry reported to a Recorder. *Sink is what the flush workers
// (internal/flush) write to.
package pgsink
