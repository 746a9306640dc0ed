package postgrescopyexporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.uber.org/zap/zapcore"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// TestRedisDeletedStreamLossIsCounted: 1,000 requests acknowledged and
// waiting in Redis (PostgreSQL stopped), then the stream key is deleted
// while its epoch marker survives (a DEL by hand, an eviction). The loss
// must be reported once, with exactly the entries missing from PostgreSQL
// once it is back, and what is acknowledged afterwards must all be stored.
func TestRedisDeletedStreamLossIsCounted(t *testing.T) {
	shortStats(t)
	srv := pgtest.StartTLSServer(t)
	rs := redistest.Start(t, "")
	cfg := tlsExporterConfig(t, srv, "pgct-del")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
	te, tel, logs := startObservedTraces(t, cfg)
	ctx := context.Background()
	pool := srv.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	stored := func() int64 { n, _ := countSpans(t, q, "otel"); return n }
	req := 0
	send := func(n int) {
		for range n {
			for te.ConsumeTraces(ctx, uniqueTraces(req, 1)) != nil {
				time.Sleep(20 * time.Millisecond) // the first calls after a loss may meet a dead connection
			}
			req++
		}
	}
	send(10)
	require.Eventually(t, func() bool { return stored() == 10 }, 20*time.Second, 50*time.Millisecond)

	srv.Stop(t)
	send(1000)
	keys := coord.KeysFor("pgct-del", "traces")
	admin := redistest.Client(t, rs)
	require.Eventually(t, func() bool { return gaugeWhere(tel, "otelcol_postgrescopy_redis_stream_entries", "traces") == 1000 },
		10*time.Second, 20*time.Millisecond, "the backlog shows before the loss")
	require.NoError(t, admin.Del(ctx, keys.Stream).Err())
	send(5)
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("Redis lost entries of a stream").Len() > 0 },
		10*time.Second, 20*time.Millisecond, "the loss is not reported")

	srv.Start(t)
	require.Eventually(t, func() bool { return gaugeWhere(tel, "otelcol_postgrescopy_redis_stream_entries", "traces") == 0 },
		30*time.Second, 50*time.Millisecond, "what was added after the loss is flushed")
	require.Eventually(t, func() bool { return stored() == 15 }, 20*time.Second, 50*time.Millisecond)
	total, distinct := countSpans(t, q, "otel")
	missing := int64(req) - distinct
	assert.Equal(t, total, distinct, "a span stored twice")
	assert.EqualValues(t, 1000, missing)
	time.Sleep(5 * statsEvery) // reported once, not at every check
	said := logs.FilterMessageSnippet("Redis lost entries of a stream").All()
	require.Len(t, said, 1, "one loss, one error")
	assert.Equal(t, zapcore.ErrorLevel, said[0].Level)
	assert.Equal(t, missing, said[0].ContextMap()["lost_entries"], "the entries reported lost, against those missing from PostgreSQL")
	assert.Equal(t, missing, counterWhere(t, tel, "otelcol_postgrescopy_redis_lost_entries", "signal", "traces"))
	assert.EqualValues(t, 1, counterWhere(t, tel, "otelcol_postgrescopy_redis_data_loss", "signal", "traces"))
	assert.Zero(t, logs.FilterMessageSnippet("Redis lost the stream and its consumer group").Len(), "the epoch survived: no estimate")
}
