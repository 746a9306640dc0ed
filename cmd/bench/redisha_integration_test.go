package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// TestRedisHADeployments: the replica deployment's primary counts its
// replica (min_replicas 1 can be met), the cluster's endpoints serve every
// slot, and stop leaves no server and no directory behind.
func TestRedisHADeployments(t *testing.T) {
	if err := redisserver.Find(); err != nil {
		pgtest.Unavailable(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	b := &bench{tmp: t.TempDir(), redisHAPortBase: 16600}

	d, err := b.startRedisHA(ctx, redisHAReplica)
	if err != nil {
		t.Fatal(err)
	}
	primary := redis.NewClient(&redis.Options{Addr: d.section["endpoint"].(string)})
	defer primary.Close()
	if n, err := primary.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Errorf("WAIT 1: %d replicas, %v", n, err)
	}
	if d.section["min_replicas"] != 1 {
		t.Errorf("section %v", d.section)
	}
	d.stop()
	if primary.Ping(ctx).Err() == nil {
		t.Error("the primary still answers after stop")
	}
	if _, err := os.Stat(d.dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", d.dir, err)
	}

	d, err = b.startRedisHA(ctx, redisHACluster)
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	addrs := d.section["cluster"].(map[string]any)["endpoints"].([]string)
	if len(addrs) != 3 || d.section["shards"] != clusterShards {
		t.Fatalf("section %v", d.section)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	defer cc.Close()
	for _, k := range []string{"a", "b", "c"} {
		if err := cc.Set(ctx, k, k, 0).Err(); err != nil {
			t.Errorf("SET %s: %v", k, err)
		}
	}
}
