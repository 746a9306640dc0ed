package postgrescopyexporter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// startObservedTraces is startTraces with the exporter's logs observed.
func startObservedTraces(t *testing.T, cfg *Config) (exporter.Traces, *componenttest.Telemetry, *observer.ObservedLogs) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	core, logs := observer.New(zapcore.DebugLevel)
	set, _ := observedSettings()
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = zap.New(core)
	te, err := NewFactory().CreateTraces(context.Background(), set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	return te, tel, logs
}

// gaugeWhere returns a gauge's value for signal, or -1 without one.
func gaugeWhere(tel *componenttest.Telemetry, name, signal string) int64 {
	m, err := tel.GetMetric(name)
	if err != nil {
		return -1
	}
	for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
		if v, ok := dp.Attributes.Value("signal"); ok && v.AsString() == signal {
			return dp.Value
		}
	}
	return -1
}

func shortStats(t *testing.T) {
	old := statsEvery
	statsEvery = 100 * time.Millisecond
	t.Cleanup(func() { statsEvery = old })
}

// TestRedisRestartedEmptyRecoversAndReportsTheLoss: Redis killed and
// restarted without persistence while PostgreSQL is down. The requests Redis
// held are lost (the README says this setup risks it): that must be reported
// with the backlog last seen, and every request acknowledged afterwards must
// reach PostgreSQL, with the backlog gauges telling the truth meanwhile.
func TestRedisRestartedEmptyRecoversAndReportsTheLoss(t *testing.T) {
	shortStats(t)
	srv := pgtest.StartTLSServer(t)
	rs := redistest.Start(t, "")
	cfg := tlsExporterConfig(t, srv, "pgct-lost")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
	te, tel, logs := startObservedTraces(t, cfg)
	ctx := context.Background()
	pool := srv.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	stored := func() int64 { n, _ := countSpans(t, q, "otel"); return n }

	req := 0
	send := func(n int) {
		for i := 0; i < n; i++ {
			require.NoError(t, te.ConsumeTraces(ctx, uniqueTraces(req, 10)))
			req++
		}
	}
	send(5)
	require.Eventually(t, func() bool { return stored() == 50 }, 20*time.Second, 50*time.Millisecond)

	// PostgreSQL down: the next requests wait in Redis.
	srv.Stop(t)
	send(4)
	require.Eventually(t, func() bool { return gaugeWhere(tel, "otelcol_postgrescopy_redis_stream_entries", "traces") == 4 },
		10*time.Second, 50*time.Millisecond, "the backlog shows before the loss")

	rs.Kill()
	redistest.Restart(t, rs)
	// Requests acknowledged after the restart must all be written. The
	// first calls after the restart may meet a dead pooled connection.
	for i := 0; i < 6; {
		if err := te.ConsumeTraces(ctx, uniqueTraces(req, 10)); err != nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		req++
		i++
	}
	require.Eventually(t, func() bool { return gaugeWhere(tel, "otelcol_postgrescopy_redis_stream_entries", "traces") == 6 },
		10*time.Second, 50*time.Millisecond, "the backlog added after the loss shows")
	assert.Positive(t, gaugeWhere(tel, "otelcol_postgrescopy_redis_stream_bytes", "traces"))

	require.Eventually(t, func() bool {
		return counterWhere(t, tel, "otelcol_postgrescopy_redis_data_loss", "signal", "traces") == 1
	},
		10*time.Second, 50*time.Millisecond, "the loss is counted")
	assert.EqualValues(t, 4, counterWhere(t, tel, "otelcol_postgrescopy_redis_lost_entries", "signal", "traces"))
	// Every signal's stream was lost; the traces one held the backlog. The
	// others were empty, and nothing was added to them since: a warning
	// each, no loss counted.
	// Each stream's audit finds its loss on its own tick: the empty ones
	// may say so after the traces one was counted.
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet("Redis lost the stream").Len() >= 3 },
		10*time.Second, 50*time.Millisecond, "every stream's loss is said")
	lost := logs.FilterMessageSnippet("Redis lost the stream").FilterField(zap.String("signal", "traces")).All()
	require.Len(t, lost, 1, "one error per loss")
	assert.Equal(t, 3, logs.FilterMessageSnippet("Redis lost the stream").Len(), "said once per stream")
	for _, sig := range []string{"metrics", "logs"} {
		said := logs.FilterMessageSnippet("Redis lost the stream").FilterField(zap.String("signal", sig)).All()
		require.Len(t, said, 1, sig)
		assert.Equal(t, zapcore.WarnLevel, said[0].Level, "%s: empty, nothing lost", sig)
		assert.Zero(t, counterWhere(t, tel, "otelcol_postgrescopy_redis_data_loss", "signal", sig), sig)
	}
	assert.Equal(t, zapcore.ErrorLevel, lost[0].Level)
	assert.Equal(t, coord.KeysFor("pgct-lost", "traces").Stream, lost[0].ContextMap()["stream"])
	assert.EqualValues(t, 4, lost[0].ContextMap()["last_seen_entries"])
	assert.Positive(t, lost[0].ContextMap()["last_seen_bytes"])

	srv.Start(t)
	require.Eventually(t, func() bool {
		return stored() == 110 && gaugeWhere(tel, "otelcol_postgrescopy_redis_stream_entries", "traces") == 0
	}, 30*time.Second, 50*time.Millisecond, "every request acknowledged after the restart is stored")
	total, distinct := countSpans(t, q, "otel")
	assert.EqualValues(t, 110, total)
	assert.EqualValues(t, 110, distinct)
	assert.EqualValues(t, 1, counterWhere(t, tel, "otelcol_postgrescopy_redis_data_loss", "signal", "traces"), "still one loss")
	// The restarted server has a new run id, but the lost stream was
	// reported as a whole: not again as entries lost in a failover.
	assert.Zero(t, logs.FilterMessageSnippet("Redis lost entries in a failover").Len(), "the loss reported twice")
}

// TestRedisIdenticalRequestsAreTwoRequests: two requests with identical bytes
// (heartbeats without timestamps) are two requests, both stored.
func TestRedisIdenticalRequestsAreTwoRequests(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	te, _ := startTraces(t, withRedis(cfg, prefix, "identical"))
	ctx := context.Background()
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(3, "heartbeat")))
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(3, "heartbeat")))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	assert.EqualValues(t, 6, pgtest.Count(t, pool, schemaName, "spans"))
}

// TestRedisWrongPasswordFailsStart: the start refuses with the fix, and the
// password is nowhere in the error.
func TestRedisWrongPasswordFailsStart(t *testing.T) {
	rs := redistest.Start(t, "right-secret-1")
	cfg, _ := testConfig(t)
	cfg = withRedis(cfg, "pgct-auth", "auth")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
	cfg.Redis.Get().Password = "wrong-secret-2"
	te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), rs.Addr())
	assert.Contains(t, err.Error(), "redis::password")
	assert.Contains(t, err.Error(), "WRONGPASS")
	assert.NotContains(t, err.Error(), "wrong-secret-2")
	assert.NotContains(t, err.Error(), "right-secret-1")
	require.NoError(t, te.Shutdown(context.Background()))
}

// TestRedisMissingPermissionFailsStart: an ACL user that may not XADD is
// refused at start, naming the command.
func TestRedisMissingPermissionFailsStart(t *testing.T) {
	rs := redistest.Start(t, "")
	admin := redistest.Client(t, rs)
	ctx := context.Background()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "noxadd", "on", ">noxadd-pw", "~*", "&*", "+@all", "-xadd").Err())
	t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", "noxadd") })
	cfg, _ := testConfig(t)
	cfg = withRedis(cfg, "pgct-acl", "acl")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
	cfg.Redis.Get().Username = "noxadd"
	cfg.Redis.Get().Password = "noxadd-pw"
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(ctx, componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"noxadd"`)
	assert.Contains(t, err.Error(), "XADD refused")
	assert.Contains(t, err.Error(), "ACL SETUSER noxadd")
	assert.NotContains(t, err.Error(), "XREADGROUP refused", "only what is missing is named")
	assert.NotContains(t, err.Error(), "noxadd-pw")
	require.NoError(t, te.Shutdown(ctx))

	// The same user with every permission starts.
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", "noxadd", "+xadd").Err())
	_, _, _ = startObservedTraces(t, cfg)
}

// TestRedisUnreachableAtStartIsLoggedOnceThroughZap: an unreachable Redis
// does not fail the start; it is logged once, and go-redis's own lines go
// through the Collector's logger, not stderr.
func TestRedisUnreachableAtStartIsLoggedOnceThroughZap(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg = withRedis(cfg, "pgct-down", "down")
	cfg.Redis.Get().Endpoint = configopaque.String(ports.AddrT(t))
	cfg.Redis.Get().Workers = 2
	_, _, logs := startObservedTraces(t, cfg)
	require.Eventually(t, func() bool {
		return logs.FilterField(zap.String("source", "go-redis")).Len() > 0
	}, 20*time.Second, 50*time.Millisecond, "go-redis's lines reach the zap logger")
	line := logs.FilterField(zap.String("source", "go-redis")).All()[0]
	assert.Contains(t, line.Message, "dial")
	assert.Equal(t, 1, logs.FilterMessageSnippet("Redis is not reachable yet").Len())
	for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).All() {
		if _, fromRedis := e.ContextMap()["source"]; !fromRedis {
			assert.True(t, strings.HasPrefix(e.Message, "Redis is not reachable yet"), "no other warning: %s", e.Message)
		}
	}
}

// TestRedisSameKeyAddedTwiceIsWrittenOnce stands for go-redis resending an
// XADD whose reply was lost: one request, two entries with one key.
func TestRedisSameKeyAddedTwiceIsWrittenOnce(t *testing.T) {
	cfg, schemaName := testConfig(t)
	rdb, prefix := testRedis(t)
	ctx := context.Background()
	s := coord.NewStream(rdb, coord.KeysFor(prefix, "traces"), coord.Bounds{}, "producer")
	require.NoError(t, s.EnsureGroup(ctx))
	// A resend carries the same bytes and the same key.
	payloads := map[int][]byte{}
	for _, req := range []int{1, 2} {
		var b rows.Batch
		b.AddTraces(uniqueTraces(req, 10))
		p, err := entry.Append(nil, &b, false)
		require.NoError(t, err)
		payloads[req] = p
	}
	add := func(req int, key string) {
		_, err := s.AddEntry(ctx, key, entry.Format, payloads[req], 10)
		require.NoError(t, err)
	}
	add(1, "key-one")
	add(1, "key-one") // same batch
	add(2, "key-two")
	_, _ = startTraces(t, withRedis(cfg, prefix, "dup"))
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	add(2, "key-two") // after its twin was committed
	require.Eventually(t, func() bool { return streamLen(t, rdb, prefix) == 0 }, 20*time.Second, 50*time.Millisecond)
	pool := pgtest.Pool(t)
	q := func(ctx context.Context, sql string, dst ...any) error { return pool.QueryRow(ctx, sql).Scan(dst...) }
	total, distinct := countSpans(t, q, schemaName)
	assert.EqualValues(t, 20, total)
	assert.EqualValues(t, 20, distinct)
}

// TestRedisDurabilityIsSaidAtStart: in Redis mode Redis holds the only copy of
// an acknowledged request until it is written, so the collector says at start
// what that Redis risks: a Warn for one without persistence, Info for AOF
// fsynced on every write.
func TestRedisDurabilityIsSaidAtStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fsync string // appendfsync with appendonly yes; empty: no AOF
		level zapcore.Level
		want  string
	}{
		{"volatile", "", zapcore.WarnLevel, "volatile"},
		{"aof everysec", "everysec", zapcore.WarnLevel, "aof_everysec"},
		{"aof always", "always", zapcore.InfoLevel, "aof_always"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := redistest.Start(t, "")
			if tc.fsync != "" {
				rdb := redistest.Client(t, rs)
				require.NoError(t, rdb.ConfigSet(context.Background(), "appendonly", "yes").Err())
				require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", tc.fsync).Err())
			}
			cfg, _ := testConfig(t)
			cfg = withRedis(cfg, "pgct-durability", "d")
			cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
			_, _, logs := startObservedTraces(t, cfg)
			said := logs.FilterMessageSnippet("Redis persistence").All()
			require.Len(t, said, 1)
			t.Logf("start-up: %s: %s %v", said[0].Level, said[0].Message, said[0].ContextMap())
			assert.Equal(t, tc.level, said[0].Level)
			assert.Equal(t, tc.want, said[0].ContextMap()["durability"])
			assert.NotEmpty(t, said[0].ContextMap()["risk"])
		})
	}
}

// durabilityGauge returns postgrescopy_redis_durability's value and its
// durability attribute, or -1 without a point.
func durabilityGauge(tel *componenttest.Telemetry) (int64, string) {
	m, err := tel.GetMetric("otelcol_postgrescopy_redis_durability")
	if err != nil {
		return -1, ""
	}
	for _, dp := range m.Data.(metricdata.Gauge[int64]).DataPoints {
		v, _ := dp.Attributes.Value("durability")
		return dp.Value, v.AsString()
	}
	return -1, ""
}

// TestRedisDurabilityGaugeFollowsTheServer: the durability is exported as a
// gauge and re-read while running: turning AOF on is seen and logged.
func TestRedisDurabilityGaugeFollowsTheServer(t *testing.T) {
	shortStats(t)
	rs := redistest.Start(t, "")
	cfg, _ := testConfig(t)
	cfg = withRedis(cfg, "pgct-durgauge", "d")
	cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
	_, tel, logs := startObservedTraces(t, cfg)
	v, name := durabilityGauge(tel)
	assert.Equal(t, int64(coord.DurabilityVolatile), v)
	assert.Equal(t, "volatile", name)

	rdb := redistest.Client(t, rs)
	require.NoError(t, rdb.ConfigSet(context.Background(), "appendonly", "yes").Err())
	require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "everysec").Err())
	require.Eventually(t, func() bool {
		_, name := durabilityGauge(tel)
		return name == "aof_everysec"
	}, 10*time.Second, 50*time.Millisecond)
	v, _ = durabilityGauge(tel)
	assert.Equal(t, int64(coord.DurabilityEverySec), v)
	changed := logs.FilterMessageSnippet("Redis persistence changed").All()
	require.Len(t, changed, 1)
	assert.Equal(t, "volatile", changed[0].ContextMap()["was"])
	assert.Equal(t, "aof_everysec", changed[0].ContextMap()["durability"])
}

// TestRedisRequireDurabilityRefusesAWeakerRedis: with
// redis::require_durability the collector does not start on a Redis that
// offers less, and says what it offers and how to fix it.
func TestRedisRequireDurabilityRefusesAWeakerRedis(t *testing.T) {
	rs := redistest.Start(t, "")
	start := func(level string) error {
		cfg, _ := testConfig(t)
		cfg = withRedis(cfg, "pgct-durreq", "d")
		cfg.Redis.Get().Endpoint = configopaque.String(rs.Addr())
		cfg.Redis.Get().RequireDurability = level
		te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), cfg)
		require.NoError(t, err)
		err = te.Start(context.Background(), componenttest.NewNopHost())
		require.NoError(t, te.Shutdown(context.Background()))
		return err
	}
	err := start("aof_everysec")
	require.Error(t, err)
	t.Log(err)
	for _, want := range []string{"redis::require_durability", `"aof_everysec"`, `"volatile"`, "appendonly yes", rs.Addr()} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NoError(t, start("none"))
	assert.NoError(t, start(""))

	rdb := redistest.Client(t, rs)
	require.NoError(t, rdb.ConfigSet(context.Background(), "appendonly", "yes").Err())
	require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "everysec").Err())
	assert.NoError(t, start("aof_everysec"))
	err = start("aof_always")
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), `offers "aof_everysec"`)
	assert.Contains(t, err.Error(), "appendfsync always")

	require.NoError(t, rdb.ConfigSet(context.Background(), "appendfsync", "always").Err())
	assert.NoError(t, start("aof_always"))
}

// TestRedisMinReplicasMustConfirm: with redis::min_replicas a request is
// acknowledged only once that many replicas hold its entry; with the replica
// gone Consume returns a retryable error naming the key, never nil.
func TestRedisMinReplicasMustConfirm(t *testing.T) {
	shortStats(t)
	primary := redistest.Start(t, "")
	var schema string
	config := func(level string) *Config {
		var cfg *Config
		cfg, schema = testConfig(t)
		cfg = withRedis(cfg, "pgct-minrepl", "d")
		rc := cfg.Redis.Get()
		rc.Endpoint = configopaque.String(primary.Addr())
		rc.MinReplicas = 1
		// Generous: on a loaded machine a replica online for a moment can
		// take longer than a fraction of a second to confirm (seen at 300ms);
		// the replica-down case below waits this long once.
		rc.ReplicaTimeout = 3 * time.Second
		rc.RequireDurability = level
		return cfg
	}
	// Without its replica the primary is not "replicated".
	te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), config("replicated"))
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.NoError(t, te.Shutdown(context.Background()))
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), `offers "volatile"`)
	assert.Contains(t, err.Error(), "redis::min_replicas")

	replica := redistest.StartReplica(t, primary, "")
	te, tel, logs := startObservedTraces(t, config("replicated"))
	said := logs.FilterMessageSnippet("Redis persistence").All()
	require.Len(t, said, 1)
	t.Logf("%s %v", said[0].Message, said[0].ContextMap())
	assert.Equal(t, zapcore.InfoLevel, said[0].Level)
	assert.Equal(t, "replicated", said[0].ContextMap()["durability"])
	ctx := context.Background()
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(3, "replicated")))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return pgtest.Count(t, pool, schema, "spans") == 3 },
		10*time.Second, 20*time.Millisecond, "the acknowledged request must be written")

	replica.Kill()
	err = te.ConsumeTraces(ctx, makeTraces(3, "unreplicated"))
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), "redis::min_replicas")
	assert.False(t, consumererror.IsPermanent(err), "a missing replica confirmation must be retryable")
	require.Eventually(t, func() bool {
		_, name := durabilityGauge(tel)
		return name == "volatile"
	}, 10*time.Second, 50*time.Millisecond, "the gauge must notice the replica is gone")
	// The unconfirmed entry is on the primary and is written all the same:
	// the error says only that it might not survive a failover.
	require.Eventually(t, func() bool { return pgtest.Count(t, pool, schema, "spans") == 6 },
		10*time.Second, 20*time.Millisecond)
}
