package postgrescopyexporter

import (
	"context"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisServer is a throwaway redis-server on its own port, without
// persistence, that a test may kill and restart (empty) or reconfigure. The
// machine's Redis is never touched.
type redisServer struct {
	port     int
	dir      string
	password string
	extra    []string // more redis-server arguments
	cmd      *exec.Cmd
}

// startRedisServer starts a throwaway redis-server; password, when set, is
// the default user's (requirepass).
func startRedisServer(t *testing.T, password string) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatalf("redis-server is needed for this test: %v", err)
	}
	addr := freeAddr(t)
	port, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	require.NoError(t, err)
	s := &redisServer{port: port, dir: t.TempDir(), password: password}
	s.start(t)
	t.Cleanup(func() { s.kill(t) })
	return s
}

// startRedisReplica starts a throwaway replica of primary and waits until
// the primary counts it.
func startRedisReplica(t *testing.T, primary *redisServer) *redisServer {
	t.Helper()
	return startRedisReplicaVia(t, primary, primary.addr())
}

// startRedisReplicaVia is startRedisReplica replicating from via, an address
// that leads to primary (a proxy that can cut the replication link).
func startRedisReplicaVia(t *testing.T, primary *redisServer, via string) *redisServer {
	t.Helper()
	host, viaPort, err := net.SplitHostPort(via)
	require.NoError(t, err)
	addr := freeAddr(t)
	port, err := strconv.Atoi(addr[strings.LastIndexByte(addr, ':')+1:])
	require.NoError(t, err)
	rdb := primary.client(t)
	// The first sync would otherwise wait 5s for more replicas.
	require.NoError(t, rdb.ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err())
	s := &redisServer{port: port, dir: t.TempDir(), password: primary.password,
		extra: []string{"--replicaof", host, viaPort}}
	if primary.password != "" {
		s.extra = append(s.extra, "--masterauth", primary.password)
	}
	s.start(t)
	t.Cleanup(func() { s.kill(t) })
	require.Eventually(t, func() bool {
		info, err := rdb.Info(context.Background(), "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
	}, 10*time.Second, 20*time.Millisecond, "replica on %s does not come online", s.addr())
	return s
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// client connects as the default user.
func (s *redisServer) client(t *testing.T) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Password: s.password})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// start starts the server, empty, and waits until it answers.
func (s *redisServer) start(t *testing.T) {
	t.Helper()
	args := []string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--daemonize", "no", "--protected-mode", "no", "--logfile", ""}
	if s.password != "" {
		args = append(args, "--requirepass", s.password)
	}
	args = append(args, s.extra...)
	s.cmd = exec.Command("redis-server", args...)
	require.NoError(t, s.cmd.Start())
	rdb := redis.NewClient(&redis.Options{Addr: s.addr(), Password: s.password, MaxRetries: -1})
	defer rdb.Close()
	require.Eventually(t, func() bool { return rdb.Ping(context.Background()).Err() == nil },
		10*time.Second, 20*time.Millisecond, "throwaway redis-server on %s does not answer", s.addr())
}

// kill stops the server with SIGKILL: what was not persisted is gone.
func (s *redisServer) kill(t *testing.T) {
	t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}
