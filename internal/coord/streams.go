package coord

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"
)

// Entry field names, kept short: they are repeated in every entry.
const (
	fieldData   = "d" // the request's payload, in fieldFormat
	fieldItems  = "n" // spans, data points or log records in it
	fieldFormat = "f" // the payload's format (entry.Format)
	fieldKey    = "k" // the request's identity, assigned once before the XADD
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
	// Count is the entries in Stream as the exporter counts them: one more
	// with each entry added, one less with each entry acknowledged, in the
	// same transaction or script. Stream holding fewer means entries left
	// it without being written (the stream deleted or evicted, entries
	// trimmed): Audit reports how many.
	Count string
	Group string // consumer group shared by every replica
	// Epoch is a random marker written with the group. Redis losing its
	// data (a restart without persistence, a flush) loses it too: a missing
	// or changed epoch tells the exporter that entries may have been lost.
	Epoch string
	// Ledger is the stream name the PostgreSQL ledger records this stream's
	// entries under: the signal's first shard's, the same for every shard,
	// so that a request added again on another shard (shards changed
	// between two attempts) is still recognized.
	Ledger string
}

// KeysFor returns the keys of signal under prefix: its first shard's.
func KeysFor(prefix, signal string) Keys {
	return ShardKeys(prefix, signal, 0)
}

// ShardKeys returns the keys of shard i of signal under prefix. Shard 0 has
// the keys of an unsharded signal; each other shard has its own hash tag
// {prefix:signal:i}, so a Redis Cluster puts the shards in different slots.
func ShardKeys(prefix, signal string, i int) Keys {
	tag := "{" + prefix + ":" + signal + "}"
	ledger := tag + ":stream"
	if i > 0 {
		tag = "{" + prefix + ":" + signal + ":" + strconv.Itoa(i) + "}"
	}
	return Keys{Stream: tag + ":stream", Bytes: tag + ":bytes", Count: tag + ":count", Group: "postgrescopy",
		Epoch: tag + ":epoch", Ledger: ledger}
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

// ackScript acknowledges and deletes entries and gives their bytes and
// their count back. Only entries this call really deleted are subtracted, so
// two consumers acking the same entry (a claim race) cannot drive the
// counters below the truth.
var ackScript = redis.NewScript(`
local n, d = 0, 0
for i = 2, #ARGV, 2 do
  redis.call('XACK', KEYS[1], ARGV[1], ARGV[i])
  if redis.call('XDEL', KEYS[1], ARGV[i]) == 1 then
    n = n + tonumber(ARGV[i + 1])
    d = d + 1
  end
end
if n > 0 then
  local left = redis.call('DECRBY', KEYS[2], n)
  if left < 0 then redis.call('SET', KEYS[2], 0) end
end
if d > 0 then
  local left = redis.call('DECRBY', KEYS[3], d)
  if left < 0 then redis.call('SET', KEYS[3], 0) end
end
return n
`)

// auditScript compares the stream's length with its count, and sets the
// count to the length. It returns the entries missing (the count above the
// length), or -1 when there was no count (a Redis that lost its keys, or
// that an earlier release wrote to: the count starts from here). A count
// below the length (entries an earlier release added) is not a loss.
var auditScript = redis.NewScript(`
local len = redis.call('XLEN', KEYS[1])
local c = redis.call('GET', KEYS[2])
if not c then
  redis.call('SET', KEYS[2], len)
  return -1
end
c = tonumber(c)
if c ~= len then redis.call('SET', KEYS[2], len) end
if c > len then return c - len end
return 0
`)

// Audit reports how many entries left the stream without being acknowledged
// since the last audit (by any replica: the count is reset as it is read,
// so each loss is reported once), or -1 when the count was missing and
// starts now. An entry committed to PostgreSQL but not yet acknowledged
// when its stream vanished counts too: the count knows entries, not rows.
func (s *Stream) Audit(ctx context.Context) (int64, error) {
	n, err := auditScript.Run(ctx, s.rdb, []string{s.keys.Stream, s.keys.Count}).Int64()
	if err != nil {
		return 0, fmt.Errorf("audit of %s: %w", s.keys.Stream, err)
	}
	return n, nil
}

// Stream is one signal's stream seen by one consumer.
type Stream struct {
	rdb      redis.UniversalClient
	keys     Keys
	bounds   Bounds
	consumer string
	// replicas must hold an entry, within replicaTimeout, before AddEntry
	// returns it; 0 = no wait.
	replicas       int
	replicaTimeout time.Duration
	// aof: WAITAOF instead of WAIT (Redis 7.2+ with AOF), read once.
	aofMu   sync.Mutex
	aofRead bool
	aof     bool
}

// ErrTooFewReplicas: fewer replicas than required confirmed an added entry
// in time. The entry stays on the primary and may still be flushed: a retry
// under the same key is written once, by the ledger.
var ErrTooFewReplicas = errors.New("too few replicas confirmed the entry")

// RequireReplicas makes AddEntry wait (Redis WAIT) until n replicas hold
// each entry, for at most timeout.
func (s *Stream) RequireReplicas(n int, timeout time.Duration) {
	s.replicas, s.replicaTimeout = n, timeout
}

// NewStream binds a client to a signal's keys for the named consumer.
func NewStream(rdb redis.UniversalClient, keys Keys, bounds Bounds, consumer string) *Stream {
	return &Stream{rdb: rdb, keys: keys, bounds: bounds, consumer: consumer}
}

// Keys returns the stream's keys.
func (s *Stream) Keys() Keys { return s.keys }

// Name is the stream's key.
func (s *Stream) Name() string { return s.keys.Stream }

// Ledger is the name the ledger records the stream's entries under.
func (s *Stream) Ledger() string { return s.keys.Ledger }

// EnsureGroup creates the stream and the consumer group when missing.
func (s *Stream) EnsureGroup(ctx context.Context) error {
	_, err := s.Ensure(ctx)
	return err
}

// Ensure creates the stream and the consumer group when missing, and the
// epoch marker with them, and returns the epoch. The group starts at id 0:
// entries added before it existed (after Redis lost the group) are read.
func (s *Stream) Ensure(ctx context.Context) (string, error) {
	var create *redis.StatusCmd
	var epoch *redis.StringCmd
	_, err := s.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		create = pipe.XGroupCreateMkStream(ctx, s.keys.Stream, s.keys.Group, "0")
		pipe.SetNX(ctx, s.keys.Epoch, newEpoch(), 0)
		epoch = pipe.Get(ctx, s.keys.Epoch)
		return nil
	})
	// TxPipelined returns the first command's error; a BUSYGROUP there is
	// the usual case, and the other commands ran.
	if err != nil && !isBusyGroup(err) {
		return "", fmt.Errorf("create consumer group on %s: %w", s.keys.Stream, err)
	}
	if err := create.Err(); err != nil && !isBusyGroup(err) {
		return "", fmt.Errorf("create consumer group on %s: %w", s.keys.Stream, err)
	}
	e, err := epoch.Result()
	if err != nil {
		return "", fmt.Errorf("read epoch of %s: %w", s.keys.Stream, err)
	}
	return e, nil
}

func isBusyGroup(err error) bool { return Classify(err) == KindBusyGroup }

func newEpoch() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return strconv.FormatInt(time.Now().UnixMilli(), 10) + "-" + hex.EncodeToString(b[:])
}

// AddEntry appends one request's payload, in format, under the request's key:
// the identity a flush worker's ledger uses, so that a resent XADD (one
// request, two entries) is written once while distinct requests with
// identical bytes are two. It returns the entry id once Redis has it, or
// ErrBackpressure when the stream is over its bounds. An empty key or format
// writes no such field (tests write damaged entries that way).
func (s *Stream) AddEntry(ctx context.Context, key, format string, payload []byte, items int) (string, error) {
	if err := s.checkBounds(ctx, int64(len(payload))); err != nil {
		return "", err
	}
	values := []any{fieldData, payload, fieldItems, items}
	if format != "" {
		values = append(values, fieldFormat, format)
	}
	if key != "" {
		values = append(values, fieldKey, key)
	}
	var xadd *redis.StringCmd
	// MULTI/EXEC keeps the bytes and entry counters exact: an ack between a
	// bare XADD and its INCRBY would subtract bytes not yet counted, and the
	// ack script's clamp at zero would then leave the counter too high.
	add := func(c redis.Cmdable) error {
		var incr, count *redis.IntCmd
		_, err := c.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
			xadd = pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.keys.Stream, Values: values})
			incr = pipe.IncrBy(ctx, s.keys.Bytes, int64(len(payload)))
			count = pipe.IncrBy(ctx, s.keys.Count, 1)
			return nil
		})
		if err != nil {
			return fmt.Errorf("xadd %s: %w", s.keys.Stream, queuedErr(err, xadd, incr, count))
		}
		return nil
	}
	if s.replicas <= 0 {
		if err := add(s.rdb); err != nil {
			return "", err
		}
		return xadd.Val(), nil
	}
	// WAIT counts the writes of its own connection: Watch without keys holds
	// one connection for the add and the wait. On a cluster that is a
	// connection to the primary of the stream's slot: the node that takes
	// the write.
	node := redis.Cmdable(s.rdb)
	watch := func(fn func(*redis.Tx) error) error { return s.rdb.Watch(ctx, fn) }
	primary, err := s.slotPrimary(ctx)
	if err != nil {
		return "", err
	}
	if primary != nil {
		node, watch = primary, func(fn func(*redis.Tx) error) error { return primary.Watch(ctx, fn) }
	}
	aof := s.waitAOF(ctx, node)
	err = watch(func(tx *redis.Tx) error {
		if err := add(tx); err != nil {
			return err
		}
		n, err := s.wait(ctx, tx, aof)
		if err != nil {
			return fmt.Errorf("wait for %d replicas of %s: %w", s.replicas, s.keys.Stream, err)
		}
		if n < int64(s.replicas) {
			return fmt.Errorf("%w: %d of %d replicas confirmed entry %s of %s within %s",
				ErrTooFewReplicas, n, s.replicas, xadd.Val(), s.keys.Stream, s.replicaTimeout)
		}
		return nil
	})
	if err != nil {
		if cc, ok := s.rdb.(*redis.ClusterClient); ok && (Classify(err) == KindRedirect || Classify(err) == KindClusterDown) {
			// The slot moved (a reshard, a failover): the next attempt asks
			// the cluster where it lives now.
			cc.ReloadState(ctx)
		}
		return "", err
	}
	return xadd.Val(), nil
}

// queuedErr is the refusal behind an aborted transaction: Redis answers
// EXECABORT to EXEC when it refused a command as it was queued (OOM at
// maxmemory, an ACL), and that command's own error says why. When it
// refused the transaction at EXEC instead (memory crossed maxmemory after
// the commands were queued), the EXECABORT itself says why ("Transaction
// discarded because of: OOM ..."), and that reason is the error.
func queuedErr(err error, cmds ...redis.Cmder) error {
	if !redis.IsExecAbortError(err) {
		return err
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !redis.IsExecAbortError(e) {
			return e
		}
	}
	if _, reason, ok := strings.Cut(err.Error(), "because of: "); ok && reason != "" {
		return &discarded{reason: strings.TrimPrefix(reason, "-"), err: err}
	}
	return err
}

// discarded is a transaction Redis refused at EXEC, with the reason it
// gave; it unwraps to the EXECABORT.
type discarded struct {
	reason string
	err    error
}

func (d *discarded) Error() string { return d.reason }
func (d *discarded) Unwrap() error { return d.err }

// discardedFor reports whether err is a transaction refused at EXEC for a
// reason that begins with prefix ("OOM ").
func discardedFor(err error, prefix string) bool {
	var d *discarded
	return errors.As(err, &d) && strings.HasPrefix(d.reason, prefix)
}

// slotPrimary is, on a Redis Cluster, the client of the primary serving the
// stream's slot; nil elsewhere, where the client reaches the primary itself.
func (s *Stream) slotPrimary(ctx context.Context) (*redis.Client, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	primary, err := cc.MasterForKey(ctx, s.keys.Stream)
	if err != nil {
		return nil, fmt.Errorf("primary of %s: %w", s.keys.Stream, err)
	}
	return primary, nil
}

// wait waits for the required replicas on tx's connection: WAITAOF 0 N (the
// replicas fsynced the entry to their AOF) on Redis 7.2 or newer when aof,
// else WAIT N (the replicas hold it in memory).
func (s *Stream) wait(ctx context.Context, tx *redis.Tx, aof bool) (int64, error) {
	if !aof {
		return tx.Wait(ctx, s.replicas, s.replicaTimeout).Result()
	}
	// go-redis extends the read deadline by the timeout, as for WAIT.
	res, err := tx.WaitAOF(ctx, 0, s.replicas, s.replicaTimeout).Result()
	if err != nil {
		return 0, err
	}
	if len(res) != 2 {
		return 0, fmt.Errorf("WAITAOF replied %v", res)
	}
	return res[1], nil
}

// waitAOF reports whether to wait with WAITAOF: on Redis 7.2 or newer whose
// primary keeps an AOF. A replica counts in WAITAOF once it fsynced the entry
// to its own AOF, so its replicas must keep one too. Read once per stream.
func (s *Stream) waitAOF(ctx context.Context, node redis.Cmdable) bool {
	s.aofMu.Lock()
	defer s.aofMu.Unlock()
	if !s.aofRead {
		// A failed read is WAIT for this add, and read again for the next.
		info, err := node.Info(ctx, "server", "persistence").Result()
		if err != nil {
			return false
		}
		s.aof, s.aofRead = WaitAOFSupported(info), true
	}
	return s.aof
}

// WaitAOFSupported reads INFO server and persistence: WAITAOF exists from
// Redis 7.2 and counts replicas that fsynced their AOF.
func WaitAOFSupported(info string) bool {
	f := infoFields(info)
	return f["aof_enabled"] == "1" && versionAtLeast(f["redis_version"], 7, 2)
}

// infoFields are the name: value lines of an INFO reply.
func infoFields(info string) map[string]string {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	return fields
}

// versionAtLeast compares a "major.minor.patch" version.
func versionAtLeast(v string, major, minor int) bool {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return false
	}
	ma, err1 := strconv.Atoi(parts[0])
	mi, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
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
	cmds, err := pipe.Exec(ctx)
	if err := pipelineFailed(err, cmds); err != nil {
		return fmt.Errorf("bounds of %s: %w", s.keys.Stream, err)
	}
	if err != nil && !IsNil(err) {
		return fmt.Errorf("bounds of %s: %w", s.keys.Stream, err)
	}
	if used != nil {
		n, err := used.Int64()
		if err != nil && !IsNil(err) {
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
	// Format is the payload's format (rows.EntryFormat); empty when the entry
	// has none, which no release writes.
	Format string
	// Key is the request's identity given to AddEntry; empty on entries
	// written without one.
	Key string
	// Deleted is true for an entry deleted from the stream after its
	// delivery (a pending entry with no values): there is nothing to write,
	// only the acknowledgement.
	Deleted bool
	// Redelivered is true when the entry may have been processed before (it
	// came from a pending list): the ledger must be consulted.
	Redelivered bool
}

func toEntries(msgs []redis.XMessage, redelivered bool) []Entry {
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e := Entry{ID: m.ID, Redelivered: redelivered, Deleted: len(m.Values) == 0}
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
		if k, ok := m.Values[fieldKey].(string); ok {
			e.Key = k
		}
		out = append(out, e)
	}
	return out
}

// ReadNew reads up to count never-delivered entries, waiting at most block,
// at least a millisecond.
func (s *Stream) ReadNew(ctx context.Context, count int64, block time.Duration) ([]Entry, error) {
	// go-redis sends BLOCK in whole milliseconds: under one, BLOCK 0 would
	// wait for an entry however long it takes.
	block = max(block, time.Millisecond)
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.keys.Group, Consumer: s.consumer,
		Streams: []string{s.keys.Stream, ">"}, Count: count, Block: block,
	}).Result()
	if IsNil(err) {
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
	// Block -1 sends no BLOCK argument, and the client's read timeout
	// applies; Block 0 would send BLOCK 0, for which go-redis sets no read
	// deadline at all, and a half-open connection would stop the worker.
	res, err := s.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: s.keys.Group, Consumer: s.consumer,
		Streams: []string{s.keys.Stream, "0"}, Count: count, Block: -1,
	}).Result()
	if IsNil(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("xreadgroup pending %s: %w", s.keys.Stream, err)
	}
	if len(res) == 0 {
		return nil, nil
	}
	// An entry deleted after delivery shows with no values: toEntries marks
	// it Deleted, and the caller only acknowledges it.
	return toEntries(res[0].Messages, true), nil
}

// Claim takes over up to count entries that other consumers left pending for
// longer than minIdle (a replica that died or hangs mid-batch). Deleted
// entries that were still pending are acknowledged on the way.
func (s *Stream) Claim(ctx context.Context, minIdle time.Duration, count int64) ([]Entry, error) {
	msgs, _, err := s.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: s.keys.Stream, Group: s.keys.Group, Consumer: s.consumer,
		MinIdle: minIdle, Start: "0-0", Count: count,
	}).Result()
	if IsNil(err) {
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
	if err := ackScript.Run(ctx, s.rdb, []string{s.keys.Stream, s.keys.Bytes, s.keys.Count}, args...).Err(); err != nil && !IsNil(err) {
		return fmt.Errorf("ack %d entries on %s: %w", len(entries), s.keys.Stream, err)
	}
	return nil
}

// Stats is a stream's backlog.
type Stats struct {
	Entries int64 // in the stream (new and pending)
	Pending int64 // delivered, not yet acknowledged
	Bytes   int64 // payload bytes in the stream
	// GroupMissing is true when the consumer group (or the stream) does not
	// exist: nothing reads the entries until Ensure recreates it.
	GroupMissing bool
	Epoch        string // the epoch marker; empty when missing
	// PendingIDs are the pending entries' ids when there are at most
	// pendingIDsRead of them (else nil): with as many as Entries, every
	// entry the stream held was delivered to a worker, and which ones is
	// known (Runtime.lostSince).
	PendingIDs []string
}

// pendingIDsRead bounds the pending ids a stats read returns: the entries
// the workers hold at once at most, in a stream that keeps up.
const pendingIDsRead = 256

// Held says whether st names every entry the stream held (none, or all
// delivered to workers and listed in PendingIDs).
func (st Stats) Held() bool {
	return st.Entries == 0 || (st.Pending <= pendingIDsRead && int64(len(st.PendingIDs)) == st.Entries)
}

// Stats reads the backlog. A missing group does not fail it: the entries and
// bytes counted are the truth while nothing can read them.
func (s *Stream) Stats(ctx context.Context) (Stats, error) {
	pipe := s.rdb.Pipeline()
	read := s.queueStats(ctx, pipe)
	// Exec's error is the first command's; each is checked below, unless
	// none got an answer.
	cmds, err := pipe.Exec(ctx)
	if err := pipelineFailed(err, cmds); err != nil {
		return Stats{}, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
	}
	return read()
}

// AuditStats is Audit then Stats in one round trip, on one connection,
// with the run id of the server that answered them: in Sentinel mode the
// client's pool may hold a connection to another server than the one a
// check identified (the old primary back, empty), and what that server
// holds must not be read as the stream's. Not for a cluster client, which
// sends the keyless INFO to any node.
func (s *Stream) AuditStats(ctx context.Context) (node string, vanished int64, st Stats, err error) {
	pipe := s.rdb.Pipeline()
	info := pipe.Info(ctx, "server")
	audit := auditScript.Eval(ctx, pipe, []string{s.keys.Stream, s.keys.Count})
	read := s.queueStats(ctx, pipe)
	cmds, err := pipe.Exec(ctx)
	if err := pipelineFailed(err, cmds); err != nil {
		return "", 0, Stats{}, fmt.Errorf("audit and stats of %s: %w", s.keys.Stream, err)
	}
	if node, err = s.runID(info.Result()); err != nil {
		return "", 0, Stats{}, err
	}
	if vanished, err = audit.Int64(); err != nil {
		return "", 0, Stats{}, fmt.Errorf("audit of %s: %w", s.keys.Stream, err)
	}
	st, err = read()
	return node, vanished, st, err
}

// queueStats queues the commands of Stats on pipe and returns what reads
// their answers once it ran.
func (s *Stream) queueStats(ctx context.Context, pipe redis.Pipeliner) func() (Stats, error) {
	xlen := pipe.XLen(ctx, s.keys.Stream)
	pend := pipe.XPending(ctx, s.keys.Stream, s.keys.Group)
	ids := pipe.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: s.keys.Stream, Group: s.keys.Group, Start: "-", End: "+", Count: pendingIDsRead})
	bytes := pipe.Get(ctx, s.keys.Bytes)
	epoch := pipe.Get(ctx, s.keys.Epoch)
	return func() (Stats, error) {
		var st Stats
		var err error
		if st.Entries, err = xlen.Result(); err != nil {
			return Stats{}, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
		}
		switch p, err := pend.Result(); {
		case err == nil && p != nil:
			st.Pending = p.Count
		case err == nil:
			return Stats{}, fmt.Errorf("stats of %s: XPENDING gave no answer", s.keys.Stream)
		case IsNoGroup(err):
			st.GroupMissing = true
		default:
			return Stats{}, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
		}
		if !st.GroupMissing && st.Pending > 0 && st.Pending <= pendingIDsRead {
			// Read after XLEN in the same pipeline: an entry added in
			// between is not among them, and was added after the read began.
			pending, err := ids.Result()
			if err != nil {
				return Stats{}, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
			}
			for _, p := range pending {
				st.PendingIDs = append(st.PendingIDs, p.ID)
			}
		}
		if st.Bytes, err = bytes.Int64(); err != nil && !IsNil(err) {
			return Stats{}, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
		}
		if st.Epoch, err = epoch.Result(); err != nil && !IsNil(err) {
			return Stats{}, fmt.Errorf("stats of %s: %w", s.keys.Stream, err)
		}
		return st, nil
	}
}

// Node identifies the Redis server that holds the stream (its run_id): the
// primary, or on a cluster the primary of the stream's slot. It changes when
// that server is replaced: a failover, a restart, a slot moved elsewhere.
func (s *Stream) Node(ctx context.Context) (string, error) {
	node := redis.Cmdable(s.rdb)
	primary, err := s.slotPrimary(ctx)
	if err != nil {
		return "", err
	}
	if primary != nil {
		node = primary
	}
	return s.runID(node.Info(ctx, "server").Result())
}

// runID is the run id in an INFO server answer of the stream's server.
func (s *Stream) runID(info string, err error) (string, error) {
	if err != nil {
		return "", fmt.Errorf("info server of the node of %s: %w", s.keys.Stream, err)
	}
	if id := infoFields(info)["run_id"]; id != "" {
		return id, nil
	}
	return "", fmt.Errorf("info server of the node of %s: no run_id", s.keys.Stream)
}

// Present reports which of the entry ids are in the stream, in one round
// trip.
func (s *Stream) Present(ctx context.Context, ids []string) (map[string]bool, error) {
	out := make(map[string]bool, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := s.rdb.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XRangeN(ctx, s.keys.Stream, id, id, 1)
	}
	// A pipeline that got no answer must not read as entries absent.
	all, err := pipe.Exec(ctx)
	if err := pipelineFailed(err, all); err != nil {
		return nil, fmt.Errorf("look up entries of %s: %w", s.keys.Stream, err)
	}
	for i, cmd := range cmds {
		msgs, err := cmd.Result()
		if err != nil && !IsNil(err) {
			return nil, fmt.Errorf("look up entries of %s: %w", s.keys.Stream, err)
		}
		out[ids[i]] = len(msgs) > 0
	}
	return out, nil
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

// ShardsKey names the registry of how many shards of each signal were ever
// used under prefix: flush workers read every shard it names, so that shards
// a smaller redis::shards no longer adds to are drained. A key, not a SCAN:
// a SCAN sees one node of a cluster.
func ShardsKey(prefix string) string { return "{" + prefix + ":shards}" }

var registerShards = redis.NewScript(`
local v = tonumber(redis.call('GET', KEYS[1]) or '0')
local n = tonumber(ARGV[1])
if n > v then
  redis.call('SET', KEYS[1], n)
  return n
end
return v
`)

// RegisterShards records that n shards are in use under prefix and returns
// the most ever used (n or more).
func RegisterShards(ctx context.Context, rdb redis.UniversalClient, prefix string, n int) (int, error) {
	v, err := registerShards.Run(ctx, rdb, []string{ShardsKey(prefix)}, n).Int()
	if err != nil {
		return 0, fmt.Errorf("register %d shards in %s: %w", n, ShardsKey(prefix), err)
	}
	return v, nil
}
