package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// TestStartSentinel: the sentinel of redis-sentinel-unknown-master names
// the primary it monitors, and not the master_name the collector is given;
// stopped, it answers no more.
func TestStartSentinel(t *testing.T) {
	if err := redisserver.Find(); err != nil {
		pgtest.Unavailable(t, "%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := redisserver.Start(ctx, redisserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	addr, stop, err := startSentinel(ctx, t.TempDir(), rs.Addr(), "soak-monitored")
	if err != nil {
		t.Fatal(err)
	}
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer sc.Close()
	a, err := sc.GetMasterAddrByName(ctx, "soak-monitored").Result()
	if err != nil || len(a) != 2 || a[0]+":"+a[1] != rs.Addr() {
		t.Errorf("soak-monitored is %v (%v), want %s", a, err, rs.Addr())
	}
	if _, err := sc.GetMasterAddrByName(ctx, "soak-typo").Result(); err == nil {
		t.Error("the sentinel knows soak-typo")
	}
	stop()
	if sc.Ping(ctx).Err() == nil {
		t.Error("the sentinel answers after stop")
	}
}
