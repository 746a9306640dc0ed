// Package flush holds the Redis flush workers: each reads and claims entries
// of one signal's stream, accumulates them under the batching policy
// (max_rows, max_bytes, max_wait, a quiet stream, the writes in flight),
// drops what the ledger has committed, writes the rest with their ledger keys
// in one PostgreSQL transaction, and acknowledges them. It sees Redis and
// PostgreSQL only through the Stream and Writer interfaces, and time through a
// Clock, so that the policy is tested without either server.
package flush // import "github.com/postgrescopy/postgrescopy/internal/flush"
