package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
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
	procs   []*exec.Cmd
	section map[string]any
}

func (d *redisDeployment) stop() {
	for _, p := range d.procs {
		_ = syscall.Kill(-p.Process.Pid, syscall.SIGKILL)
		_ = p.Wait()
	}
}

// redisHAPorts returns n ports from -redis-ha-ports on whose port and port
// + 10000 (a cluster node's bus) nothing listens.
func (b *bench) redisHAPorts(n int) ([]int, error) {
	var ports []int
	for p := b.redisHAPortBase; p < b.redisHAPortBase+200 && len(ports) < n; p++ {
		free := true
		for _, q := range []int{p, p + 10000} {
			if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(q), 50*time.Millisecond); err == nil {
				c.Close()
				free = false
			}
		}
		if free {
			ports = append(ports, p)
		}
	}
	if len(ports) < n {
		return nil, fmt.Errorf("fewer than %d free ports from %d (-redis-ha-ports)", n, b.redisHAPortBase)
	}
	return ports, nil
}

// startRedisHA starts the deployment of kind.
func (b *bench) startRedisHA(ctx context.Context, kind string) (*redisDeployment, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("%w: redis-server is not installed", errUnavailable)
	}
	n := 2
	if kind == redisHACluster {
		n = 3
	}
	ports, err := b.redisHAPorts(n)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errUnavailable, err)
	}
	d := &redisDeployment{}
	start := func(port int, extra ...string) error {
		dir := filepath.Join(b.tmp, "redis-"+strconv.Itoa(port))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--protected-mode", "no", "--logfile", "", "--repl-diskless-sync-delay", "0"}, extra...)
		cmd := exec.Command("redis-server", args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return err
		}
		d.procs = append(d.procs, cmd)
		c := redis.NewClient(&redis.Options{Addr: addrOf(port)})
		defer c.Close()
		for deadline := time.Now().Add(10 * time.Second); c.Ping(ctx).Err() != nil; {
			if time.Now().After(deadline) {
				return fmt.Errorf("redis-server on %d does not answer", port)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}
	fail := func(err error) (*redisDeployment, error) {
		d.stop()
		return nil, err
	}
	switch kind {
	case redisHAReplica:
		if err := start(ports[0]); err != nil {
			return fail(err)
		}
		if err := start(ports[1], "--replicaof", "127.0.0.1", strconv.Itoa(ports[0])); err != nil {
			return fail(err)
		}
		if err := waitFor(ctx, 30*time.Second, func() bool {
			info, err := redisInfo(ctx, addrOf(ports[0]), "replication")
			return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, "state=online")
		}); err != nil {
			return fail(fmt.Errorf("the replica does not come online: %w", err))
		}
		d.section = map[string]any{"endpoint": addrOf(ports[0]), "min_replicas": 1}
	case redisHACluster:
		var addrs []string
		for _, p := range ports {
			if err := start(p, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"); err != nil {
				return fail(err)
			}
			addrs = append(addrs, addrOf(p))
		}
		args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-yes")
		if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
			return fail(fmt.Errorf("redis-cli --cluster create: %v: %s", err, lastLines(string(out), 3)))
		}
		if err := waitFor(ctx, 30*time.Second, func() bool {
			for _, a := range addrs {
				info, err := redisInfo(ctx, a, "cluster")
				if err != nil || !strings.Contains(info, "cluster_state:ok") {
					return false
				}
			}
			return true
		}); err != nil {
			return fail(fmt.Errorf("the cluster is not ok: %w", err))
		}
		d.section = map[string]any{"cluster": map[string]any{"endpoints": addrs}, "shards": clusterShards}
	}
	return d, nil
}

func addrOf(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// redisInfo is INFO section of addr, or CLUSTER INFO for "cluster".
func redisInfo(ctx context.Context, addr, section string) (string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if section == "cluster" {
		return c.ClusterInfo(ctx).Result()
	}
	return c.Info(ctx, section).Result()
}

func waitFor(ctx context.Context, d time.Duration, ok func() bool) error {
	for deadline := time.Now().Add(d); !ok(); {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
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
