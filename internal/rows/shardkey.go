package rows

import (
	"encoding/binary"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
)

// The shard key (tables.ShardKeyColumn) is the distribution column of the
// logs and metric tables on Citus (spans are distributed by trace_id). It is
//
//   - a log's trace id when it has one: the log shares its trace's shard,
//     and a lookup of a trace's logs (shard_key = id AND trace_id = id) is
//     routed to that shard alone;
//   - for a log without a trace, a hash of the row's own bytes: such logs
//     spread over every shard instead of piling up on one;
//   - for a metric point, a hash of its series (resource, scope, service,
//     name, description, unit, metadata and attributes): a series stays on
//     one shard while the series of one metric name spread.
//
// The hash is xxhash64, stable across processes and releases (a series keeps
// its shard), widened to 16 bytes.

// writeShardKey ends a log row with its shard key, when its table has one.
func (b *Batch) writeShardKey(e *pgcopy.Encoder, i int, trace [16]byte) {
	if !b.layout().HasShardKey(i) {
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

// writeSeriesKey ends a row of metric table i with its series' shard key,
// when the table has one.
func (b *Batch) writeSeriesKey(e *pgcopy.Encoder, i int) {
	if !b.layout().HasShardKey(i) {
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
