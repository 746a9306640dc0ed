package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// ReplicationSettings are the primary's settings for one streaming standby
// that serves read-only queries. Durability is off: the servers are thrown
// away.
var ReplicationSettings = []string{
	"wal_level = replica",
	"max_wal_senders = 4",
	"max_replication_slots = 4",
	"hot_standby = on",
	// The standby tells the primary which rows its queries still see, so
	// replay never cancels a reader for a cleanup conflict.
	"hot_standby_feedback = on",
	"fsync = off",
	"full_page_writes = off",
	"synchronous_commit = off",
	"shared_buffers = '16MB'",
	"max_connections = 50",
}

// Server is one throwaway server of a Cluster.
type Server struct {
	Data string // data directory
	Port int
	// URL connects as postgres (trust) to database postgres on 127.0.0.1.
	URL string
}

// Cluster is a set of throwaway servers in one temporary directory (not
// t.TempDir, whose parent the postgres user cannot traverse), run as the
// postgres OS user when the caller is root (initdb and postgres refuse
// root), all stopped and the directory removed by Stop.
type Cluster struct {
	dir     string
	owner   *user.User // nil: the current user runs the servers
	bin     string
	mu      sync.Mutex
	running []string // data directories of started servers, in start order
}

// NewCluster finds the server binaries (initdb, pg_ctl, postgres and tools)
// and makes the cluster's directory. An error here means the machine has no
// usable PostgreSQL server binaries.
func NewCluster(tools ...string) (*Cluster, error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	for _, tool := range append([]string{"initdb", "pg_ctl", "postgres"}, tools...) {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			return nil, fmt.Errorf("no %s in %s", tool, bin)
		}
	}
	c := &Cluster{bin: bin}
	if os.Geteuid() == 0 {
		if c.owner, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root needs a postgres OS user to run the servers: %w", err)
		}
	}
	if c.dir, err = os.MkdirTemp("", "pglocal-"); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(c.dir, "sock"), 0o700); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.chown(c.dir); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Primary makes a new server with initdb in the data directory name, with
// settings (postgresql.conf lines) and trust authentication on loopback,
// replication connections included, and starts it on a free port.
func (c *Cluster) Primary(ctx context.Context, name string, settings []string) (*Server, error) {
	data := filepath.Join(c.dir, name)
	if out, err := c.run(ctx, filepath.Join(c.bin, "initdb"), "-D", data, "--auth=trust", "--username=postgres",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 3))
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := c.writeFile(filepath.Join(data, "pg_hba.conf"), hba); err != nil {
		return nil, err
	}
	conf := "listen_addresses = '127.0.0.1'\nunix_socket_directories = '" + filepath.Join(c.dir, "sock") + "'\n" +
		strings.Join(settings, "\n") + "\n"
	return c.start(ctx, data, conf)
}

// Standby clones primary with pg_basebackup -R -X stream (through a
// replication slot, so the primary keeps the WAL the standby still needs)
// into the data directory name, starts it as a hot standby on a free port
// and waits until the primary streams to it.
func (c *Cluster) Standby(ctx context.Context, name string, primary *Server) (*Server, error) {
	return c.standby(ctx, name, primary, "")
}

// standby is Standby with conf appended to the standby's settings.
func (c *Cluster) standby(ctx context.Context, name string, primary *Server, conf string) (*Server, error) {
	data := filepath.Join(c.dir, name)
	slot := strings.ReplaceAll(name, "-", "_")
	if out, err := c.run(ctx, filepath.Join(c.bin, "pg_basebackup"), "-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port),
		"-U", "postgres", "-R", "-X", "stream", "-c", "fast", "-C", "-S", slot); err != nil {
		return nil, fmt.Errorf("pg_basebackup: %w: %s", err, lastLines(string(out), 3))
	}
	// pg_basebackup copied the primary's postgresql.auto.conf (its port
	// included) and appended primary_conninfo and primary_slot_name; start
	// appends the standby's own port after them, which wins.
	auto, err := os.ReadFile(filepath.Join(data, "postgresql.auto.conf"))
	if err != nil {
		return nil, err
	}
	s, err := c.start(ctx, data, string(auto)+conf)
	if err != nil {
		return nil, fmt.Errorf("standby: %w", err)
	}
	pool, err := pgxpool.New(ctx, primary.URL)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	spool, err := pgxpool.New(ctx, s.URL)
	if err != nil {
		return nil, err
	}
	defer spool.Close()
	var inRecovery bool
	if err := spool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		return nil, fmt.Errorf("the standby is not in recovery (%v)", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		err := pool.QueryRow(ctx, "SELECT state FROM pg_stat_replication LIMIT 1").Scan(&state)
		if err == nil && state == "streaming" {
			return s, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the standby does not stream within 30s (state %q, %v)", state, err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// WaitReplayed waits until standby has replayed everything primary has
// written so far: pg_last_wal_replay_lsn() on the standby reaches the
// primary's pg_current_wal_insert_lsn(). Not pg_current_wal_lsn(), which is
// only what has left the WAL buffers: with synchronous_commit off the last
// commits may still be behind it.
func WaitReplayed(ctx context.Context, primary, standby *pgxpool.Pool, timeout time.Duration) error {
	t0 := time.Now()
	var target string
	if err := primary.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&target); err != nil {
		return err
	}
	for {
		var done bool
		if err := standby.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", target).Scan(&done); err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Since(t0) > timeout {
			return fmt.Errorf("the standby has not replayed %s after %s", target, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Stop stops every server, the last started first, in immediate mode (the
// servers are thrown away), and removes the directory. It may be called more
// than once, and on a half-started cluster.
func (c *Cluster) Stop() error {
	c.mu.Lock()
	running := slices.Clone(c.running)
	c.running = nil
	c.mu.Unlock()
	var errs []error
	for i := len(running) - 1; i >= 0; i-- {
		errs = append(errs, c.stopServer(running[i]))
	}
	if c.dir != "" {
		errs = append(errs, os.RemoveAll(c.dir))
		c.dir = ""
	}
	return errors.Join(errs...)
}

// start writes conf plus a free port into data's postgresql.auto.conf and
// starts the server, with a new port when another process took the first.
func (c *Cluster) start(ctx context.Context, data, conf string) (*Server, error) {
	logFile := data + ".log"
	for attempt := 1; ; attempt++ {
		port, err := ports.One()
		if err != nil {
			return nil, err
		}
		if err := c.writeFile(filepath.Join(data, "postgresql.auto.conf"), conf+"port = "+strconv.Itoa(port)+"\n"); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.running = append(c.running, data)
		c.mu.Unlock()
		out, err := c.run(ctx, filepath.Join(c.bin, "pg_ctl"), "-D", data, "-l", logFile, "-w", "-t", "60", "start")
		if err == nil {
			return &Server{Data: data, Port: port, URL: "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable"}, nil
		}
		c.mu.Lock()
		c.running = slices.DeleteFunc(c.running, func(d string) bool { return d == data })
		c.mu.Unlock()
		_ = c.stopServer(data)
		if attempt == 3 || ctx.Err() != nil {
			serverLog, _ := os.ReadFile(logFile)
			return nil, fmt.Errorf("pg_ctl start: %w: %s | %s", err, lastLines(string(out), 2), lastLines(string(serverLog), 3))
		}
	}
}

func (c *Cluster) stopServer(data string) error {
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err != nil {
		return nil
	}
	if out, err := c.run(context.Background(), filepath.Join(c.bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop %s: %w: %s", data, err, lastLines(string(out), 2))
	}
	return nil
}

// run runs a PostgreSQL tool as the servers' owner in the cluster's
// directory, in its own process group, so that a Ctrl-C reaches the caller,
// which cleans up, rather than a half-done pg_basebackup.
func (c *Cluster) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if c.owner != nil {
		args = append([]string{"-u", c.owner.Username, "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// pg_ctl's postmaster must not keep our output pipe open forever.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

func (c *Cluster) writeFile(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	return c.chown(path)
}

func (c *Cluster) chown(path string) error {
	if c.owner == nil {
		return nil
	}
	return ChownTree(path, c.owner.Uid, c.owner.Gid)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
