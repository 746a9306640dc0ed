// Package coord keeps the Redis side of postgrescopy's durable hand-off: one
// bounded stream per signal, shared by every replica through one consumer
// group; entries added under their request's key, read, claimed from dead
// consumers, acknowledged and deleted (with the byte counter the bound reads)
// in one script; epochs that tell a Redis that lost its data, and entry
// counts that tell exactly how many entries left a stream unwritten; what
// Redis says of its own durability and memory policy; Classify, the one place
// that recognizes Redis errors. Redis is the valve and the ledger of
// what waits; PostgreSQL stays the system of record. *Stream is what the flush
// workers (internal/flush) read through their Stream interface.
package coord
