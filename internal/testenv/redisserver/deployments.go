package redisserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// StartReplica starts a replica of primary, replicating from via (an
// address that leads to primary, such as a proxy that can cut the link; ""
// is primary itself), and waits until the primary counts it online. The
// replica's Password is primary's unless o sets one.
func StartReplica(ctx context.Context, primary *Server, via string, o Options) (*Server, error) {
	if via == "" {
		via = primary.Addr()
	}
	host, port, err := net.SplitHostPort(via)
	if err != nil {
		return nil, err
	}
	if o.Password == "" {
		o.Password = primary.Password
	}
	pc := primary.Client()
	defer pc.Close()
	// The first sync would otherwise wait 5s for more replicas.
	if err := pc.ConfigSet(ctx, "repl-diskless-sync-delay", "0").Err(); err != nil {
		return nil, fmt.Errorf("primary %s: %w", primary.Addr(), err)
	}
	o.Args = append([]string{"--replicaof", host, port}, o.Args...)
	r, err := Start(ctx, o)
	if err != nil {
		return nil, err
	}
	online := "port=" + strconv.Itoa(r.Port) + ",state=online"
	if err := waitFor(ctx, startTimeout, func() bool {
		info, err := pc.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, online)
	}); err != nil {
		r.Close()
		return nil, fmt.Errorf("the replica on %s does not come online: %w", r.Addr(), err)
	}
	return r, nil
}

// SentinelOptions configure sentinels watching one primary.
type SentinelOptions struct {
	// Dir holds a directory per sentinel; it must exist.
	Dir string
	// Master is the name the sentinels monitor the primary under.
	Master string
	// Primary is the primary's host:port.
	Primary string
	// Quorum is how many sentinels must agree the primary is down; 0 is a
	// majority.
	Quorum int
	// DownAfter and FailoverTimeout, when set, replace Sentinel's own
	// (30s and 3 minutes).
	DownAfter, FailoverTimeout time.Duration
	// AuthPass is the data nodes' password.
	AuthPass string
	// Password is the sentinels' own (requirepass, and sentinel-pass to
	// reach each other).
	Password string
	// Replicas is how many replicas of the primary each sentinel must know
	// before StartSentinels returns.
	Replicas int
}

// StartSentinels starts n sentinels (redis-server --sentinel) monitoring
// o.Primary and waits until each knows the primary, its o.Replicas replicas
// and the n-1 other sentinels.
func StartSentinels(ctx context.Context, n int, o SentinelOptions) ([]*Server, error) {
	if err := Find(); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(o.Primary)
	if err != nil {
		return nil, err
	}
	quorum := o.Quorum
	if quorum == 0 {
		quorum = n/2 + 1
	}
	var ss []*Server
	fail := func(err error) ([]*Server, error) {
		for _, s := range ss {
			s.Close()
		}
		return nil, err
	}
	for i := range n {
		s := &Server{Dir: filepath.Join(o.Dir, "sentinel-"+strconv.Itoa(i)), Password: o.Password, sentinel: true}
		if err := os.MkdirAll(s.Dir, 0o700); err != nil {
			return fail(err)
		}
		conf := filepath.Join(s.Dir, "sentinel.conf")
		err := s.startOnFreePort(ctx, true, func() ([]string, error) {
			lines := []string{
				"port " + strconv.Itoa(s.Port), "bind 127.0.0.1", "daemonize no", "protected-mode no", "dir " + s.Dir,
				"logfile " + filepath.Join(s.Dir, "redis.log"),
				fmt.Sprintf("sentinel monitor %s %s %s %d", o.Master, host, port, quorum),
			}
			if o.DownAfter > 0 {
				lines = append(lines, fmt.Sprintf("sentinel down-after-milliseconds %s %d", o.Master, o.DownAfter.Milliseconds()))
			}
			if o.FailoverTimeout > 0 {
				lines = append(lines, fmt.Sprintf("sentinel failover-timeout %s %d", o.Master, o.FailoverTimeout.Milliseconds()))
			}
			if o.AuthPass != "" {
				lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", o.Master, quote(o.AuthPass)))
			}
			if o.Password != "" {
				lines = append(lines, "requirepass "+quote(o.Password), "sentinel sentinel-pass "+quote(o.Password))
			}
			// Written for each port tried; Restart keeps what Sentinel
			// rewrote in it since.
			return []string{conf, "--sentinel"}, os.WriteFile(conf, []byte(strings.Join(lines, "\n")+"\n"), 0o600)
		})
		if err != nil {
			return fail(fmt.Errorf("sentinel %d: %w", i, err))
		}
		ss = append(ss, s)
	}
	for _, s := range ss {
		sc := redis.NewSentinelClient(s.Options())
		err := waitFor(ctx, startTimeout, func() bool {
			_, err0 := sc.GetMasterAddrByName(ctx, o.Master).Result()
			reps, err1 := sc.Replicas(ctx, o.Master).Result()
			sens, err2 := sc.Sentinels(ctx, o.Master).Result()
			return err0 == nil && err1 == nil && err2 == nil && len(reps) == o.Replicas && len(sens) == n-1
		})
		sc.Close()
		if err != nil {
			return fail(fmt.Errorf("sentinel %s does not see the primary, its %d replicas and the %d other sentinels: %w",
				s.Addr(), o.Replicas, n-1, err))
		}
	}
	return ss, nil
}

// ClusterOptions configure a Redis Cluster.
type ClusterOptions struct {
	// Dir holds a directory per node; it must exist.
	Dir string
	// Primaries is the number of primaries, Replicas the replicas of each.
	Primaries, Replicas int
	// Base is the first port to look from: a node's bus port is its port
	// + 10000, for which a port the kernel picks may leave no room.
	Base int
	// Args are more redis-server arguments for every node, e.g.
	// "--cluster-node-timeout", "1000".
	Args []string
}

// Cluster is a Redis Cluster made with redis-cli --cluster create.
type Cluster struct {
	Nodes []*Server
}

// StartCluster starts Primaries × (1 + Replicas) nodes on ports from Base
// on whose bus ports nothing listens either, creates the cluster and waits
// until it is ok and every primary has its replicas.
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	if err := Find(); err != nil {
		return nil, err
	}
	if err := FindCLI(); err != nil {
		return nil, err
	}
	n := o.Primaries * (1 + o.Replicas)
	cl := &Cluster{}
	for base, attempt := o.Base, 1; len(cl.Nodes) < n; {
		ps, err := clusterPorts(base, n-len(cl.Nodes))
		if err != nil {
			cl.Close()
			return nil, err
		}
		for _, p := range ps {
			dir := filepath.Join(o.Dir, "node-"+strconv.Itoa(p))
			if err := os.MkdirAll(dir, 0o700); err != nil {
				cl.Close()
				return nil, err
			}
			args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}, o.Args...)
			s, err := Start(ctx, Options{Dir: dir, Port: p, Args: args})
			base = p + 1
			if err != nil {
				// Taken since it was looked at: on past it.
				if exited := (*exitedError)(nil); errors.As(err, &exited) && attempt < 3 {
					attempt++
					break
				}
				cl.Close()
				return nil, err
			}
			cl.Nodes = append(cl.Nodes, s)
		}
	}
	args := append([]string{"--cluster", "create"}, cl.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		cl.Close()
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, lastLines(string(out), 3))
	}
	if err := cl.WaitOK(ctx, startTimeout); err != nil {
		cl.Close()
		return nil, err
	}
	if o.Replicas > 0 {
		synced := fmt.Sprintf("connected_slaves:%d", o.Replicas)
		if err := waitFor(ctx, startTimeout, func() bool {
			for _, s := range cl.Nodes {
				info, err := s.info(ctx, "replication")
				if err != nil || strings.Contains(info, "role:master") && !strings.Contains(info, synced) {
					return false
				}
			}
			return true
		}); err != nil {
			cl.Close()
			return nil, fmt.Errorf("the cluster's replicas do not sync: %w", err)
		}
	}
	return cl, nil
}

// clusterPorts returns n ports from base on whose port and bus port
// (+10000) nothing listens.
func clusterPorts(base, n int) ([]int, error) {
	var ps []int
	for p := base; len(ps) < n && p+10000 <= 65535; p++ {
		free := true
		for _, q := range []int{p, p + 10000} {
			if c, err := net.DialTimeout("tcp", ports.Addr(q), 100*time.Millisecond); err == nil {
				c.Close()
				free = false
			}
		}
		if free {
			ps = append(ps, p)
		}
	}
	if len(ps) < n {
		return nil, fmt.Errorf("fewer than %d free ports with free bus ports (+10000) from %d on", n, base)
	}
	return ps, nil
}

// Addrs are the nodes' addresses.
func (cl *Cluster) Addrs() []string {
	var a []string
	for _, s := range cl.Nodes {
		a = append(a, s.Addr())
	}
	return a
}

// WaitOK waits up to d until every running node says the cluster is ok.
func (cl *Cluster) WaitOK(ctx context.Context, d time.Duration) error {
	err := waitFor(ctx, d, func() bool {
		for _, s := range cl.Nodes {
			if !s.Running() {
				continue
			}
			info, err := s.info(ctx, "cluster")
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("the cluster is not ok: %w", err)
	}
	return nil
}

// Close kills every node.
func (cl *Cluster) Close() {
	for _, s := range cl.Nodes {
		s.Close()
	}
}

// info is INFO section, or CLUSTER INFO for "cluster".
func (s *Server) info(ctx context.Context, section string) (string, error) {
	c := s.Client()
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

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
