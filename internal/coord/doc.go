// Package coord is everything Redis in postgrescopy's durable hand-off: the
// client (one node, Sentinel or Cluster, from go-redis's own options types),
// the start probe of credentials, ACL, eviction policy and durability, and
// the Runtime that runs the flush workers' streams and shards, notices a
// Redis that lost data (epochs, entry counts, the failover audit against the
// PostgreSQL ledger it is given) and reports it through a Recorder. One
// bounded stream per signal and shard, shared by every replica through one
// consumer group; entries added under their request's key, read, claimed
// from dead consumers, acknowledged and deleted (with the byte counter the
// bound reads) in one script. Classify is the one place that recognizes
// Redis errors, with go-redis's own helpers. Redis is the valve and the
// ledger of what waits; PostgreSQL stays the system of record.
// *WorkerStream is what the flush workers (internal/flush) read through
// their Stream interface.
package coord
