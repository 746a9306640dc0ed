package coord

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/tcpproxy"
)

// TestStatsCountsBacklogWithoutGroup stands for a Redis that restarted empty
// while producers kept adding: the stream exists, the group does not. The
// backlog must still show.
func TestStatsCountsBacklogWithoutGroup(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	require.NoError(t, rdb.Del(ctx, s.Keys().Stream, s.Keys().Bytes).Err())
	var want int64
	for i := 0; i < 5; i++ {
		p := payloadOf(1000+i, byte(i))
		_, err := s.AddEntry(ctx, "k", "f1", p, 1)
		require.NoError(t, err)
		want += int64(len(p))
	}
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.EqualValues(t, 5, st.Entries)
	assert.Equal(t, want, st.Bytes)
	assert.Zero(t, st.Pending)
	assert.True(t, st.GroupMissing)

	_, err = s.ReadNew(ctx, 10, 10*time.Millisecond)
	require.Error(t, err)
	assert.True(t, IsNoGroup(err), "%v", err)
}

func TestEnsureKeepsEpochUntilRedisLosesIt(t *testing.T) {
	s, rdb := testStream(t, Bounds{})
	ctx := context.Background()
	e1, err := s.Ensure(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, e1)
	e2, err := s.Ensure(ctx)
	require.NoError(t, err)
	assert.Equal(t, e1, e2, "an existing epoch is kept")
	st, err := s.Stats(ctx)
	require.NoError(t, err)
	assert.Equal(t, e1, st.Epoch)

	require.NoError(t, rdb.Del(ctx, s.Keys().Stream, s.Keys().Epoch).Err())
	st, err = s.Stats(ctx)
	require.NoError(t, err)
	assert.Empty(t, st.Epoch)
	e3, err := s.Ensure(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, e1, e3, "a lost epoch is replaced by a new one")
}

// TestEntryKeyIsKept: the key assigned before the XADD comes back with the
// entry; entries without one read an empty key.
func TestEntryKeyIsKept(t *testing.T) {
	s, _ := testStream(t, Bounds{})
	ctx := context.Background()
	_, err := s.AddEntry(ctx, "0123456789abcdef0123456789abcdef", "f1", payloadOf(10, 1), 1)
	require.NoError(t, err)
	_, err = s.AddEntry(ctx, "", "f1", payloadOf(10, 1), 1)
	require.NoError(t, err)
	entries, err := s.ReadNew(ctx, 10, 100*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, "0123456789abcdef0123456789abcdef", entries[0].Key)
	assert.Equal(t, "f1", entries[0].Format)
	assert.Empty(t, entries[1].Key)
}

// TestReadsFailInBoundedTimeOnHalfOpenConnection: a connection whose peer
// stops answering must fail the read, not stop the flush worker for good.
func TestReadsFailInBoundedTimeOnHalfOpenConnection(t *testing.T) {
	s, _ := testStream(t, Bounds{})
	ctx := context.Background()
	_, err := s.AddEntry(ctx, "k", "f1", payloadOf(100, 1), 1)
	require.NoError(t, err)
	p := tcpproxy.Start(t, "127.0.0.1:0", redistest.Addr())
	// One connection per client, established before the stall, so that each
	// read below goes out on a live connection whose peer then goes silent.
	client := func() *redis.Client {
		o := redistest.Options()
		o.Addr, o.ContextTimeoutEnabled, o.MaxRetries = p.Addr(), true, -1
		o.PoolSize, o.ReadTimeout, o.WriteTimeout = 1, time.Second, time.Second
		rdb := redis.NewClient(o)
		t.Cleanup(func() { rdb.Close() })
		require.NoError(t, rdb.Ping(ctx).Err())
		return rdb
	}
	pendingVia := NewStream(client(), s.Keys(), Bounds{}, "test")
	newVia := NewStream(client(), s.Keys(), Bounds{}, "other")
	// Deliver the entry to this consumer, so a pending read has work.
	entries, err := pendingVia.ReadNew(ctx, 10, 10*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 1)

	p.Stall()
	type result struct {
		what string
		err  error
		took time.Duration
	}
	results := make(chan result, 2)
	go func() {
		start := time.Now()
		_, err := pendingVia.ReadOwnPending(ctx, 10)
		results <- result{"ReadOwnPending", err, time.Since(start)}
	}()
	go func() {
		start := time.Now()
		_, err := newVia.ReadNew(ctx, 10, 100*time.Millisecond)
		results <- result{"ReadNew", err, time.Since(start)}
	}()
	guard := time.After(20 * time.Second)
	for i := 0; i < 2; i++ {
		select {
		case r := <-results:
			t.Logf("%s: %v after %s", r.what, r.err, r.took)
			assert.Error(t, r.err, r.what)
			assert.Less(t, r.took, 15*time.Second, r.what)
		case <-guard:
			t.Fatal("a read on a half-open connection did not return within 20s")
		}
	}
}
