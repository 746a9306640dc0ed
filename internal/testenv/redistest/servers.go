package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// The throwaway servers below are redisserver's, for a test: each in a
// directory of the test's, gone when the test ends. Without redis-server
// (or redis-cli for a cluster) the test fails, or is skipped under -short
// (pgtest.Unavailable).

const startWithin = 2 * time.Minute

func found(t testing.TB, find func() error) {
	t.Helper()
	if err := find(); err != nil {
		pgtest.Unavailable(t, "redistest: %v", err)
	}
}

// Start starts a redis-server without persistence unless args say so
// (redisserver.NoPersistence); password, when set, is the default user's.
func Start(t testing.TB, password string, args ...string) *redisserver.Server {
	t.Helper()
	found(t, redisserver.Find)
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	s, err := redisserver.Start(ctx, redisserver.Options{Dir: t.TempDir(), Password: password, Args: args})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartReplica starts a replica of primary replicating from via ("":
// primary itself; or a proxy to it), online when it returns.
func StartReplica(t testing.TB, primary *redisserver.Server, via string) *redisserver.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	s, err := redisserver.StartReplica(ctx, primary, via, redisserver.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// StartSentinels starts n sentinels monitoring primary (o.Primary and
// o.AuthPass are primary's, o.Dir the test's) and returns their addresses.
func StartSentinels(t testing.TB, primary *redisserver.Server, n int, o redisserver.SentinelOptions) []string {
	t.Helper()
	found(t, redisserver.Find)
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	o.Dir, o.Primary, o.AuthPass = t.TempDir(), primary.Addr(), primary.Password
	ss, err := redisserver.StartSentinels(ctx, n, o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	var addrs []string
	for _, s := range ss {
		t.Cleanup(s.Close)
		addrs = append(addrs, s.Addr())
	}
	return addrs
}

// StartCluster starts a Redis Cluster in the test's directory.
func StartCluster(t testing.TB, o redisserver.ClusterOptions) *redisserver.Cluster {
	t.Helper()
	found(t, redisserver.Find)
	found(t, redisserver.FindCLI)
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	o.Dir = t.TempDir()
	cl, err := redisserver.StartCluster(ctx, o)
	if err != nil {
		t.Fatalf("redistest: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// Restart starts the killed or stopped s again (redisserver.Server.Restart).
func Restart(t testing.TB, s *redisserver.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startWithin)
	defer cancel()
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("redistest: %v", err)
	}
}

// Client is a client of s as its default user, closed when the test ends.
func Client(t testing.TB, s *redisserver.Server) *redis.Client {
	rdb := s.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
