package coord

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// stallProxy forwards to target until stall is called; from then on it keeps
// every connection open but forwards nothing: a half-open peer.
type stallProxy struct {
	ln      net.Listener
	stalled atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
}

func startStallProxy(t *testing.T, target string) *stallProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &stallProxy{ln: ln}
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				dst.Close()
				return
			}
			if p.stalled.Load() {
				// Swallow it, as a peer that vanished without a FIN would.
				_, _ = io.Copy(io.Discard, src)
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Add(2)
			go pipe(s, c)
			go pipe(c, s)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// TestReadsFailInBoundedTimeOnHalfOpenConnection: a connection whose peer
// stops answering must fail the read, not stop the flush worker for good.
func TestReadsFailInBoundedTimeOnHalfOpenConnection(t *testing.T) {
	s, _ := testStream(t, Bounds{})
	ctx := context.Background()
	_, err := s.AddEntry(ctx, "k", "f1", payloadOf(100, 1), 1)
	require.NoError(t, err)
	p := startStallProxy(t, redisAddr())
	// One connection per client, established before the stall, so that each
	// read below goes out on a live connection whose peer then goes silent.
	client := func() *redis.Client {
		rdb := redis.NewClient(&redis.Options{
			Addr: p.ln.Addr().String(), ContextTimeoutEnabled: true, MaxRetries: -1,
			PoolSize: 1, ReadTimeout: time.Second, WriteTimeout: time.Second,
		})
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

	p.stalled.Store(true)
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
