package redistest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// TestRestartKeepsWhatTheAOFHeld: killed and restarted on its port, a
// server without persistence is empty, one with an AOF (fsync always) has
// every write; stopped, wiped and restarted it is empty again.
func TestRestartKeepsWhatTheAOFHeld(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		args []string
		want int64
	}{
		{"no persistence", nil, 0},
		{"aof always", []string{"--appendonly", "yes", "--appendfsync", "always"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := Start(t, "pw", tc.args...)
			port := s.Port
			rdb := Client(t, s)
			require.NoError(t, rdb.Set(ctx, "k", "v", 0).Err())
			s.Kill()
			assert.False(t, s.Running())
			assert.Error(t, rdb.Ping(ctx).Err(), "killed")
			Restart(t, s)
			assert.Equal(t, port, s.Port, "the same port")
			n, err := rdb.Exists(ctx, "k").Result()
			require.NoError(t, err)
			assert.Equal(t, tc.want, n)

			s.Stop()
			require.NoError(t, s.Wipe())
			Restart(t, s)
			n, err = rdb.Exists(ctx, "k").Result()
			require.NoError(t, err)
			assert.Zero(t, n, "wiped")
		})
	}
}

// TestPasswordIsRequiredAndNotInTheArguments: requirepass holds, and the
// password is in no process's command line.
func TestPasswordIsRequiredAndNotInTheArguments(t *testing.T) {
	s := Start(t, `s3cr"t\x`)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	defer rdb.Close()
	assert.ErrorContains(t, rdb.Ping(context.Background()).Err(), "NOAUTH")
	require.NoError(t, Client(t, s).Ping(context.Background()).Err())
	ps, err := exec.Command("ps", "-eo", "args").Output()
	require.NoError(t, err)
	assert.Contains(t, string(ps), "redis-server")
	assert.NotContains(t, string(ps), "s3cr")
}

// TestReplicaAndSentinel: a replica is online when StartReplica returns
// and has the primary's writes; a sentinel names the primary and knows
// the replica.
func TestReplicaAndSentinel(t *testing.T) {
	ctx := context.Background()
	primary := Start(t, "data-pw")
	replica := StartReplica(t, primary, "")
	require.NoError(t, Client(t, primary).Set(ctx, "k", "v", 0).Err())
	require.NoError(t, Client(t, primary).Do(ctx, "WAIT", 1, 5000).Err())
	v, err := Client(t, replica).Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "v", v)

	sentinels := StartSentinels(t, primary, 1, redisserver.SentinelOptions{Master: "m", Password: "sentinel-pw", Replicas: 1})
	require.Len(t, sentinels, 1)
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinels[0], Password: "sentinel-pw"})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, "m").Result()
	require.NoError(t, err)
	assert.Equal(t, primary.Addr(), a[0]+":"+a[1])
}

// TestCluster: three primaries with a replica each, ok and serving every
// slot; a killed node is not running and the others still answer.
func TestCluster(t *testing.T) {
	ctx := context.Background()
	cl := StartCluster(t, redisserver.ClusterOptions{Primaries: 3, Replicas: 1, Base: 16500,
		Args: []string{"--cluster-node-timeout", "1000"}})
	require.Len(t, cl.Nodes, 6)
	for _, s := range cl.Nodes {
		_, err := os.Stat(filepath.Join(s.Dir, "nodes.conf"))
		require.NoError(t, err, "each node its own directory")
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
	defer cc.Close()
	for _, k := range []string{"a", "b", "c", "d"} {
		require.NoError(t, cc.Set(ctx, k, k, 0).Err())
	}
	info, err := Client(t, cl.Nodes[0]).ClusterInfo(ctx).Result()
	require.NoError(t, err)
	assert.Contains(t, info, "cluster_slots_assigned:16384")
	cl.Nodes[0].Kill()
	assert.False(t, cl.Nodes[0].Running())
	assert.NoError(t, Client(t, cl.Nodes[1]).Ping(ctx).Err())
}
