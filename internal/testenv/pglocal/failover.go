package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StandbyVia is Standby with the standby's replication connection going to
// addr (host:port) instead of the primary's port: a tcpproxy in front of the
// primary, which a test closes to cut replication at a moment it chooses.
// The standby's application_name is name, for synchronous_standby_names.
func (c *Cluster) StandbyVia(ctx context.Context, name string, primary *Server, addr string) (*Server, error) {
	host, port, ok := strings.Cut(addr, ":")
	if !ok {
		return nil, fmt.Errorf("standby via %q: not host:port", addr)
	}
	return c.standby(ctx, name, primary, fmt.Sprintf("primary_conninfo = 'host=%s port=%s user=postgres application_name=%s'\n",
		host, port, name))
}

// Kill ends server s as a crash would: SIGKILL to its postmaster's process
// group (the postmaster and every backend; pg_ctl starts it in a session
// of its own), no shutdown checkpoint, nothing flushed. It returns once the
// postmaster is gone. The cluster no longer stops s.
func (c *Cluster) Kill(s *Server) error {
	pidFile, err := os.ReadFile(filepath.Join(s.Data, "postmaster.pid"))
	if err != nil {
		return fmt.Errorf("kill: %w", err)
	}
	line, _, _ := strings.Cut(string(pidFile), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return fmt.Errorf("kill: postmaster.pid of %s names no process", s.Data)
	}
	target := pid
	if pgid, err := syscall.Getpgid(pid); err == nil && pgid == pid {
		target = -pid
	}
	if err := syscall.Kill(target, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %d: %w", target, err)
	}
	c.mu.Lock()
	c.running = slices.DeleteFunc(c.running, func(d string) bool { return d == s.Data })
	c.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			return fmt.Errorf("kill: postmaster %d still runs after 30s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// Promote makes standby s a primary (pg_ctl promote -w): it returns once s
// accepts writes, on a new timeline.
func (c *Cluster) Promote(ctx context.Context, s *Server) error {
	if out, err := c.run(ctx, filepath.Join(c.bin, "pg_ctl"), "-D", s.Data, "-w", "-t", "60", "promote"); err != nil {
		return fmt.Errorf("pg_ctl promote: %w: %s", err, lastLines(string(out), 2))
	}
	return nil
}

// alive says whether process pid runs: it exists and is no zombie (an
// orphaned postmaster's parent may be slow to reap it, or never do).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
