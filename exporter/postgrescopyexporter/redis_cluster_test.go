package postgrescopyexporter

import (
	"context"
	"fmt"
	"net"
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
)

// redisCluster is a throwaway Redis Cluster on loopback made with
// redis-cli --cluster create.
type redisCluster struct {
	nodes []*redisServer
}

// startRedisCluster starts primaries × (1 + replicas) nodes on consecutive
// ports from base, or from the first run of free ones past it (each node's
// bus port is its port + 10000, which a free port picked by the kernel
// would not guarantee), and creates the cluster.
func startRedisCluster(t *testing.T, base, primaries, replicas int) *redisCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed for this test: %v", err)
	}
	cl := &redisCluster{}
	var addrs []string
	base = freeClusterPorts(t, base, primaries*(1+replicas))
	for i := range primaries * (1 + replicas) {
		port := base + i
		s := &redisServer{port: port, dir: t.TempDir(), extra: []string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			// A replica whose link broke a while ago may still take over.
			"--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0",
		}}
		s.start(t)
		t.Cleanup(func() { s.kill(t) })
		cl.nodes = append(cl.nodes, s)
		addrs = append(addrs, s.addr())
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.Command("redis-cli", args...).CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster create: %s", out)
	cl.waitOK(t, 30*time.Second)
	if replicas > 0 {
		require.Eventually(t, func() bool {
			for _, s := range cl.nodes {
				info, err := s.client(t).Info(context.Background(), "replication").Result()
				if err != nil {
					return false
				}
				if strings.Contains(info, "role:master") && !strings.Contains(info, fmt.Sprintf("connected_slaves:%d", replicas)) {
					return false
				}
			}
			return true
		}, 30*time.Second, 100*time.Millisecond, "the cluster's replicas do not sync")
	}
	return cl
}

// freeClusterPorts returns the first base, from base on in steps of n,
// whose n ports and their bus ports (+10000) nothing listens on.
func freeClusterPorts(t *testing.T, base, n int) int {
	t.Helper()
	for ; base+n+10000 <= 65535; base += n {
		free := true
		for p := base; p < base+n && free; p++ {
			for _, q := range []int{p, p + 10000} {
				if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(q), 100*time.Millisecond); err == nil {
					c.Close()
					free = false
				}
			}
		}
		if free {
			return base
		}
	}
	t.Fatalf("no %d free ports with free bus ports from %d on", n, base)
	return 0
}

// waitOK waits until every live node says the cluster is ok.
func (cl *redisCluster) waitOK(t *testing.T, d time.Duration) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, s := range cl.nodes {
			if s.cmd == nil {
				continue
			}
			info, err := s.client(t).ClusterInfo(context.Background()).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}, d, 100*time.Millisecond, "the cluster is not ok")
}

func (cl *redisCluster) addrs() []string {
	var a []string
	for _, s := range cl.nodes {
		a = append(a, s.addr())
	}
	return a
}

// live returns a node that runs.
func (cl *redisCluster) live(t *testing.T) *redis.Client {
	for _, s := range cl.nodes {
		if s.cmd != nil {
			return s.client(t)
		}
	}
	t.Fatal("no cluster node runs")
	return nil
}

// owner returns the node serving key's slot, as a live node sees it, and
// the slot.
func (cl *redisCluster) owner(t *testing.T, key string) (*redisServer, int) {
	t.Helper()
	rdb := cl.live(t)
	slot, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	require.NoError(t, err)
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	for _, r := range slots {
		if int64(r.Start) <= slot && slot <= int64(r.End) {
			for _, s := range cl.nodes {
				if s.addr() == r.Nodes[0].Addr {
					return s, int(slot)
				}
			}
		}
	}
	t.Fatalf("no node serves slot %d", slot)
	return nil, 0
}

// nodeID is a node's cluster id.
func nodeID(t *testing.T, s *redisServer) string {
	id, err := s.client(t).Do(context.Background(), "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	return id
}

// clusterConfig reaches cl with shards shards per signal.
func clusterConfig(t *testing.T, cl *redisCluster, prefix string, shards, minReplicas int) (*Config, string) {
	cfg, schemaName := testConfig(t)
	cfg = withRedis(cfg, prefix, "")
	rc := cfg.Redis.Get()
	rc.Endpoint = ""
	rc.Cluster = configoptional.Some(RedisClusterConfig{Endpoints: cl.addrs()[:2]})
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
		s, _ := cl.owner(t, coord.ShardKeys(prefix, "traces", i).Stream)
		owners[s.addr()] = true
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
	victim, slot := cl.owner(t, coord.ShardKeys(prefix, "traces", 0).Stream)
	victim.kill(t)
	killed := time.Now()
	require.Eventually(t, func() bool {
		s, _ := cl.owner(t, coord.ShardKeys(prefix, "traces", 0).Stream)
		return s != victim
	}, 30*time.Second, 100*time.Millisecond, "no replica takes over slot %d", slot)
	t.Logf("slot %d failed over %s after the kill", slot, time.Since(killed).Round(100*time.Millisecond))
	// Back empty, it rejoins as a replica of the promoted node (its
	// nodes.conf is kept), and min_replicas can be met again.
	victim.start(t)
	cl.waitOK(t, 30*time.Second)
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
	var src *redisServer
	var moveSlots int
	rdb := cl.live(t)
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	for i := 0; prefix == ""; i++ {
		p := fmt.Sprintf("pgct-reshard-%d", i)
		s, slot := cl.owner(t, coord.ShardKeys(p, "traces", 0).Stream)
		for _, r := range slots {
			if r.Nodes[0].Addr == s.addr() && slot >= r.Start && slot-r.Start < 300 {
				prefix, src, moveSlots = p, s, slot-r.Start+20
			}
		}
	}
	var dst *redisServer
	for _, s := range slots {
		if a := s.Nodes[0].Addr; a != src.addr() {
			for _, n := range cl.nodes {
				if n.addr() == a {
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
	out, err := exec.Command("redis-cli", "--cluster", "reshard", src.addr(), "--cluster-from", nodeID(t, src),
		"--cluster-to", nodeID(t, dst), "--cluster-slots", strconv.Itoa(moveSlots), "--cluster-yes").CombinedOutput()
	require.NoError(t, err, "redis-cli --cluster reshard: %s", lastLines(string(out), 5))
	owner, slot := cl.owner(t, coord.ShardKeys(prefix, "traces", 0).Stream)
	require.Equal(t, dst.addr(), owner.addr(), "the reshard must move slot %d", slot)
	t.Logf("moved %d slots (with slot %d of traces' shard 0) from %s to %s in %s under load",
		moveSlots, slot, src.addr(), dst.addr(), time.Since(began).Round(100*time.Millisecond))
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
