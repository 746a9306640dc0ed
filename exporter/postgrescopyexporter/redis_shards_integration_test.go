package postgrescopyexporter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// leaveEntries adds requests reqs to shard i of traces as a replica that
// died with them pending would have left them: each under its own key.
func leaveEntries(t *testing.T, rdb redis.UniversalClient, prefix string, shard int, reqs []int) {
	t.Helper()
	ctx := context.Background()
	s := coord.NewStream(rdb, coord.ShardKeys(prefix, "traces", shard), coord.Bounds{}, "dead-replica")
	require.NoError(t, s.EnsureGroup(ctx))
	for _, req := range reqs {
		var b rows.Batch
		b.AddTraces(uniqueTraces(req, 10))
		p, err := entry.Append(nil, &b, false)
		require.NoError(t, err)
		_, err = s.AddEntry(ctx, fmt.Sprintf("left-%d", req), entry.Format, p, 10)
		require.NoError(t, err)
	}
}

// storedOnce counts, for requests reqs of spans spans each, the spans
// stored exactly once, missing, and stored more than once.
func storedOnce(t *testing.T, pool *pgxpool.Pool, schemaName string, reqs []int, spans int) (once, missing, dup int) {
	t.Helper()
	counts := map[int64]int{}
	rows, err := pool.Query(context.Background(), `SELECT span_id, count(*) FROM "`+schemaName+`".spans GROUP BY span_id`)
	require.NoError(t, err)
	for rows.Next() {
		var id, n int64
		require.NoError(t, rows.Scan(&id, &n))
		counts[id] = int(n)
	}
	require.NoError(t, rows.Err())
	for _, req := range reqs {
		for i := 0; i < spans; i++ {
			switch n := counts[spanKey(req, i)]; {
			case n == 1:
				once++
			case n == 0:
				missing++
			default:
				dup++
			}
		}
	}
	return once, missing, dup
}

func reqRange(from, n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = from + i
	}
	return out
}

// shardsLen sums the stream lengths of traces' first n shards.
func shardsLen(t *testing.T, rdb redis.UniversalClient, prefix string, n int) int64 {
	var sum int64
	for i := range n {
		l, err := rdb.XLen(context.Background(), coord.ShardKeys(prefix, "traces", i).Stream).Result()
		if err != nil && err != redis.Nil {
			require.NoError(t, err)
		}
		sum += l
	}
	return sum
}

// TestRedisShardsChangedLoseNothing: redis::shards changed between runs and
// on a running system. Entries left on shards a smaller redis::shards no
// longer adds to are drained (the registry of shards ever used names them),
// and a replica that keeps a smaller redis::shards drains the shards another
// replica's larger one adds to. Each request is stored exactly once.
func TestRedisShardsChangedLoseNothing(t *testing.T) {
	shortStats(t)
	cfg0, schemaName := testConfig(t)
	pool := pgtest.Pool(t)
	rdb, prefix := testRedis(t)
	t.Cleanup(func() {
		for i := range 8 {
			k := coord.ShardKeys(prefix, "traces", i)
			rdb.Del(context.Background(), k.Stream, k.Bytes, k.Count, k.Epoch)
		}
		rdb.Del(context.Background(), coord.ShardsKey(prefix))
	})
	ctx := context.Background()
	config := func(shards int, consumer string) *Config {
		cfg := *cfg0
		cfg = *withRedis(&cfg, prefix, consumer)
		cfg.Redis.Get().Shards = shards
		return &cfg
	}

	// Run 1: four shards; every shard gets requests.
	a, _ := startTraces(t, config(4, "a"))
	run1 := reqRange(1, 40)
	for _, req := range run1 {
		require.NoError(t, a.ConsumeTraces(ctx, uniqueTraces(req, 10)))
	}
	for i := range 4 {
		// The shard's epoch is written with its group: each shard was used.
		require.NoError(t, rdb.Get(ctx, coord.ShardKeys(prefix, "traces", i).Epoch).Err(), "shard %d", i)
	}
	require.Eventually(t, func() bool { _, missing, _ := storedOnce(t, pool, schemaName, run1, 10); return missing == 0 },
		20*time.Second, 50*time.Millisecond)
	require.NoError(t, a.Shutdown(ctx))
	// What a replica that died with entries pending on shards 1..3 left.
	left := reqRange(1000, 30)
	for i, req := range left {
		leaveEntries(t, rdb, prefix, 1+i%3, []int{req})
	}

	// Run 2: one shard. Shards 1..3 are drained all the same.
	b, _, logs := startObservedTraces(t, config(1, "b"))
	said := logs.FilterMessageSnippet("coordinating through Redis").All()
	require.Len(t, said, 1)
	assert.EqualValues(t, 3, said[0].ContextMap()["shards_drained"])
	run2 := reqRange(2000, 20)
	for _, req := range run2 {
		require.NoError(t, b.ConsumeTraces(ctx, uniqueTraces(req, 10)))
	}
	require.Eventually(t, func() bool { return shardsLen(t, rdb, prefix, 4) == 0 }, 20*time.Second, 50*time.Millisecond,
		"the shards no longer added to are not drained")

	// On a running system: c starts with six shards while b keeps one; b
	// covers shards 4 and 5 once its maintenance reads the registry.
	c, _ := startTraces(t, config(6, "c"))
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("Redis names more shards").Len() == 1 },
		10*time.Second, 50*time.Millisecond, "b does not notice the shards c added")
	run3 := reqRange(3000, 60)
	for _, req := range run3 {
		require.NoError(t, c.ConsumeTraces(ctx, uniqueTraces(req, 10)))
	}
	require.NoError(t, c.Shutdown(ctx))
	// c is gone: what it would have left on shard 5 is b's to drain.
	late := reqRange(4000, 10)
	leaveEntries(t, rdb, prefix, 5, late)
	require.Eventually(t, func() bool { return shardsLen(t, rdb, prefix, 6) == 0 }, 20*time.Second, 50*time.Millisecond,
		"b does not drain the shards c used")

	all := append(append(append(append(run1, left...), run2...), run3...), late...)
	once, missing, dup := storedOnce(t, pool, schemaName, all, 10)
	t.Logf("shards 4 → 1 → 6 (alongside 1): %d spans stored once, %d missing, %d duplicated", once, missing, dup)
	assert.Equal(t, len(all)*10, once)
	assert.Zero(t, missing)
	assert.Zero(t, dup)
}
