package coord

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// testStream returns a stream under a key prefix unique to the test, with
// its group created; its keys are deleted when the test ends.
func testStream(tb testing.TB, bounds Bounds) (*Stream, *redis.Client) {
	tb.Helper()
	rdb := redis.NewClient(redistest.Options())
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		pgtest.Unavailable(tb, "Redis at %s does not answer (make services): %v", redistest.Redacted(), err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	keys := KeysFor("pgct-coord-"+hex.EncodeToString(b[:]), "traces")
	tb.Cleanup(func() {
		rdb.Del(context.Background(), keys.Stream, keys.Bytes, keys.Count, keys.Epoch)
		rdb.Close()
	})
	s := NewStream(rdb, keys, bounds, "test")
	require.NoError(tb, s.EnsureGroup(context.Background()))
	return s, rdb
}

func payloadOf(size int, seed byte) []byte {
	p := make([]byte, size)
	for i := range p {
		p[i] = seed + byte(i*7)
	}
	return p
}

func counter(t *testing.T, s *Stream, rdb *redis.Client) int64 {
	t.Helper()
	n, err := rdb.Get(context.Background(), s.Keys().Bytes).Int64()
	if errors.Is(err, redis.Nil) {
		return 0
	}
	require.NoError(t, err)
	return n
}

// streamBytes sums the payload sizes really in the stream.
func streamBytes(t *testing.T, s *Stream, rdb *redis.Client) int64 {
	t.Helper()
	msgs, err := rdb.XRange(context.Background(), s.Keys().Stream, "-", "+").Result()
	require.NoError(t, err)
	var n int64
	for _, m := range msgs {
		d, _ := m.Values[fieldData].(string)
		n += int64(len(d))
	}
	return n
}

func TestAddThenReadNewReturnsPayloadItemsKeyAndFormat(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	big := payloadOf(300<<10, 1)
	tagged := payloadOf(5000, 2)
	idBig, err := s.AddEntry(ctx, "key-1", "copy1", big, 17)
	require.NoError(t, err)
	idBare, err := s.AddEntry(ctx, "", "", tagged, 3)
	require.NoError(t, err)

	entries, err := s.ReadNew(ctx, 10, 100*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, idBig, entries[0].ID)
	assert.True(t, bytes.Equal(big, entries[0].Data), "payload intact")
	assert.Equal(t, 17, entries[0].Items)
	assert.Equal(t, "copy1", entries[0].Format)
	assert.Equal(t, "key-1", entries[0].Key)
	assert.False(t, entries[0].Redelivered)
	assert.False(t, entries[0].Deleted)
	assert.Equal(t, idBare, entries[1].ID)
	assert.True(t, bytes.Equal(tagged, entries[1].Data), "payload intact")
	assert.Equal(t, 3, entries[1].Items)
	assert.Empty(t, entries[1].Format)
	assert.Empty(t, entries[1].Key)

	// An empty key or format writes no field at all.
	msgs, err := rdb.XRange(ctx, s.Keys().Stream, idBare, idBare).Result()
	require.NoError(t, err)
	require.Len(t, msgs, 1)
	assert.NotContains(t, msgs[0].Values, fieldFormat)
	assert.NotContains(t, msgs[0].Values, fieldKey)
}

// An entry deleted after its delivery (XDEL, MAXLEN) is still pending on its
// consumer; re-read, it is marked Deleted, with no data, so that its reader
// only acknowledges it.
func TestReadOwnPendingMarksDeletedEntries(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	kept, err := s.AddEntry(ctx, "k1", "f1", payloadOf(100, 1), 1)
	require.NoError(t, err)
	gone, err := s.AddEntry(ctx, "k2", "f1", payloadOf(100, 2), 1)
	require.NoError(t, err)
	_, err = s.ReadNew(ctx, 10, 100*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, rdb.XDel(ctx, s.Keys().Stream, gone).Err())

	entries, err := s.ReadOwnPending(ctx, 10)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, kept, entries[0].ID)
	assert.False(t, entries[0].Deleted)
	assert.True(t, entries[0].Redelivered)
	assert.Equal(t, gone, entries[1].ID)
	assert.True(t, entries[1].Deleted)
	assert.Empty(t, entries[1].Data)

	require.NoError(t, s.Ack(ctx, entries))
	pending, err := rdb.XPending(ctx, s.Keys().Stream, s.Keys().Group).Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count)
}

func TestBytesCounterIsExactAndReturnsToZeroAfterAck(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	var want int64
	for i := 0; i < 20; i++ {
		p := payloadOf(1000+i*333, byte(i))
		format := ""
		if i%2 == 1 {
			format = "f1"
		}
		_, err := s.AddEntry(ctx, "k", format, p, i)
		require.NoError(t, err)
		want += int64(len(p))
	}
	assert.Equal(t, want, counter(t, s, rdb))
	assert.Equal(t, want, streamBytes(t, s, rdb))
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, want, st.Bytes)
	assert.EqualValues(t, 20, st.Entries)

	entries, err := s.ReadNew(ctx, 100, 100*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 20)
	require.NoError(t, s.Ack(ctx, entries))
	assert.Zero(t, counter(t, s, rdb))
	n, err := rdb.XLen(ctx, s.Keys().Stream).Result()
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestMaxBytesRefusesOnceOver(t *testing.T) {
	s, rdb := testStream(t, Bounds{MaxBytes: 10_000})
	ctx := context.Background()

	// Larger than the bound, but the stream is empty: it must enter, or it
	// could never be written.
	big := payloadOf(25_000, 1)
	_, err := s.AddEntry(ctx, "k", "f1", big, 1)
	require.NoError(t, err)
	_, err = s.AddEntry(ctx, "k", "f1", payloadOf(1, 2), 1)
	require.ErrorIs(t, err, ErrBackpressure)
	assert.Contains(t, err.Error(), "max_pending_bytes")
	assert.EqualValues(t, len(big), counter(t, s, rdb), "a refused entry is not counted")

	entries, err := s.ReadNew(ctx, 10, 100*time.Millisecond)
	require.NoError(t, err)
	require.NoError(t, s.Ack(ctx, entries))

	// Fill up to the bound exactly, then one byte more is refused.
	for i := 0; i < 4; i++ {
		_, err := s.AddEntry(ctx, "k", "f1", payloadOf(2500, byte(i)), 1)
		require.NoError(t, err)
	}
	_, err = s.AddEntry(ctx, "k", "x", payloadOf(1, 9), 1)
	require.ErrorIs(t, err, ErrBackpressure)
	assert.EqualValues(t, 10_000, counter(t, s, rdb))
	assert.EqualValues(t, 10_000, streamBytes(t, s, rdb))
}

func TestMaxEntriesRefuses(t *testing.T) {
	s, rdb := testStream(t, Bounds{MaxEntries: 3})
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		_, err := s.AddEntry(ctx, "k", "f1", payloadOf(100, byte(i)), 1)
		require.NoError(t, err)
	}
	_, err := s.AddEntry(ctx, "k", "f1", payloadOf(100, 9), 1)
	require.ErrorIs(t, err, ErrBackpressure)
	assert.Contains(t, err.Error(), "max_pending_entries")
	n, err := rdb.XLen(ctx, s.Keys().Stream).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 3, n)
	assert.EqualValues(t, 300, counter(t, s, rdb))
}

func TestConcurrentAddsKeepBytesCounterExact(t *testing.T) {
	s, rdb := testStream(t, Bounds{MaxBytes: 1 << 40, MaxEntries: 1 << 30})
	ctx := context.Background()
	const producers, adds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for g := 0; g < producers; g++ {
		wg.Go(func() {
			for i := 0; i < adds; i++ {
				if _, err := s.AddEntry(ctx, "k", "f1", payloadOf(100+g*1000+i*37, byte(g)), 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n, err := rdb.XLen(ctx, s.Keys().Stream).Result()
	require.NoError(t, err)
	assert.EqualValues(t, producers*adds, n)
	assert.Equal(t, streamBytes(t, s, rdb), counter(t, s, rdb))
}

// TestConcurrentAddsAndAcksKeepBytesCounterExact acks entries as soon as they
// are read, racing the adders: an ack landing between an XADD and its INCRBY
// would leave the counter off.
func TestConcurrentAddsAndAcksKeepBytesCounterExact(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	const producers, adds = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, producers+1)
	for g := 0; g < producers; g++ {
		wg.Go(func() {
			for i := 0; i < adds; i++ {
				if _, err := s.AddEntry(ctx, "k", "f1", payloadOf(100+g*1000+i*37, byte(g)), 1); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	done := make(chan struct{})
	var reader sync.WaitGroup
	reader.Go(func() {
		for {
			entries, err := s.ReadNew(ctx, 7, time.Millisecond)
			if err == nil {
				err = s.Ack(ctx, entries)
			}
			if err != nil {
				errs <- err
				return
			}
			select {
			case <-done:
				return
			default:
			}
		}
	})
	wg.Wait()
	close(done)
	reader.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	assert.Equal(t, streamBytes(t, s, rdb), counter(t, s, rdb))
}

// TestBoundsAreSoftByAtMostOneEntryPerProducer documents the cost of checking
// before adding: racing producers may each pass the check once too often.
func TestBoundsAreSoftByAtMostOneEntryPerProducer(t *testing.T) {
	const producers, maxEntries = 8, 20
	s, rdb := testStream(t, Bounds{MaxEntries: maxEntries})
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, producers)
	for g := 0; g < producers; g++ {
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := s.AddEntry(ctx, "k", "f1", payloadOf(64, byte(g)), 1)
				if errors.Is(err, ErrBackpressure) {
					return
				}
				if err != nil || i > 1000 {
					errs <- fmt.Errorf("producer %d: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	n, err := rdb.XLen(ctx, s.Keys().Stream).Result()
	require.NoError(t, err)
	assert.GreaterOrEqual(t, n, int64(maxEntries))
	assert.LessOrEqual(t, n, int64(maxEntries+producers-1))
	assert.Equal(t, streamBytes(t, s, rdb), counter(t, s, rdb))
}

// A wait under a millisecond (the rest of a batch's max_wait) must not reach
// Redis as BLOCK 0, which blocks until an entry arrives: an idle worker
// would then hold its read, and the shutdown, for go-redis's 10 s margin.
func TestReadNewUnderAMillisecondReturns(t *testing.T) {
	s, _ := testStream(t, Bounds{})
	begin := time.Now()
	entries, err := s.ReadNew(context.Background(), 10, 300*time.Microsecond)
	require.NoError(t, err)
	assert.Empty(t, entries)
	assert.Less(t, time.Since(begin), time.Second)
}

// TestNodeAndPresent: Node names the server (its run_id, the same on every
// call), and Present finds the entries in the stream and not one deleted
// after its rows were committed (Ack) nor one never added.
func TestNodeAndPresent(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	node, err := s.Node(ctx)
	require.NoError(t, err)
	want, err := rdb.Info(ctx, "server").Result()
	require.NoError(t, err)
	assert.Len(t, node, 40)
	assert.Contains(t, want, "run_id:"+node)
	again, err := s.Node(ctx)
	require.NoError(t, err)
	assert.Equal(t, node, again)

	a, err := s.AddEntry(ctx, "ka", "", payloadOf(10, 1), 1)
	require.NoError(t, err)
	b, err := s.AddEntry(ctx, "kb", "", payloadOf(10, 2), 1)
	require.NoError(t, err)
	read, err := s.ReadNew(ctx, 10, 0)
	require.NoError(t, err)
	require.Len(t, read, 2)
	require.NoError(t, s.Ack(ctx, read[:1])) // a: written and deleted
	got, err := s.Present(ctx, []string{a, b, "1-1"})
	require.NoError(t, err)
	assert.Equal(t, map[string]bool{a: false, b: true, "1-1": false}, got)
}

// TestTransactionRefusedAtExecIsNamed: when memory crosses maxmemory after
// an entry's commands were queued, Redis refuses the whole transaction at
// EXEC ("EXECABORT Transaction discarded because of: OOM ..."), and no
// queued command carries an error of its own. The reason it gave is the
// error, and it is an OOM.
func TestTransactionRefusedAtExecIsNamed(t *testing.T) {
	ctx := context.Background()
	rdb := throwawayRedis(t, "--save", "", "--appendonly", "no", "--maxmemory-policy", "noeviction")
	conn := rdb.Conn()
	defer conn.Close()
	require.NoError(t, conn.Do(ctx, "MULTI").Err())
	xadd := conn.Do(ctx, "XADD", "s", "*", "f", "v")
	require.Equal(t, "QUEUED", xadd.Val())
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "1").Err())
	_, err := conn.Do(ctx, "EXEC").Result()
	require.True(t, redis.IsExecAbortError(err), "%v", err)

	got := queuedErr(err, xadd)
	assert.Equal(t, KindOOM, Classify(got), "%v", got)
	assert.True(t, strings.HasPrefix(got.Error(), "OOM "), got.Error())
	assert.NotContains(t, got.Error(), "EXECABORT")
	assert.True(t, redis.IsExecAbortError(got), "it unwraps to the EXECABORT")

	// A refusal as the commands were queued is still the command's own.
	require.NoError(t, conn.Do(ctx, "MULTI").Err())
	queued := conn.Do(ctx, "XADD", "s", "*", "f", "v")
	require.True(t, redis.IsOOMError(queued.Err()), "%v", queued.Err())
	_, err = conn.Do(ctx, "EXEC").Result()
	require.True(t, redis.IsExecAbortError(err), "%v", err)
	assert.Equal(t, queued.Err(), queuedErr(err, queued))
}
