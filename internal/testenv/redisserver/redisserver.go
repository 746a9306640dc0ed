// Package redisserver runs throwaway redis-server processes on free
// loopback ports for the tests, the bench and the soak: a single node, a
// replica of one, sentinels watching a primary and a Redis Cluster, each
// with its own data directory, to SIGKILL, stop and restart without ever
// touching the machine's Redis. It has no testing.T: internal/testenv/redistest
// wraps it for tests.
package redisserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// NoPersistence is neither snapshots nor an AOF: what a server holds is gone
// when it is killed. Every server starts so unless its Args say otherwise
// (later arguments override earlier ones).
var NoPersistence = []string{"--save", "", "--appendonly", "no"}

// startTimeout bounds the wait for a started server to answer PING, which
// it does only once its AOF is loaded.
const startTimeout = 30 * time.Second

// Find reports whether redis-server is installed, with the fix when not.
// Sentinels are redis-server --sentinel (Debian's redis-sentinel links to
// it), so nothing else is needed but redis-cli for a cluster (FindCLI).
func Find() error {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return errors.New("redis-server is not installed: run `make deps` (or apt-get install redis-server)")
	}
	return nil
}

// FindCLI reports whether redis-cli, which creates a cluster, is installed.
func FindCLI() error {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		return errors.New("redis-cli is not installed: run `make deps` (or apt-get install redis-tools)")
	}
	return nil
}

// Options configure one server.
type Options struct {
	// Dir holds the data, the log and the config file. Empty: a new
	// temporary directory, removed by Close.
	Dir string
	// Port to listen on; 0 picks a free one.
	Port int
	// Password is the default user's (requirepass) and the one the server
	// replicates with (masterauth). It goes in a config file, never in the
	// process's arguments.
	Password string
	// Args are more redis-server arguments, e.g. "--appendonly", "yes".
	Args []string
}

// Server is a redis-server (or a sentinel) process that may be killed and
// started again on the same port and directory.
type Server struct {
	Port     int
	Dir      string
	Password string

	args     []string
	ownDir   bool
	sentinel bool
	cmd      *exec.Cmd
	exited   chan struct{}
}

// Start runs a redis-server and waits until it answers.
func Start(ctx context.Context, o Options) (*Server, error) {
	if err := Find(); err != nil {
		return nil, err
	}
	s := &Server{Port: o.Port, Dir: o.Dir, Password: o.Password}
	if s.Dir == "" {
		dir, err := os.MkdirTemp("", "redisserver-")
		if err != nil {
			return nil, err
		}
		s.Dir, s.ownDir = dir, true
	}
	conf := filepath.Join(s.Dir, "redis.conf")
	var secrets string
	if o.Password != "" {
		secrets = "requirepass " + quote(o.Password) + "\nmasterauth " + quote(o.Password) + "\n"
	}
	if err := os.WriteFile(conf, []byte(secrets), 0o600); err != nil {
		s.Close()
		return nil, err
	}
	args := func() ([]string, error) {
		a := []string{conf, "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.Dir,
			"--daemonize", "no", "--protected-mode", "no", "--logfile", filepath.Join(s.Dir, "redis.log")}
		a = append(a, NoPersistence...)
		return append(a, o.Args...), nil
	}
	if err := s.startOnFreePort(ctx, o.Port == 0, args); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// startOnFreePort starts s; with pick, on a port it picks, and again on
// another when the server exits at once (someone took the port meanwhile).
func (s *Server) startOnFreePort(ctx context.Context, pick bool, args func() ([]string, error)) error {
	for attempt := 1; ; attempt++ {
		if pick {
			p, err := ports.One()
			if err != nil {
				return err
			}
			s.Port = p
		}
		var err error
		if s.args, err = args(); err != nil {
			return err
		}
		err = s.Restart(ctx)
		var exited *exitedError
		if err == nil || !pick || attempt == 3 || !errors.As(err, &exited) {
			return err
		}
	}
}

// exitedError is a server that exited before it answered.
type exitedError struct{ msg string }

func (e *exitedError) Error() string { return e.msg }

// Pid is the running process's id, 0 when none runs.
func (s *Server) Pid() int {
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return ports.Addr(s.Port) }

// Options are client options that reach the server as the default user.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr(), Password: s.Password}
}

// Client is a new client of the server; the caller closes it.
func (s *Server) Client() *redis.Client { return redis.NewClient(s.Options()) }

// Running reports whether the process runs (it has not been killed or
// stopped, nor exited).
func (s *Server) Running() bool {
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Restart starts the stopped server again on its port and directory: with
// what its AOF or snapshot kept, or empty without persistence (or after
// Wipe). It waits until the server answers PING.
func (s *Server) Restart(ctx context.Context) error {
	if s.Running() {
		return fmt.Errorf("redis-server on %s runs already", s.Addr())
	}
	stderr, err := os.Create(filepath.Join(s.Dir, "redis.stderr"))
	if err != nil {
		return err
	}
	defer stderr.Close()
	cmd := exec.Command("redis-server", s.args...)
	cmd.Stderr = stderr
	// Its own process group: a Ctrl-C to the bench or the soak does not
	// reach it, and Kill takes a forked save child with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.exited) }()
	o := s.Options()
	o.MaxRetries = -1
	c := redis.NewClient(o)
	defer c.Close()
	deadline := time.Now().Add(startTimeout)
	for {
		err := c.Ping(ctx).Err()
		if err == nil {
			return nil
		}
		select {
		case <-s.exited:
			s.cmd = nil
			return &exitedError{fmt.Sprintf("%s on %s exited at start: %s", s.name(), s.Addr(), s.Log(5))}
		case <-ctx.Done():
			s.Kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Kill()
			return fmt.Errorf("%s on %s not answering after %s: %w", s.name(), s.Addr(), startTimeout, err)
		}
	}
}

func (s *Server) name() string {
	if s.sentinel {
		return "redis-server --sentinel"
	}
	return "redis-server"
}

// Kill sends SIGKILL and waits for the exit: no shutdown save, no AOF
// rewrite, what was not persisted is gone.
func (s *Server) Kill() {
	s.signal(syscall.SIGKILL, 0)
}

// Stop shuts the server down as an operator would (SIGTERM: a snapshot
// when it has save points, the AOF flushed), killing it after 10s.
func (s *Server) Stop() {
	s.signal(syscall.SIGTERM, 10*time.Second)
}

func (s *Server) signal(sig syscall.Signal, wait time.Duration) {
	if s == nil || s.cmd == nil {
		return
	}
	pid := s.cmd.Process.Pid
	_ = syscall.Kill(-pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-s.exited:
		case <-time.After(wait):
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
	<-s.exited
	s.cmd = nil
}

// Wipe deletes what the stopped server persisted (its AOF and snapshot; a
// cluster node's nodes.conf stays), so that it restarts empty.
func (s *Server) Wipe() error {
	if s.Running() {
		return fmt.Errorf("redis-server on %s runs: stop it before Wipe", s.Addr())
	}
	for _, name := range []string{"appendonlydir", "appendonly.aof", "dump.rdb"} {
		if err := os.RemoveAll(filepath.Join(s.Dir, name)); err != nil {
			return err
		}
	}
	return nil
}

// Close kills the server and removes the directory Start made for it.
func (s *Server) Close() {
	if s == nil {
		return
	}
	s.Kill()
	if s.ownDir {
		_ = os.RemoveAll(s.Dir)
	}
}

// Log is the last n lines of the server's log and its standard error.
func (s *Server) Log(n int) string {
	var text string
	for _, name := range []string{"redis.stderr", "redis.log"} {
		if b, err := os.ReadFile(filepath.Join(s.Dir, name)); err == nil {
			text += string(b)
		}
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], " | ")
}

// quote is s as a redis.conf argument.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
