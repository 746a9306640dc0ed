// Package coord keeps the Redis side of postgrescopy's durable hand-off: one
// bounded stream per signal, shared by every replica through one consumer
// group. Redis is the valve and the ledger of what arrived and what was
// flushed; PostgreSQL stays the system of record.
package coord
