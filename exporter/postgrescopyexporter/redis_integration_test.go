package postgrescopyexporter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// redisAddr is the test Redis as redis::endpoint takes it (host:port or a
// URL with credentials).
func redisAddr() string { return redistest.Endpoint() }

// testRedis returns a client and a key prefix unique to the test, whose keys
// are deleted when the test ends.
func testRedis(t *testing.T) (*redis.Client, string) {
	rdb := redis.NewClient(redistest.Options())
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		rdb.Close()
		pgtest.Unavailable(t, "Redis at %s does not answer (make services): %v", redistest.Redacted(), err)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "pgct-" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		// Every key of the prefix: each signal's shards and the shards'
		// registry, not only shard 0's stream keys.
		ctx := context.Background()
		keys, err := rdb.Keys(ctx, "{"+prefix+":*").Result()
		if err == nil && len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
		rdb.Close()
	})
	return rdb, prefix
}

func withRedis(cfg *Config, prefix, consumer string) *Config {
	rc := defaultRedisConfig()
	rc.Endpoint = configopaque.String(redisAddr())
	rc.KeyPrefix = prefix
	rc.Consumer = consumer
	rc.Workers = 1
	rc.MaxWait = 50 * time.Millisecond
	rc.ClaimAfter = time.Second
	cfg.Redis = configoptional.Some(rc)
	return cfg
}

// startTraces creates and starts a traces exporter with its own telemetry.
func startTraces(t *testing.T, cfg *Config) (exporter.Traces, *componenttest.Telemetry) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	set := exportertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	te, err := NewFactory().CreateTraces(context.Background(), set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	return te, tel
}

func counterSum(t *testing.T, tel *componenttest.Telemetry, name string) int64 {
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		n += dp.Value
	}
	return n
}

// counterWhere sums a counter's points whose attribute key is value.
func counterWhere(t *testing.T, tel *componenttest.Telemetry, name, key, value string) int64 {
	m, err := tel.GetMetric(name)
	if err != nil {
		return 0
	}
	var n int64
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		if v, ok := dp.Attributes.Value(attribute.Key(key)); ok && v.AsString() == value {
			n += dp.Value
		}
	}
	return n
}

// uniqueTraces makes spans whose span ids encode (request, index), so any
// duplicate or loss shows in a distinct count.
func uniqueTraces(req, spans int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "redis-test")
	ss := rs.ScopeSpans().AppendEmpty()
	for i := 0; i < spans; i++ {
		s := ss.Spans().AppendEmpty()
		s.SetName("op")
		s.SetTraceID(pcommon.TraceID{1, byte(req >> 16), byte(req >> 8), byte(req)})
		s.SetSpanID(pcommon.SpanID{2, byte(req >> 16), byte(req >> 8), byte(req), byte(i >> 8), byte(i)})
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(time.Now()))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(time.Now()))
		s.Attributes().PutStr("payload", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	}
	return td
}

// countSpans returns all and distinct span ids in the schema's spans table.
func countSpans(t *testing.T, q func(ctx context.Context, sql string, dst ...any) error, schemaName string) (int64, int64) {
	var total, distinct int64
	err := q(context.Background(), `SELECT count(*), count(DISTINCT span_id) FROM "`+schemaName+`".spans`, &total, &distinct)
	if err != nil {
		return -1, -1
	}
	return total, distinct
}

func streamLen(t *testing.T, rdb *redis.Client, prefix string) int64 {
	n, err := rdb.XLen(context.Background(), coord.KeysFor(prefix, "traces").Stream).Result()
	require.NoError(t, err)
	return n
}

func TestRedisTwoReplicasShareOneGroupAndBothFlush(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	a := withRedis(cfg, prefix, "replica-a")
	bcfg := *cfg
	b := withRedis(&bcfg, prefix, "replica-b")
	teA, telA := startTraces(t, a)
	teB, telB := startTraces(t, b)

	const requests, perReq = 200, 10
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := g; r < requests; r += 4 {
				te := teA
				if r%2 == 1 {
					te = teB
				}
				require.NoError(t, te.ConsumeTraces(context.Background(), uniqueTraces(r, perReq)))
				time.Sleep(5 * time.Millisecond) // spread the load over several batches
			}
		}()
	}
	wg.Wait()

	pool := pgtest.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	require.Eventually(t, func() bool {
		total, _ := countSpans(t, q, schemaName)
		return total == requests*perReq && streamLen(t, rdb, prefix) == 0
	}, 30*time.Second, 50*time.Millisecond)
	total, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, requests*perReq, total)
	assert.EqualValues(t, requests*perReq, distinct)
	assert.Positive(t, counterSum(t, telA, "otelcol_postgrescopy_batches"), "replica a flushed")
	assert.Positive(t, counterSum(t, telB, "otelcol_postgrescopy_batches"), "replica b flushed")
	assert.EqualValues(t, requests, counterSum(t, telA, "otelcol_postgrescopy_redis_entries_added")+
		counterSum(t, telB, "otelcol_postgrescopy_redis_entries_added"))
}

func TestRedisDeadConsumerEntriesAreClaimedWithoutDuplicates(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	pool := pgtest.Pool(t)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), schemaName)
	conn.Release()
	require.NoError(t, err)

	keys := coord.KeysFor(prefix, "traces")
	dead := coord.NewStream(rdb, keys, coord.Bounds{}, "dead-replica")
	require.NoError(t, dead.EnsureGroup(ctx))
	const perReq = 7
	for r := 0; r < 10; r++ {
		var b rows.Batch
		b.SetLayout(tables.DefaultLayout())
		b.AddTraces(uniqueTraces(r, perReq))
		payload, err := entry.Append(nil, &b, false)
		require.NoError(t, err)
		_, err = dead.AddEntry(ctx, fmt.Sprintf("request-%d", r), entry.Format, payload, perReq)
		require.NoError(t, err)
	}
	entries, err := dead.ReadNew(ctx, 100, 100*time.Millisecond)
	require.NoError(t, err)
	require.Len(t, entries, 10)

	// The dead replica committed the first six entries (rows and ledger in
	// one transaction) and died before XACK; the last four it only read.
	var b rows.Batch
	var ids []string
	for _, e := range entries[:6] {
		require.NoError(t, entry.AddTo(&b, e.Data))
		ids = append(ids, e.Key)
	}
	_, err = pgwrite.NewWriter(pool, schemaName).WriteLedgered(ctx, &b, &pgwrite.Ledger{Stream: keys.Stream, IDs: ids})
	require.NoError(t, err)

	_, tel := startTraces(t, withRedis(cfg, prefix, "survivor"))
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	total, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, 10*perReq, total, "every span once: the claimed, committed entries were not rewritten")
	assert.EqualValues(t, 10*perReq, distinct)
	assert.EqualValues(t, 10, counterSum(t, tel, "otelcol_postgrescopy_redis_claimed_entries"))
	assert.EqualValues(t, 6, counterSum(t, tel, "otelcol_postgrescopy_ledger_hits"))
	pending, err := rdb.XPending(ctx, keys.Stream, keys.Group).Result()
	require.NoError(t, err)
	assert.Zero(t, pending.Count)
}

// tlsExporterConfig points a Redis-mode config at a throwaway server that a
// test may stop and start.
func tlsExporterConfig(t *testing.T, srv *pgtest.TLSServer, prefix string) *Config {
	cfg := defaultConfig()
	cfg.Endpoint = configopaque.String(srv.URL("verify-full") + "&connect_timeout=2")
	cfg.Password = configopaque.String(srv.Password)
	cfg.Schema = "otel"
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	cfg.RetryConfig.Enabled = false
	return withRedis(cfg, prefix, "restart-test")
}

func TestRedisPostgresRestartMidLoadLosesNothing(t *testing.T) {
	srv := pgtest.StartTLSServer(t)
	rdb, prefix := testRedis(t)
	te, _ := startTraces(t, tlsExporterConfig(t, srv, prefix))

	var acked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := g; ; r += 3 {
				select {
				case <-stop:
					return
				default:
				}
				if te.ConsumeTraces(context.Background(), uniqueTraces(r, 20)) == nil {
					acked.Add(20)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(700 * time.Millisecond)
	srv.Stop(t)
	time.Sleep(1500 * time.Millisecond)
	srv.Start(t)
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()

	pool := srv.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	require.Eventually(t, func() bool {
		total, _ := countSpans(t, q, "otel")
		return total == acked.Load() && streamLen(t, rdb, prefix) == 0
	}, 60*time.Second, 100*time.Millisecond, "acknowledged %d spans", acked.Load())
	total, distinct := countSpans(t, q, "otel")
	assert.Equal(t, acked.Load(), total)
	assert.Equal(t, acked.Load(), distinct)
	assert.Greater(t, acked.Load(), int64(1000))
}

func TestRedisBoundedWhilePostgresIsDownThenDrains(t *testing.T) {
	srv := pgtest.StartTLSServer(t)
	rdb, prefix := testRedis(t)
	cfg := tlsExporterConfig(t, srv, prefix)
	const bound = 64 << 10
	cfg.Redis.Get().MaxPendingBytes = bound
	te, tel := startTraces(t, cfg)
	srv.Stop(t)

	var acked int64
	refused := 0
	for r := 0; r < 200; r++ {
		err := te.ConsumeTraces(context.Background(), uniqueTraces(r, 20))
		if err == nil {
			acked += 20
			continue
		}
		require.True(t, errors.Is(err, coord.ErrBackpressure), "refusal is backpressure: %v", err)
		refused++
	}
	require.Positive(t, refused, "the stream refused once at its bound")
	used, err := rdb.Get(context.Background(), coord.KeysFor(prefix, "traces").Bytes).Int64()
	require.NoError(t, err)
	assert.LessOrEqual(t, used, int64(bound), "Redis holds no more than max_pending_bytes")
	assert.EqualValues(t, refused, counterSum(t, tel, "otelcol_postgrescopy_redis_backpressure"))
	entries := streamLen(t, rdb, prefix)
	assert.EqualValues(t, acked/20, entries, "nothing trimmed: every acknowledged request is in the stream")

	srv.Start(t)
	pool := srv.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	require.Eventually(t, func() bool {
		total, _ := countSpans(t, q, "otel")
		return total == acked && streamLen(t, rdb, prefix) == 0
	}, 60*time.Second, 100*time.Millisecond)
	total, distinct := countSpans(t, q, "otel")
	assert.Equal(t, acked, total)
	assert.Equal(t, acked, distinct)
	used, err = rdb.Get(context.Background(), coord.KeysFor(prefix, "traces").Bytes).Int64()
	require.NoError(t, err)
	assert.Zero(t, used, "the byte counter returns to zero once drained")
}

// Shutdown honours its context: a flush write blocked in PostgreSQL (here on
// a lock) is cancelled when the Collector's shutdown deadline passes, rather
// than outliving it; its entry stays pending for another replica.
func TestRedisShutdownCancelsWritesAtItsDeadline(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	cfg = withRedis(cfg, prefix, "shutdown")
	cfg.TimeoutConfig.Timeout = time.Minute
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))

	pool := pgtest.Pool(t)
	lock, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE "`+schemaName+`".spans_rows IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	require.NoError(t, te.ConsumeTraces(ctx, uniqueTraces(1, 5)))
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND (query LIKE 'COPY %spans%' OR query LIKE 'LOCK TABLE ONLY %spans%')`).Scan(&n))
		return n > 0
	}, 10*time.Second, 20*time.Millisecond, "the flush write (its COPY, or the lock it takes before copying into a partition) waits on the lock")

	done := make(chan error, 1)
	began := time.Now()
	go func() {
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		done <- te.Shutdown(sctx)
	}()
	select {
	case err := <-done:
		assert.Less(t, time.Since(began), 3*time.Second)
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Shutdown says its deadline passed")
	case <-time.After(5 * time.Second):
		_ = lock.Rollback(ctx) // let the write finish, and the test end
		<-done
		t.Fatal("Shutdown outlived its deadline by more than 5s: the write in flight was not cancelled")
	}
	assert.EqualValues(t, 1, streamLen(t, rdb, prefix), "the entry stays for another replica")
}
