package postgrescopyexporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/coord"
)

// A worker holding entries while PostgreSQL is busy waits for more until the
// stream has been quiet for a tenth of max_wait; when the writes in flight
// drop below idleWrites during that wait, it flushes at once instead of at its
// end. Real Redis; no PostgreSQL (next only reads the stream).
func TestFlusherNextStopsWaitingWhenPostgresGoesIdle(t *testing.T) {
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	keys := coord.KeysFor(prefix, "traces")
	rc := defaultRedisConfig()
	rc.MaxWait = 5 * time.Second // quiet after 500ms without a new entry
	f := &flusher{c: &client{}, stream: coord.NewStream(rdb, keys, coord.Bounds{}, "worker"), rc: &rc, lastClaim: time.Now()}
	require.NoError(t, f.stream.EnsureGroup(ctx))
	producer := coord.NewStream(rdb, keys, coord.Bounds{}, "producer")
	add := func() {
		_, err := producer.Add(ctx, []byte("an entry"), 10)
		require.NoError(t, err)
	}

	// PostgreSQL stays busy: the worker waits out the quiet period.
	f.c.writing.Store(idleWrites)
	add()
	begin := time.Now()
	entries, err := f.next(ctx)
	waited := time.Since(begin)
	require.NoError(t, err)
	assert.Len(t, entries, 1)
	assert.GreaterOrEqual(t, waited, 450*time.Millisecond, "a busy PostgreSQL lets the batch fill until the stream is quiet")
	assert.Less(t, waited, 2*time.Second, "a quiet stream ends the wait long before max_wait")
	require.NoError(t, f.stream.Ack(ctx, entries))

	// PostgreSQL becomes idle 100ms into the wait: the worker flushes then.
	add()
	idle := time.AfterFunc(100*time.Millisecond, func() { f.c.writing.Store(0) })
	defer idle.Stop()
	begin = time.Now()
	entries, err = f.next(ctx)
	waited = time.Since(begin)
	require.NoError(t, err)
	assert.Len(t, entries, 1)
	assert.GreaterOrEqual(t, waited, 100*time.Millisecond, "nothing ends the wait while PostgreSQL is busy and the stream not yet quiet")
	assert.Less(t, waited, 400*time.Millisecond, "the wait ends within a poll (max_wait/50) of PostgreSQL going idle, not at the end of the quiet period")
	require.NoError(t, f.stream.Ack(ctx, entries))
}
