package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// The Redis deployments of the strategies "postgrescopy + Redis,
// min_replicas 1" and "postgrescopy + Redis Cluster": throwaway
// redis-servers the bench starts on loopback, without persistence like the
// Redis of "postgrescopy + Redis", so that a difference between them is the
// replica's confirmation or the cluster's routing.
const (
	redisHAReplica = "replica"
	redisHACluster = "cluster"
	// clusterShards spreads each signal over the 3 primaries' slots.
	clusterShards = 3
)

func redisHAStrategies() []strategy {
	return []strategy{
		{key: "postgrescopy-redis-replica", name: "postgrescopy + Redis, min_replicas 1", redis: true, redisHA: redisHAReplica},
		{key: "postgrescopy-redis-cluster", name: "postgrescopy + Redis Cluster", redis: true, redisHA: redisHACluster},
	}
}

// redisDeployment is a started deployment and the exporter's redis section
// keys that reach it.
type redisDeployment struct {
	dir     string
	servers []*redisserver.Server
	section map[string]any
}

func (d *redisDeployment) stop() {
	for _, s := range d.servers {
		s.Close()
	}
	_ = os.RemoveAll(d.dir)
}

// startRedisHA starts the deployment of kind.
func (b *bench) startRedisHA(ctx context.Context, kind string) (*redisDeployment, error) {
	if err := redisserver.Find(); err != nil {
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	}
	dir, err := os.MkdirTemp(b.tmp, "redis-"+kind+"-")
	if err != nil {
		return nil, err
	}
	d := &redisDeployment{dir: dir}
	fail := func(err error) (*redisDeployment, error) {
		d.stop()
		return nil, err
	}
	node := func(name string) redisserver.Options {
		nd := filepath.Join(dir, name)
		_ = os.Mkdir(nd, 0o700)
		return redisserver.Options{Dir: nd, Args: []string{"--repl-diskless-sync-delay", "0"}}
	}
	switch kind {
	case redisHAReplica:
		primary, err := redisserver.Start(ctx, node("primary"))
		if err != nil {
			return fail(err)
		}
		d.servers = append(d.servers, primary)
		replica, err := redisserver.StartReplica(ctx, primary, "", node("replica"))
		if err != nil {
			return fail(err)
		}
		d.servers = append(d.servers, replica)
		d.section = map[string]any{"endpoint": primary.Addr(), "min_replicas": 1}
	case redisHACluster:
		if err := redisserver.FindCLI(); err != nil {
			return fail(fmt.Errorf("%w: %v", errUnavailable, err))
		}
		cl, err := redisserver.StartCluster(ctx, redisserver.ClusterOptions{Dir: dir, Primaries: 3, Base: b.redisHAPortBase,
			Args: []string{"--repl-diskless-sync-delay", "0"}})
		if err != nil {
			return fail(err)
		}
		d.servers = cl.Nodes
		d.section = map[string]any{"cluster": map[string]any{"endpoints": cl.Addrs()}, "shards": clusterShards}
	}
	return d, nil
}

// commitLatency says how long entries waited from their XADD to their
// commit, from the exporter's "entries committed" lines.
func commitLatency(ms []int64) string {
	if len(ms) == 0 {
		return ""
	}
	s := slices.Clone(ms)
	slices.Sort(s)
	q := func(p float64) int64 { return s[min(len(s)-1, int(p*float64(len(s))))] }
	return fmt.Sprintf("entry XADD→commit p50 %d ms, p99 %d ms (%d entries)", q(0.50), q(0.99), len(s))
}
