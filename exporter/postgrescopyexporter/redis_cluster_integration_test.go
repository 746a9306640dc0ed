package postgrescopyexporter

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configoptional"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// startRedisCluster starts a throwaway Redis Cluster of primaries ×
// (1 + replicas) nodes on ports from base on, failing over after 1s.
func startRedisCluster(t *testing.T, base, primaries, replicas int) *redisserver.Cluster {
	t.Helper()
	return redistest.StartCluster(t, redisserver.ClusterOptions{Primaries: primaries, Replicas: replicas, Base: base,
		Args: []string{"--cluster-node-timeout", "1000",
			// A replica whose link broke a while ago may still take over.
			"--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"}})
}

// waitOK waits until every live node says the cluster is ok.
func waitOK(t *testing.T, cl *redisserver.Cluster, d time.Duration) {
	t.Helper()
	require.NoError(t, cl.WaitOK(context.Background(), d))
}

// live returns a node that runs.
func live(t *testing.T, cl *redisserver.Cluster) *redis.Client {
	for _, s := range cl.Nodes {
		if s.Running() {
			return redistest.Client(t, s)
		}
	}
	t.Fatal("no cluster node runs")
	return nil
}

// owner returns the node serving key's slot, as a live node sees it, and
// the slot.
func owner(t *testing.T, cl *redisserver.Cluster, key string) (*redisserver.Server, int) {
	t.Helper()
	rdb := live(t, cl)
	slot, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	require.NoError(t, err)
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			for _, s := range cl.Nodes {
				if s.Addr() == r.Nodes[0].Addr {
					return s, int(slot)
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return nil, 0
}

// nodeID is a node's cluster id.
func nodeID(t *testing.T, s *redisserver.Server) string {
	id, err := redistest.Client(t, s).Do(context.Background(), "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	return id
}

// clusterConfig reaches cl with shards shards per signal.
func clusterConfig(t *testing.T, cl *redisserver.Cluster, prefix string, shards, minReplicas int) (*Config, string) {
	cfg, schemaName := testConfig(t)
	cfg = withRedis(cfg, prefix, "")
	rc := cfg.Redis.Get()
	rc.Endpoint = ""
	rc.Cluster = configoptional.Some(RedisClusterConfig{Endpoints: cl.Addrs()[:2]})
	rc.Shards = shards
	rc.MinReplicas = minReplicas
	rc.ReplicaTimeout = 2 * time.Second
	rc.MaxWait = 100 * time.Millisecond
	cfg.RetryConfig.Enabled = true
	cfg.RetryConfig.InitialInterval = 100 * time.Millisecond
	cfg.RetryConfig.MaxInterval = time.Second
	cfg.RetryConfig.MaxElapsedTime = 15 * time.Second
	return cfg, schemaName
}

// TestRedisClusterNodeKilledReplicaPromotedExactlyOnce: a 3-primary Redis
// Cluster with a replica each; traces spread over three shards, which land
// on different primaries; with min_replicas 1, the primary of a shard killed
// with SIGKILL under load and its replica promoted by the cluster: every
// acknowledged span is stored exactly once.
func TestRedisClusterNodeKilledReplicaPromotedExactlyOnce(t *testing.T) {
	pgtest.Pool(t) // skips (-short, no PostgreSQL) before any server starts
	shortStats(t)
	cl := startRedisCluster(t, 16300, 3, 1)
	const prefix = "pgct-cluster"
	owners := map[string]bool{}
	for i := range 3 {
		s, _ := owner(t, cl, coord.ShardKeys(prefix, "traces", i).Stream)
		owners[s.Addr()] = true
	}
	t.Logf("traces' 3 shards are on %d of the 3 primaries", len(owners))
	assert.Greater(t, len(owners), 1, "the shards' hash tags must spread them over the cluster")

	cfg, schemaName := clusterConfig(t, cl, prefix, 3, 1)
	te, _, logs := startObservedTraces(t, cfg)
	said := logs.FilterMessageSnippet("Redis persistence").All()
	require.Len(t, said, 1)
	t.Logf("start-up: %s %v", said[0].Message, said[0].ContextMap())
	assert.Equal(t, "replicated", said[0].ContextMap()["durability"])

	load := startChaosLoad(te, 4, 20)
	time.Sleep(3 * time.Second)
	victim, slot := owner(t, cl, coord.ShardKeys(prefix, "traces", 0).Stream)
	victim.Kill()
	killed := time.Now()
	require.Eventually(t, func() bool {
		s, _ := owner(t, cl, coord.ShardKeys(prefix, "traces", 0).Stream)
		return s != victim
	}, 30*time.Second, 100*time.Millisecond, "no replica takes over slot %d", slot)
	t.Logf("slot %d failed over %s after the kill", slot, time.Since(killed).Round(100*time.Millisecond))
	// Back empty, it rejoins as a replica of the promoted node (its
	// nodes.conf is kept), and min_replicas can be met again.
	redistest.Restart(t, victim)
	waitOK(t, cl, 30*time.Second)
	resumed := time.Now()
	require.Eventually(t, func() bool { return load.ackedSince(resumed) >= 40 }, 60*time.Second, 50*time.Millisecond,
		"requests are not acknowledged after the failover")
	load.Stop()
	v := load.verdict(t, schemaName, 60*time.Second)
	t.Logf("cluster failover, min_replicas 1: %s", v)
	require.Positive(t, v.Acked)
	assert.Zero(t, v.Missing)
	assert.Zero(t, v.Duplicated)
	assert.Zero(t, logs.FilterMessageSnippet("Redis lost entries in a failover").Len(), "a loss reported where nothing was lost")
}

// TestRedisClusterReshardDuringLoadExactlyOnce: redis-cli --cluster reshard
// moves the slot of a traces shard, with its stream, consumer group and
// pending entries, to another primary under load: every acknowledged span
// is stored exactly once.
func TestRedisClusterReshardDuringLoadExactlyOnce(t *testing.T) {
	pgtest.Pool(t) // skips (-short, no PostgreSQL) before any server starts
	// Without min_replicas the adds go through the cluster client, which
	// follows MOVED and ASK; with it, through a connection held to the
	// slot's primary for WAIT, which a moved slot refuses (retried).
	t.Run("min_replicas 0", func(t *testing.T) { reshardDuringLoad(t, 16320, 0) })
	t.Run("min_replicas 1", func(t *testing.T) { reshardDuringLoad(t, 16340, 1) })
}

func reshardDuringLoad(t *testing.T, base, minReplicas int) {
	shortStats(t)
	cl := startRedisCluster(t, base, 3, minReplicas)
	// A prefix whose shard-0 slot is among the first slots of its node, so
	// that moving a few hundred slots moves it.
	var prefix string
	var src *redisserver.Server
	var moveSlots int
	rdb := live(t, cl)
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	for i := 0; prefix == ""; i++ {
		p := fmt.Sprintf("pgct-reshard-%d", i)
		s, slot := owner(t, cl, coord.ShardKeys(p, "traces", 0).Stream)
		for _, r := range slots {
			if r.Nodes[0].Addr == s.Addr() && slot >= r.Start && slot-r.Start < 300 {
				prefix, src, moveSlots = p, s, slot-r.Start+20
			}
		}
	}
	var dst *redisserver.Server
	for _, s := range slots {
		if a := s.Nodes[0].Addr; a != src.Addr() {
			for _, n := range cl.Nodes {
				if n.Addr() == a {
					dst = n
				}
			}
			break
		}
	}
	cfg, schemaName := clusterConfig(t, cl, prefix, 3, minReplicas)
	te, _, logs := startObservedTraces(t, cfg)
	said := logs.FilterMessageSnippet("Redis persistence").All()
	require.Len(t, said, 1)
	t.Logf("start-up: %s %v", said[0].Message, said[0].ContextMap())

	load := startChaosLoad(te, 4, 20)
	time.Sleep(2 * time.Second)
	began := time.Now()
	out, err := exec.Command("redis-cli", "--cluster", "reshard", src.Addr(), "--cluster-from", nodeID(t, src),
		"--cluster-to", nodeID(t, dst), "--cluster-slots", strconv.Itoa(moveSlots), "--cluster-yes").CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster reshard: %s", lastLines(string(out), 5))
	owner, slot := owner(t, cl, coord.ShardKeys(prefix, "traces", 0).Stream)
	require.Equal(t, dst.Addr(), owner.Addr(), "the reshard must move slot %d", slot)
	t.Logf("moved %d slots (with slot %d of traces' shard 0) from %s to %s in %s under load",
		moveSlots, slot, src.Addr(), dst.Addr(), time.Since(began).Round(100*time.Millisecond))
	resumed := time.Now()
	require.Eventually(t, func() bool { return load.ackedSince(resumed) >= 40 }, 30*time.Second, 50*time.Millisecond,
		"requests are not acknowledged after the reshard")
	load.Stop()
	v := load.verdict(t, schemaName, 60*time.Second)
	t.Logf("cluster reshard, min_replicas %d: %s", minReplicas, v)
	require.Positive(t, v.Acked)
	assert.Zero(t, v.Missing)
	assert.Zero(t, v.Duplicated)
	// The slot's new primary holds the stream: looked up, nothing missing.
	assert.Zero(t, logs.FilterMessageSnippet("Redis lost entries in a failover").Len(), "a loss reported where nothing was lost")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
