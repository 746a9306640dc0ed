package rows

import (
	"encoding/binary"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// The shard key (tables.ShardKeyColumn) is the distribution column on
// Citus. It is
//
//   - a span's or log's trace id when it has one: a trace's spans and logs
//     share a shard, and a lookup by trace (shard_key = id AND trace_id = id)
//     is routed to that shard alone;
//   - for a log or span without a trace, a hash of the row's own bytes: such
//     rows spread over every shard instead of piling up on one;
//   - for a metric point, a hash of its series (resource, scope, service,
//     name, description, unit, metadata and attributes): a series stays on
//     one shard while the series of one metric name spread.
//
// The hash is xxhash64, stable across processes and releases (a series keeps
// its shard), widened to 16 bytes.

// writeShardKey ends a span or log row with its shard key, when the layout
// has one.
func (b *Batch) writeShardKey(e *pgcopy.Encoder, trace [16]byte) {
	if !b.layout().ShardKey() {
		return
	}
	if trace != ([16]byte{}) {
		e.UUIDValue(trace)
		return
	}
	b.key.Reset()
	_, _ = b.key.Write(e.LastRow())
	e.UUIDValue(widen(b.key.Sum64()))
}

// writeSeriesKey ends a metric row with its series' shard key, when the
// layout has one.
func (b *Batch) writeSeriesKey(e *pgcopy.Encoder) {
	if !b.layout().ShardKey() {
		return
	}
	c := &b.ctx
	b.key.Reset()
	_, _ = b.key.Write(c.resJSON)
	_, _ = b.key.WriteString(c.scope.Name())
	_, _ = b.key.Write(c.scopeJSON)
	_, _ = b.key.Write(e.LastRow()[b.seriesFrom:b.seriesTo])
	e.UUIDValue(widen(b.key.Sum64()))
}

// widen makes a uuid of a 64-bit hash: the hash, then a mix of it (Citus
// hashes all 16 bytes; the second half only keeps the value a plausible id).
func widen(h uint64) [16]byte {
	var id [16]byte
	binary.BigEndian.PutUint64(id[:8], h)
	z := h + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	binary.BigEndian.PutUint64(id[8:], z^z>>31)
	return id
}
