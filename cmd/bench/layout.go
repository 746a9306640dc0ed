package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// -layout split: the bench's own PostgreSQL server with every one of its
// processes on core 0, and the client side (the bench itself, so psql, the
// app strategies' connections and the collector, and its own Redis) on
// core 1, so that what PostgreSQL spends is measured apart from what feeds
// it, as when the collector runs on other hosts.

// ownPostmaster and ownRedis are the split layout's own server and Redis:
// when set, markCPU counts only their processes.
var ownPostmaster, ownRedis int

// splitLayout is what setupSplit started; stop undoes it.
type splitLayout struct {
	server  *localServers
	pool    *pgxpool.Pool
	redis   *redisserver.Server
	restore func()
}

func (s *splitLayout) stop() {
	if s == nil {
		return
	}
	if s.restore != nil {
		s.restore()
	}
	if s.pool != nil {
		s.pool.Close()
	}
	if s.redis != nil {
		s.redis.Close()
	}
	s.server.stop()
	ownPostmaster, ownRedis = 0, 0
}

// setupSplit starts the split layout: b's administration, every strategy
// and the report's server description move to the own server, Redis to
// its own redis-server on core 1. The caller stops it after the bench's own
// clean-up of that server (the schemas it made).
func (b *bench) setupSplit(ctx context.Context, rep *report) (*splitLayout, error) {
	if n := len(allowedCPUs()); n < 2 {
		return nil, fmt.Errorf("-layout split needs 2 CPUs, this process may use %d", n)
	}
	s := &splitLayout{server: &localServers{cpus: "0"}}
	if err := s.server.open(b.tmp, "split-", b.logf); err != nil {
		return s, err
	}
	port, err := s.server.initdb(ctx, "data", nil)
	if err != nil {
		return s, err
	}
	pid, err := postmasterPID(filepath.Join(s.server.dir, "data"))
	if err != nil {
		return s, err
	}
	url := localURL(port)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return s, err
	}
	cfg.MaxConns = 4
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return s, err
	}
	if err := s.pool.Ping(ctx); err != nil {
		return s, fmt.Errorf("own server at %s: %w", url, err)
	}
	s.restore = b.useServer(url, s.pool)
	// The report describes the server the strategies write to, read before
	// the bench's own process is pinned (the machine still has every core).
	m := b.machine(ctx)
	rep.Machine.PostgreSQL, rep.Machine.Settings = m.PostgreSQL, m.Settings

	// Everything started from now on inherits core 1: the collector, psql,
	// the Redis below, and the bench's own threads (taskset -a).
	if out, err := exec.CommandContext(ctx, "taskset", "-a", "-p", "-c", "1", strconv.Itoa(os.Getpid())).CombinedOutput(); err != nil {
		return s, fmt.Errorf("taskset the bench onto core 1: %w: %s", err, bytes.TrimSpace(out))
	}
	if redisserver.Find() == nil {
		r, err := redisserver.Start(ctx, redisserver.Options{})
		if err != nil {
			return s, err
		}
		s.redis = r
		b.redisAddr, ownRedis = r.Addr(), r.Pid()
	} else {
		b.logf("split layout: no redis-server: the Redis strategies use %s, unpinned", b.redisAddr)
	}
	ownPostmaster = pid
	rep.Notes = append(rep.Notes, fmt.Sprintf("Layout split: the bench's own PostgreSQL (initdb, default settings; postmaster pid %d started under `taskset -c 0`, so every backend and background process is on core 0) and, on core 1, the bench itself, psql, the collector and the bench's own redis-server (no persistence). PostgreSQL CPU counts that server's processes only; `backends` is the client backends' part (the write's own connections, with any exited process's time through the postmaster's children times, autovacuum workers included).", pid))
	b.logf("split layout: PostgreSQL %s on core 0 (postmaster %d), client side and Redis %s on core 1", url, pid, b.redisAddr)
	return s, nil
}

// allowedCPUs lists the CPUs this process may run on (Cpus_allowed_list).
func allowedCPUs() []int {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		rest, ok := strings.CutPrefix(line, "Cpus_allowed_list:")
		if !ok {
			continue
		}
		var out []int
		for _, r := range strings.Split(strings.TrimSpace(rest), ",") {
			lo, hi, isRange := strings.Cut(r, "-")
			a, err1 := strconv.Atoi(lo)
			z := a
			var err2 error
			if isRange {
				z, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return out
			}
			for c := a; c <= z; c++ {
				out = append(out, c)
			}
		}
		return out
	}
	return nil
}

func postmasterPID(data string) (int, error) {
	b, err := os.ReadFile(filepath.Join(data, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil {
		return 0, fmt.Errorf("postmaster.pid: %w", err)
	}
	return pid, nil
}

func waitRedis(ctx context.Context, addr string) error {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return errors.Join(fmt.Errorf("redis-server on %s does not answer", addr), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ownServerTimes is the CPU so far of the own server's processes (the
// postmaster with its exited children, and its live children), the part of
// it client backends spent, and the own redis-server's.
func ownServerTimes(ents []os.DirEntry) (postgres, backends, redisCPU time.Duration) {
	pm := strconv.Itoa(ownPostmaster)
	// A backend that is exiting (psql's, right after psql) has lost its
	// title, then is a zombie until the postmaster reaps it: its time is
	// not yet in the postmaster's children times. Wait for the reaping.
	for range 100 {
		if !hasExitingChild(pm) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fresh, err := os.ReadDir("/proc"); err == nil {
		ents = fresh
	}
	for _, e := range ents {
		pid := e.Name()
		if pid[0] < '0' || pid[0] > '9' {
			continue
		}
		if ownRedis > 0 && pid == strconv.Itoa(ownRedis) {
			redisCPU, _, _ = procTimes(pid)
			continue
		}
		if pid == pm {
			own, children, _ := procTimes(pid)
			postgres += own + children
			backends += children
			continue
		}
		if parentPID(pid) != pm {
			continue
		}
		own, _, _ := procTimes(pid)
		postgres += own
		if isClientBackend(pid) {
			backends += own
		}
	}
	return postgres, backends, redisCPU
}

// parentPID is /proc/<pid>/stat's ppid, "" when unreadable.
func parentPID(pid string) string {
	_, ppid := procState(pid)
	return ppid
}

// procState is /proc/<pid>/stat's state and ppid, "" when unreadable.
func procState(pid string) (state, ppid string) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "stat"))
	if err != nil {
		return "", ""
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 > len(s) {
		return "", ""
	}
	f := strings.Fields(s[i+2:])
	if len(f) < 2 {
		return "", ""
	}
	return f[0], f[1]
}

// hasExitingChild says whether a child of pid is exiting (its memory, and
// with it its title, gone) or has exited unreaped.
func hasExitingChild(pid string) bool {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return false
	}
	for _, e := range ents {
		if n := e.Name(); n[0] >= '0' && n[0] <= '9' {
			if state, ppid := procState(n); ppid == pid {
				if state == "Z" {
					return true
				}
				if title, err := os.ReadFile(filepath.Join("/proc", n, "cmdline")); err == nil && len(title) == 0 {
					return true
				}
			}
		}
	}
	return false
}

// isClientBackend says whether a postmaster child serves a client: its
// title is "postgres: user database host(port) ...", a background process's
// "postgres: checkpointer" and the like.
func isClientBackend(pid string) bool {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "cmdline"))
	if err != nil {
		return false
	}
	title := string(b)
	return strings.Contains(title, "127.0.0.1(") || strings.Contains(title, "[local]")
}
