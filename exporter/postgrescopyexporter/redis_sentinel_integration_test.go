package postgrescopyexporter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/tcpproxy"
)

// sentinelMaster is the name the test sentinels monitor the primary under.
const sentinelMaster = "pgct"

// startSentinels starts n throwaway sentinels monitoring primary with a
// quorum of a majority, failing over after 1s of silence, and waits until
// each knows the replicas and the other sentinels. password, when set, is
// the sentinels' own; the data nodes' is primary's.
func startSentinels(t *testing.T, primary *redisserver.Server, replicas, n int, password string) []string {
	t.Helper()
	return redistest.StartSentinels(t, primary, n, redisserver.SentinelOptions{Master: sentinelMaster,
		DownAfter: time.Second, FailoverTimeout: 10 * time.Second, Password: password, Replicas: replicas})
}

// sentinelPrimary is the primary's address as the first sentinel sees it.
func sentinelPrimary(t *testing.T, sentinel, password string) string {
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, Password: password})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(context.Background(), sentinelMaster).Result()
	if err != nil || len(a) != 2 {
		return ""
	}
	return a[0] + ":" + a[1]
}

// sentinelConfig reaches primary's deployment through sentinels.
func sentinelConfig(t *testing.T, primary *redisserver.Server, sentinels []string, sentinelPassword string, minReplicas int) (*Config, string) {
	cfg, schemaName := testConfig(t)
	cfg = withRedis(cfg, "pgct-sentinel", "")
	rc := cfg.Redis.Get()
	rc.Endpoint = ""
	rc.Password = configopaque.String(primary.Password)
	rc.Sentinel = configoptional.Some(RedisSentinelConfig{
		MasterName: sentinelMaster, Endpoints: sentinels, Password: configopaque.String(sentinelPassword),
	})
	rc.MinReplicas = minReplicas
	rc.ReplicaTimeout = 2 * time.Second
	rc.MaxWait = 100 * time.Millisecond
	// retry_on_failure resends a refused request under its ledger key, as
	// in a collector; its deadline bounds how long a sender waits.
	cfg.RetryConfig.Enabled = true
	cfg.RetryConfig.InitialInterval = 100 * time.Millisecond
	cfg.RetryConfig.MaxInterval = time.Second
	cfg.RetryConfig.MaxElapsedTime = 15 * time.Second
	return cfg, schemaName
}

// sentinelFailover runs load through the exporter against a primary with one
// replica behind three sentinels, cuts the replication link for partition
// (the replica lags by that much: what a slow network or a partition does;
// on loopback it otherwise trails by well under a millisecond) while
// PostgreSQL's spans table is locked (the backlog grows), kills the
// primary with SIGKILL, waits for the sentinels to promote the replica,
// brings the old primary back (empty: no persistence), which the sentinels
// make a replica of the new one, and loads on. It returns what reached
// PostgreSQL, and the exporter's logs and telemetry.
func sentinelFailover(t *testing.T, minReplicas int, partition time.Duration) (chaosVerdict, *observer.ObservedLogs, *componenttest.Telemetry, *sentinelDeployment) {
	pool := pgtest.Pool(t) // skips (-short, no PostgreSQL) before any server starts
	shortStats(t)
	const dataPassword, sentinelPassword = "data-secret", "sentinel-secret"
	primary := redistest.Start(t, dataPassword)
	link := tcpproxy.Start(t, "127.0.0.1:0", primary.Addr())
	replica := redistest.StartReplica(t, primary, link.Addr())
	sentinels := startSentinels(t, primary, 1, 3, sentinelPassword)
	cfg, schemaName := sentinelConfig(t, primary, sentinels, sentinelPassword, minReplicas)
	te, tel, logs := startObservedTraces(t, cfg)
	// A failure of this chaos test is timing: what the exporter said, and
	// when, next to the test's own steps (logged with their times).
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, e := range logs.All() {
			if e.Level < zapcore.InfoLevel && !strings.Contains(e.Message, "sentinel") {
				continue
			}
			f := e.ContextMap()
			delete(f, "redis")
			t.Logf("%s %s %.100s %v", e.Time.Format("15:04:05.000"), e.Level, e.Message, f)
		}
	})
	said := logs.FilterMessageSnippet("Redis persistence").All()
	require.Len(t, said, 1)
	t.Logf("start-up: %s %v", said[0].Message, said[0].ContextMap())
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			s := fmt.Sprint(v)
			assert.NotContains(t, s, dataPassword)
			assert.NotContains(t, s, sentinelPassword)
		}
	}

	load := startChaosLoad(te, 4, 20)
	time.Sleep(3 * time.Second)
	if partition > 0 {
		// PostgreSQL slower than the load meanwhile (a lock holds the
		// writes): what is acknowledged waits in Redis, as in a burst.
		hold, err := pool.Begin(context.Background())
		require.NoError(t, err)
		_, err = hold.Exec(context.Background(), `LOCK TABLE "`+schemaName+`".spans_rows IN EXCLUSIVE MODE`)
		require.NoError(t, err)
		link.Stall()
		time.Sleep(partition)
		primary.Kill()
		require.NoError(t, hold.Rollback(context.Background()))
	} else {
		primary.Kill()
	}
	killed := time.Now()
	t.Logf("%s primary %s killed", killed.Format("15:04:05.000"), primary.Addr())
	// Every sentinel names the promoted replica before the old primary is
	// back: a sentinel still naming the old address (late on the new
	// configuration, as a loaded machine makes it) would name the old
	// primary back empty, and a majority of such is a split brain the
	// exporter cannot tell from a lost stream.
	require.Eventually(t, func() bool {
		for _, s := range sentinels {
			if sentinelPrimary(t, s, sentinelPassword) != replica.Addr() {
				return false
			}
		}
		return true
	}, 30*time.Second, 100*time.Millisecond, "the sentinels do not promote the replica")
	t.Logf("sentinels promoted %s %s after the kill", replica.Addr(), time.Since(killed).Round(100*time.Millisecond))
	// Back empty; the sentinels turn it into a replica of the new primary.
	redistest.Restart(t, primary)
	t.Logf("%s old primary %s back, empty", time.Now().Format("15:04:05.000"), primary.Addr())
	newPrimary := redistest.Client(t, replica)
	replicated := func() bool {
		info, err := newPrimary.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}
	// Sentinel turns the old primary into a replica of the new one, but on a
	// loaded machine it enters TILT mode (its timer late by over 2s) and
	// takes no action for 30s at a time, and in CI it once had not done so
	// after 120s. That is Sentinel's part, not the exporter's: past 60s the
	// test points the old primary at the new one itself, as an operator
	// would, so that the exporter's part (following the new primary,
	// losing nothing acknowledged) is still what decides.
	for deadline := time.Now().Add(60 * time.Second); !replicated() && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
	}
	if !replicated() {
		t.Logf("%s the sentinels did not make the old primary a replica within 60s: REPLICAOF %s by hand", time.Now().Format("15:04:05.000"), replica.Addr())
		require.NoError(t, redistest.Client(t, primary).Do(context.Background(), "REPLICAOF", "127.0.0.1", strconv.Itoa(replica.Port)).Err())
	}
	require.Eventually(t, replicated, 60*time.Second, 100*time.Millisecond, "the old primary does not become a replica of the new one")
	resumed := time.Now()
	require.Eventually(t, func() bool { return load.ackedSince(resumed) >= 20 }, 30*time.Second, 50*time.Millisecond,
		"requests are not acknowledged after the failover: the exporter does not follow the new primary")
	load.Stop()
	v := load.verdict(t, schemaName, 60*time.Second)
	t.Logf("min_replicas %d, replication link cut %s before the kill: %s", minReplicas, partition, v)
	assert.Zero(t, v.Duplicated, "a span stored twice")
	return v, logs, tel, &sentinelDeployment{sentinels: sentinels, password: sentinelPassword, promoted: replica, old: primary}
}

// sentinelDeployment is the servers of a sentinelFailover run, for what the
// sentinels did after it.
type sentinelDeployment struct {
	sentinels []string
	password  string
	promoted  *redisserver.Server
	old       *redisserver.Server
}

// failedOverAgain says whether a sentinel names another primary than the
// replica promoted in the failover: on a loaded machine sentinels failing
// over after 1s of silence may fail over a second time, to the old primary
// (back empty, and made a replica by hand when they were late), and that
// second failover loses the stream itself. It logs what each sentinel
// names and the servers' run ids, so that a failure says which server was
// which.
func (d *sentinelDeployment) failedOverAgain(t *testing.T) bool {
	t.Helper()
	again := false
	for _, s := range d.sentinels {
		named := sentinelPrimary(t, s, d.password)
		t.Logf("sentinel %s names %q", s, named)
		again = again || named != d.promoted.Addr()
	}
	for name, srv := range map[string]*redisserver.Server{"promoted replica": d.promoted, "old primary": d.old} {
		info, err := redistest.Client(t, srv).Info(context.Background(), "server", "replication").Result()
		if err != nil {
			t.Logf("%s %s: %v", name, srv.Addr(), err)
			continue
		}
		fields := map[string]string{}
		for _, line := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "run_id" || k == "role" || k == "master_port") {
				fields[k] = v
			}
		}
		t.Logf("%s %s: %v", name, srv.Addr(), fields)
	}
	return again
}

// failoverLossReported is the spans the exporter reported lost in failovers
// (its Error logs' lost_items), waiting up to wait for the report of a loss
// the test saw (the audit waits coord.FailoverGrace).
func failoverLossReported(t *testing.T, logs *observer.ObservedLogs, want int, wait time.Duration) int {
	t.Helper()
	sum := func() int {
		n := 0
		for _, e := range logs.FilterMessageSnippet("Redis lost entries in a failover").All() {
			assert.Equal(t, zapcore.ErrorLevel, e.Level)
			n += int(e.ContextMap()["lost_items"].(int64))
		}
		return n
	}
	for deadline := time.Now().Add(wait); want > 0 && sum() < want && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	for _, e := range logs.FilterMessageSnippet("Redis").FilterLevelExact(zapcore.ErrorLevel).All() {
		t.Logf("%s %v", e.Message, e.ContextMap())
	}
	for _, e := range logs.FilterMessageSnippet("server holding a stream changed").All() {
		t.Logf("%s %v", e.Message, e.ContextMap())
	}
	return sum()
}

// TestRedisSentinelFailoverWithMinReplicasLosesNothing: with min_replicas 1
// a request is acknowledged only once the replica holds it, so the replica
// Sentinel promotes after a SIGKILL of the primary has every acknowledged
// entry, though it lagged 1.5s behind (the requests of that time were
// refused, retryable): each is stored exactly once.
func TestRedisSentinelFailoverWithMinReplicasLosesNothing(t *testing.T) {
	v, logs, tel, _ := sentinelFailover(t, 1, failoverLag)
	require.Positive(t, v.Acked)
	assert.Zero(t, v.Missing, "acknowledged spans lost in the failover")
	assert.Zero(t, failoverLossReported(t, logs, 0, 0), "a loss reported where nothing was lost")
	assert.Zero(t, counterWhere(t, tel, "otelcol_postgrescopy_redis_data_loss", "signal", "traces"))
	assert.NotEmpty(t, logs.FilterMessageSnippet("server holding a stream changed").All(), "the failover went unnoticed")
}

// TestRedisSentinelFailoverWithoutMinReplicasMeasuresTheLoss: without
// min_replicas replication is asynchronous, and what the primary
// acknowledged but its replica had not received (1.5s of lag here) is lost
// in the failover (the README gives the figure measured here). The exporter
// must say so, with exactly what was lost. Nothing is stored twice.
func TestRedisSentinelFailoverWithoutMinReplicasMeasuresTheLoss(t *testing.T) {
	v, logs, tel, d := sentinelFailover(t, 0, failoverLag)
	require.Positive(t, v.Acked)
	t.Logf("lost in the failover without min_replicas: %d of %d acknowledged spans", v.Missing, v.Acked)
	// The scenario must lose what the replica lacked, or the test with
	// min_replicas would prove nothing.
	assert.Positive(t, v.Missing, "the replica lagged %s: what the primary acknowledged meanwhile must be missing", failoverLag)
	assert.Equal(t, v.Missing, failoverLossReported(t, logs, v.Missing, coord.FailoverGrace+20*time.Second),
		"the spans the exporter reported lost in the failover, against those missing from PostgreSQL")
	var entries int64
	for _, e := range logs.FilterMessageSnippet("Redis lost entries in a failover").All() {
		entries += e.ContextMap()["lost_entries"].(int64)
	}
	assert.Positive(t, entries)
	events := int64(1)
	if d.failedOverAgain(t) {
		// The second failover, to a server without the stream, is a loss
		// the exporter reports as such: the stream lost whole, estimated
		// by the backlog last seen (up to that many entries; those the
		// workers were committing are in PostgreSQL, hence nothing more
		// missing above). Counted, it is one event more and its estimate.
		streamLost := logs.FilterMessageSnippet("Redis lost the stream").FilterLevelExact(zapcore.ErrorLevel).All()
		t.Logf("the sentinels failed over a second time; the exporter reported %d stream(s) lost whole", len(streamLost))
		for _, e := range streamLost {
			events++
			n, ok := e.ContextMap()["last_seen_entries"].(int64)
			if !ok {
				n = e.ContextMap()["lost_entries"].(int64)
			}
			entries += n
		}
	}
	assert.Equal(t, entries, counterWhere(t, tel, "otelcol_postgrescopy_redis_lost_entries", "signal", "traces"), "the entries counted lost")
	assert.Equal(t, events, counterWhere(t, tel, "otelcol_postgrescopy_redis_data_loss", "signal", "traces"), "one loss reported for each failover")
}

// failoverLag is how far the replica lags when its primary is killed.
const failoverLag = 1500 * time.Millisecond

// TestRedisSentinelStartsWithTheSentinelsPrimary: the durability read at
// start is the primary's the sentinels name, and a wrong sentinel password
// refuses the start without showing it.
func TestRedisSentinelStartsWithTheSentinelsPrimary(t *testing.T) {
	pgtest.Pool(t) // skips (-short, no PostgreSQL) before any server starts
	primary := redistest.Start(t, "")
	redistest.StartReplica(t, primary, "")
	sentinels := startSentinels(t, primary, 1, 1, "right-secret")
	cfg, _ := sentinelConfig(t, primary, sentinels, "right-secret", 1)
	cfg.Redis.Get().RequireDurability = "replicated"
	_, _, logs := startObservedTraces(t, cfg)
	said := logs.FilterMessageSnippet("Redis persistence").All()
	require.Len(t, said, 1)
	t.Logf("start-up: %s %v", said[0].Message, said[0].ContextMap())
	assert.Equal(t, zapcore.InfoLevel, said[0].Level)
	assert.Equal(t, "replicated", said[0].ContextMap()["durability"])
	assert.Contains(t, said[0].ContextMap()["redis"], `redis::sentinel master "pgct"`)

	cfg, _ = sentinelConfig(t, primary, sentinels, "wrong-secret", 0)
	err := startFails(t, cfg)
	t.Log(err)
	assert.Contains(t, err.Error(), "redis::sentinel")
	assert.NotContains(t, err.Error(), "wrong-secret")
}

// startFails starts an exporter of cfg that must refuse to start.
func startFails(t *testing.T, cfg *Config) error {
	t.Helper()
	te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.NoError(t, te.Shutdown(context.Background()))
	require.Error(t, err)
	return err
}
