package postgrescopyexporter

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.uber.org/zap/zapcore"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// usedMemory is a server's used_memory (INFO memory).
func usedMemory(t *testing.T, rs *redisserver.Server) int64 {
	info, err := redistest.Client(t, rs).Info(context.Background(), "memory").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatal("no used_memory in INFO memory")
	return 0
}

// TestRedisOutOfMemoryIsNamed: a Redis at maxmemory with noeviction refuses
// the XADD inside the MULTI, and EXEC answers only EXECABORT. The client
// must see what happened and the fix (Redis out of memory, its maxmemory
// and policy), retryable; the Collector's log line must not advise a
// sending_queue (Redis is the queue); once the flush catches up requests
// are accepted again, and every acknowledged span is stored once.
func TestRedisOutOfMemoryIsNamed(t *testing.T) {
	pool := pgtest.Pool(t)
	rs := redistest.Start(t, "")
	cfg, schemaName := testConfig(t)
	cfg = withRedis(cfg, "pgct-oom", "oom")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
	te, _, logs := startObservedTraces(t, cfg)
	ctx := context.Background()

	// PostgreSQL holds the writes: the backlog grows until Redis is full.
	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = hold.Exec(ctx, `LOCK TABLE "`+schemaName+`".spans_rows IN EXCLUSIVE MODE`)
	require.NoError(t, err)
	limit := usedMemory(t, rs) + 1<<20
	require.NoError(t, redistest.Client(t, rs).ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err())
	require.NoError(t, redistest.Client(t, rs).ConfigSet(ctx, "maxmemory-policy", "noeviction").Err())

	acked := 0
	var refused error
	for req := 0; req < 5000 && refused == nil; req++ {
		if refused = te.ConsumeTraces(ctx, uniqueTraces(req, 20)); refused == nil {
			acked++
		}
	}
	require.Error(t, refused, "1MB of headroom must fill")
	t.Logf("refused after %d requests: %v", acked, refused)
	assert.Contains(t, refused.Error(), "Redis is out of memory")
	assert.Contains(t, refused.Error(), "maxmemory "+strconv.FormatInt(limit, 10)+" bytes, policy noeviction")
	assert.Contains(t, refused.Error(), "raise maxmemory or let the flush catch up")
	assert.NotContains(t, refused.Error(), "EXECABORT", "the real refusal, not the transaction's")
	assert.False(t, consumererror.IsPermanent(refused), "retryable: the flush frees memory")
	rejected := logs.FilterMessageSnippet("Exporting failed").All()
	require.NotEmpty(t, rejected)
	for _, e := range rejected {
		assert.NotContains(t, e.Message, "sending_queue", "Redis is the queue")
		assert.Contains(t, e.ContextMap()["error"], "Redis is out of memory")
	}

	require.NoError(t, hold.Rollback(ctx))
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	require.Eventually(t, func() bool { n, _ := countSpans(t, q, schemaName); return n == int64(20*acked) },
		60*time.Second, 100*time.Millisecond, "the backlog is flushed")
	require.Eventually(t, func() bool { return te.ConsumeTraces(ctx, uniqueTraces(9999, 20)) == nil },
		10*time.Second, 50*time.Millisecond, "requests are accepted again once the flush caught up")
	require.Eventually(t, func() bool { n, _ := countSpans(t, q, schemaName); return n == int64(20*acked+20) },
		20*time.Second, 50*time.Millisecond)
	total, distinct := countSpans(t, q, schemaName)
	assert.Equal(t, total, distinct, "a span stored twice")
}

// TestRedisEvictingPolicyRefusedAtStart: with an allkeys-* maxmemory-policy
// Redis deletes whole streams of acknowledged requests when memory runs
// short, so the start is refused, naming the policy and the fix. A
// volatile-* policy evicts only keys with a TTL (the exporter sets none)
// and starts; a policy turned to allkeys-* while running is an Error.
func TestRedisEvictingPolicyRefusedAtStart(t *testing.T) {
	pgtest.Pool(t)
	shortStats(t)
	rs := redistest.Start(t, "")
	ctx := context.Background()
	admin := redistest.Client(t, rs)
	cfg, _ := testConfig(t)
	cfg = withRedis(cfg, "pgct-evict", "evict")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	err := startFails(t, cfg)
	t.Log(err)
	assert.Contains(t, err.Error(), "maxmemory-policy allkeys-lru")
	assert.Contains(t, err.Error(), "set maxmemory-policy noeviction")
	assert.Contains(t, err.Error(), rs.Addr())

	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "volatile-lru").Err())
	_, _, logs := startObservedTraces(t, cfg)
	require.NoError(t, admin.ConfigSet(ctx, "maxmemory-policy", "allkeys-lfu").Err())
	require.Eventually(t, func() bool {
		return logs.FilterMessageSnippet("maxmemory-policy changed to one that evicts keys").Len() == 1
	}, 10*time.Second, 20*time.Millisecond, "the periodic checks do not notice the evicting policy")
	said := logs.FilterMessageSnippet("maxmemory-policy changed").All()[0]
	assert.Equal(t, zapcore.ErrorLevel, said.Level)
	assert.Equal(t, "allkeys-lfu", said.ContextMap()["maxmemory_policy"])
	assert.Equal(t, "volatile-lru", said.ContextMap()["was"])
	time.Sleep(5 * statsEvery)
	assert.Equal(t, 1, logs.FilterMessageSnippet("maxmemory-policy changed").Len(), "said once")
}
