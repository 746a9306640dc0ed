package coord

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Entry field names, kept short: they are repeated in every entry.
const (
	fieldData   = "d" // the request; OTLP protobuf unless fieldFormat says otherwise
	fieldItems  = "n" // spans, data points or log records in it
	fieldFormat = "f" // the payload's format; absent on legacy OTLP entries
)

// ErrBackpressure is returned by Add when the stream holds more than its
// bound: the caller must retry later, and nothing already in Redis is trimmed.
var ErrBackpressure = errors.New("redis stream is full")

// Keys names one signal's keys. The hash tag {prefix:signal} puts them in one
// Redis Cluster slot, so the scripts and transactions that touch both keys
// work on a cluster.
type Keys struct {
	Stream string // the entries
	Bytes  string // payload bytes currently in Stream
	Group  string // consumer group shared by every replica
}

// KeysFor returns the keys of signal under prefix.
func KeysFor(prefix, signal string) Keys {
	tag := "{" + prefix + ":" + signal + "}"
	return Keys{Stream: tag + ":stream", Bytes: tag + ":bytes", Group: "postgrescopy"}
}

// Bounds cap what a stream may hold before Add refuses; zero means no bound.
//
// The bounds are soft: Add reads the backlog, then appends in a separate
// round trip, so that the payload never passes through a Lua script (which
// cost Redis ~2.5 ms of CPU per MB-sized entry). Producers racing past the
// check may each overshoot by one entry. A single entry larger than MaxBytes
// still enters an empty stream, or it could never be written.
type Bounds struct {
	MaxBytes   int64
	MaxEntries int64
}

// ackScript acknowledges and deletes entries and gives their bytes back. Only
// entries this call really deleted are subtracted, so two consumers acking
// the same entry (a claim race) cannot drive the counter below the truth.
var ackScript = redis.NewScript(`
local n = 0
for i = 2, #ARGV, 2 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    n = n + tonumber(ARGV[i + 1])
  end
end
if n > 0 then
  local left = redis.call('DECRBY', KEYS[2], n)
  if left < 0 then redis.call('SET', KEYS[2], 0) end
end
return n
`)

// Stream is one signal's stream seen by one consumer.
type Stream struct {
	rdb      redis.UniversalClient
	keys     Keys
	bounds   Bounds
	consumer string
}

// NewStream binds a client to a signal's keys for the named consumer.
func NewStream(rdb redis.UniversalClient, keys Keys, bounds Bounds, consumer string) *Stream {
	return &Stream{rdb: rdb, keys: keys, bounds: bounds, consumer: consumer}
}

// Keys returns the stream's keys.
func (s *Stream) Keys() Keys { return s.keys }

// EnsureGroup creates the stream and the consumer group when missing.
func (s *Stream) EnsureGroup(ctx context.Context) error {
	err := s.rdb.XGroupCreateMkStream(ctx, s.keys.Stream, s.keys.Group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("create consumer group on %s: %w", s.keys.Stream, err)
	}
	return nil
}

// Add appends one request in the legacy format (OTLP protobuf, no format
// field). It returns the entry id once Redis has it, or ErrBackpressure when
// the stream is over its bounds.
func (s *Stream) Add(ctx context.Context, payload []byte, items int) (string, error) {
	return s.AddFormat(ctx, "", payload, items)
}

// AddFormat is Add with the payload's format recorded in the entry; an empty
// format writes a legacy entry.
func (s *Stream) AddFormat(ctx context.Context, format string, payload []byte, items int) (string, error) {
	if err := s.checkBounds(ctx, int64(len(payload))); err != nil {
		return "", err
	}
	values := []any{fieldData, payload, fieldItems, items}
	if format != "" {
		values = append(values, fieldFormat, format)
	}
	var xadd *redis.StringCmd
	// MULTI/EXEC keeps the bytes counter exact: an ack between a bare XADD
	// and its INCRBY would subtract bytes not yet counted, and the ack
	// script's clamp at zero would then leave the counter too high.
	_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		xadd = pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.keys.Stream, Values: values})
		pipe.IncrBy(ctx, s.keys.Bytes, int64(len(payload)))
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("xadd %s: %w", s.keys.Stream, err)
	}
	return xadd.Val(), nil
}

// checkBounds refuses an entry of size bytes when the stream is over its
// bounds, reading only the counter and the length (see Bounds).
func (s *Stream) checkBounds(ctx context.Context, size int64) error {
	b := s.bounds
	if b.MaxBytes <= 0 && b.MaxEntries <= 0 {
		return nil
	}
	pipe := s.rdb.Pipeline()
	var used *redis.StringCmd
	var xlen *redis.IntCmd
	if b.MaxBytes > 0 {
		used = pipe.Get(ctx, s.keys.Bytes)
	}
	if b.MaxEntries > 0 {
		xlen = pipe.XLen(ctx, s.keys.Stream)
	}
	// A missing counter is redis.Nil: an empty stream.
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("bounds of %s: %w", s.keys.Stream, err)
	}
	if used != nil {
		n, err := used.Int64()
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("bounds of %s: %w", s.keys.Stream, err)
		}
		if n > 0 && n+size > b.MaxBytes {
			return fmt.Errorf("%w: %s holds %d bytes or more (max_pending_bytes)", ErrBackpressure, s.keys.Stream, b.MaxBytes)
		}
	}
	if xlen != nil && xlen.Val() >= b.MaxEntries {
		return fmt.Errorf("%w: %s holds %d entries (max_pending_entries)", ErrBackpressure, s.keys.Stream, b.MaxEntries)
	}
	return nil
}

// Entry is one stream entry as read by a consumer.
type Entry struct {
	ID string
	// Data is read-only: it shares the memory of the reply's string.
	Data  []byte
	Items int
	// Format is the payload's format; empty for legacy OTLP protobuf entries.
	Format string
	// Redelivered is true when the entry may have been processed before (it
	// came from a pending list): the ledger must be consulted.
	Redelivered bool
}

func toEntries(msgs []redis.XMessage, redelivered bool) []Entry {
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e := Entry{ID: m.ID, Redelivered: redelivered}
		if d, ok := m.Values[fieldData].(string); ok && d != "" {
			// go-redis returns the payload as a string; view it as bytes
			// instead of copying it (nothing writes to Data).
			e.Data = unsafe.Slice(unsafe.StringData(d), len(d))
		}
		if n, ok := m.Values[fieldItems].(string); ok {
			e.Items, _ = strconv.Atoi(n)
		}
		if f, ok := m.Values[fieldFormat].(string); ok {
			e.Format = f
		}
		out = append(out, e)
	}
	return out
}

// ReadNew reads up to count never-delivered entries, waiting at most block
// (which must be positive: zero would block forever).
func (s *Stream) ReadNew(ctx context.Context, count int64, block time.Duration) ([]Entry, error) {
	if block <= 0 {
		block = time.Millisecond
	}
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.keys.Group, Consumer: s.consumer,
		Streams: []string{s.keys.Stream, ">"}, Count: count, Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("xreadgroup %s: %w", s.keys.Stream, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	return toEntries(res[0].Messages, false), nil
}

// ReadOwnPending re-reads entries delivered to this consumer and not yet
// acknowledged (after a failed flush), without blocking.
func (s *Stream) ReadOwnPending(ctx context.Context, count int64) ([]Entry, error) {
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.keys.Group, Consumer: s.consumer,
		Streams: []string{s.keys.Stream, "0"}, Count: count,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("xreadgroup pending %s: %w", s.keys.Stream, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	var msgs []redis.XMessage
	for _, m := range res[0].Messages {
		// An entry deleted after delivery shows with no values: nothing to do
		// but acknowledge it, which Claim's caller does through Ack.
		msgs = append(msgs, m)
	}
	return toEntries(msgs, true), nil
}

// Claim takes over up to count entries that other consumers left pending for
// longer than minIdle (a replica that died or hangs mid-batch). Deleted
// entries that were still pending are acknowledged on the way.
func (s *Stream) Claim(ctx context.Context, minIdle time.Duration, count int64) ([]Entry, error) {
	msgs, _, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: s.keys.Stream, Group: s.keys.Group, Consumer: s.consumer,
		MinIdle: minIdle, Start: "0-0", Count: count,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("xautoclaim %s: %w", s.keys.Stream, err)
	}
	return toEntries(msgs, true), nil
}

// Ack acknowledges and deletes entries whose rows are committed.
func (s *Stream) Ack(ctx context.Context, entries []Entry) error {
	if len(entries) == 0 {
		return nil
	}
	args := make([]any, 0, 1+2*len(entries))
	args = append(args, s.keys.Group)
	for _, e := range entries {
		args = append(args, e.ID, len(e.Data))
	}
	if err := ackScript.Run(ctx, s.rdb, []string{s.keys.Stream, s.keys.Bytes}, args...).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("ack %d entries on %s: %w", len(entries), s.keys.Stream, err)
	}
	return nil
}

// Stats is a stream's backlog.
type Stats struct {
	Entries int64 // in the stream (new and pending)
	Pending int64 // delivered, not yet acknowledged
	Bytes   int64 // payload bytes in the stream
}

// Stats reads the backlog.
func (s *Stream) Stats(ctx context.Context) (Stats, error) {
	var st Stats
	pipe := s.rdb.Pipeline()
	xlen := pipe.XLen(ctx, s.keys.Stream)
	pend := pipe.XPending(ctx, s.keys.Stream, s.keys.Group)
	bytes := pipe.Get(ctx, s.keys.Bytes)
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
	}
	st.Entries = xlen.Val()
	if p, err := pend.Result(); err == nil {
		st.Pending = p.Count
	}
	st.Bytes, _ = bytes.Int64()
	return st, nil
}

// PruneConsumers removes consumers of the group, other than this one, that
// have nothing pending and were idle longer than idle: every replica start
// adds a consumer name, and dead names would otherwise pile up.
func (s *Stream) PruneConsumers(ctx context.Context, idle time.Duration) (int, error) {
	cs, err := s.rdb.XInfoConsumers(ctx, s.keys.Stream, s.keys.Group).Result()
	if err != nil {
		return 0, fmt.Errorf("xinfo consumers %s: %w", s.keys.Stream, err)
	}
	n := 0
	for _, c := range cs {
		if c.Name == s.consumer || c.Pending > 0 || c.Idle < idle {
			continue
		}
		if err := s.rdb.XGroupDelConsumer(ctx, s.keys.Stream, s.keys.Group, c.Name).Err(); err != nil {
			return n, fmt.Errorf("delete consumer %s: %w", c.Name, err)
		}
		n++
	}
	return n, nil
}
