package main

import (
	"context"
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

	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// primarySettings are the bench primary's settings besides its address. They
// match a stock Debian server (and the system server of docs/benchmarks.md)
// for what moves write throughput, so the mixed part's numbers stay
// comparable; fsync and synchronous_commit keep their durable defaults. The
// replication settings are the minimum for one streaming standby with
// read-only queries.
var primarySettings = []string{
	"wal_level = replica",
	"max_wal_senders = 4",
	"max_replication_slots = 4",
	"hot_standby = on",
	// The standby tells the primary which rows its queries still see, so
	// replay never cancels a reader for a cleanup conflict.
	"hot_standby_feedback = on",
	"shared_buffers = '128MB'",
	"max_wal_size = '1GB'",
	"max_connections = 100",
	"fsync = on",
	"synchronous_commit = on",
}

// replicaSlot keeps the primary's WAL until the replica has it.
const replicaSlot = "pgcb_replica"

// localServers are throwaway PostgreSQL servers of the bench: data
// directories in one temporary directory, run as the postgres OS user when
// the bench runs as root, stopped and removed by stop.
type localServers struct {
	dir     string
	owner   *user.User // nil: the current user runs the servers
	bin     string
	logf    func(string, ...any)
	mu      sync.Mutex
	running []string // data directories of started servers, in start order
	cpus    string   // taskset's CPU list for the servers; empty: any
}

// replicaCluster is the mixed part's own throwaway primary and its streaming
// replica: two local servers in one directory.
type replicaCluster struct {
	localServers
	PrimaryURL string
	ReplicaURL string
	Version    string
	Setup      time.Duration
}

// open finds the server binaries and makes the directory (prefix* under
// parent) that the servers' data directories go to.
func (c *localServers) open(parent, prefix string, logf func(string, ...any), tools ...string) error {
	c.logf = logf
	var err error
	if c.bin, err = pglocal.BinDir(); err != nil {
		return err
	}
	for _, tool := range append([]string{"initdb", "pg_ctl", "postgres"}, tools...) {
		if _, err := os.Stat(filepath.Join(c.bin, tool)); err != nil {
			return fmt.Errorf("no %s in %s", tool, c.bin)
		}
	}
	if os.Geteuid() == 0 {
		if c.owner, err = user.Lookup("postgres"); err != nil {
			return fmt.Errorf("running as root needs a postgres OS user to run the servers: %w", err)
		}
	}
	if c.dir, err = os.MkdirTemp(parent, prefix); err != nil {
		return err
	}
	if err := os.Mkdir(filepath.Join(c.dir, "sock"), 0o700); err != nil {
		return err
	}
	return chownTree(c.dir, c.owner)
}

// initdb makes a new server in the directory's data directory name, with
// settings (postgresql.conf lines) and trust authentication on loopback
// (replication included), and starts it on a free port.
func (c *localServers) initdb(ctx context.Context, name string, settings []string) (int, error) {
	data := filepath.Join(c.dir, name)
	if out, err := c.run(ctx, filepath.Join(c.bin, "initdb"), "-D", data, "--auth=trust", "--username=postgres",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return 0, fmt.Errorf("initdb: %w: %s", err, lastLines(string(out), 3))
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 trust\nhost replication all 127.0.0.1/32 trust\n"
	if err := c.writeFile(filepath.Join(data, "pg_hba.conf"), hba); err != nil {
		return 0, err
	}
	base := "listen_addresses = '127.0.0.1'\nunix_socket_directories = '" + filepath.Join(c.dir, "sock") + "'\n" + strings.Join(settings, "\n") + "\n"
	return c.start(ctx, data, base)
}

// startReplicaCluster makes a primary with initdb, starts it on a free port,
// clones it with pg_basebackup -R -X stream into a hot standby and starts that
// on another free port. On error the caller still calls stop, which removes
// whatever was started and the directory.
func startReplicaCluster(ctx context.Context, parent string, logf func(string, ...any), c *replicaCluster) error {
	t0 := time.Now()
	if err := c.open(parent, "replica-", logf, "pg_basebackup"); err != nil {
		return err
	}
	pPort, err := c.initdb(ctx, "primary", primarySettings)
	if err != nil {
		return fmt.Errorf("primary: %w", err)
	}
	c.PrimaryURL = localURL(pPort)

	replica := filepath.Join(c.dir, "replica")
	if out, err := c.run(ctx, filepath.Join(c.bin, "pg_basebackup"), "-D", replica, "-h", "127.0.0.1", "-p", strconv.Itoa(pPort),
		"-U", "postgres", "-R", "-X", "stream", "-c", "fast", "-C", "-S", replicaSlot); err != nil {
		return fmt.Errorf("pg_basebackup: %w: %s", err, lastLines(string(out), 3))
	}
	// pg_basebackup copied the primary's postgresql.auto.conf (its port
	// included) and appended primary_conninfo and primary_slot_name; start
	// appends the replica's own port after them.
	auto, err := os.ReadFile(filepath.Join(replica, "postgresql.auto.conf"))
	if err != nil {
		return err
	}
	rPort, err := c.start(ctx, replica, string(auto))
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	c.ReplicaURL = localURL(rPort)

	// The replica is up when it is in recovery and the primary streams to it.
	pool, err := pgxpool.New(ctx, c.PrimaryURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	rpool, err := pgxpool.New(ctx, c.ReplicaURL)
	if err != nil {
		return err
	}
	defer rpool.Close()
	var inRecovery bool
	if err := rpool.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil || !inRecovery {
		return fmt.Errorf("the replica is not in recovery (%v)", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state string
		err := pool.QueryRow(ctx, "SELECT state FROM pg_stat_replication LIMIT 1").Scan(&state)
		if err == nil && state == "streaming" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the replica does not stream within 30s (state %q, %v)", state, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&c.Version); err != nil {
		return err
	}
	c.Setup = time.Since(t0)
	return nil
}

func localURL(port int) string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable"
}

// start writes conf plus a free port into data's postgresql.auto.conf and
// starts the server, with a new port when another process took the first.
func (c *localServers) start(ctx context.Context, data, conf string) (int, error) {
	logFile := data + ".log"
	for attempt := 1; ; attempt++ {
		port, err := ports.One()
		if err != nil {
			return 0, err
		}
		if err := c.writeFile(filepath.Join(data, "postgresql.auto.conf"), conf+"port = "+strconv.Itoa(port)+"\n"); err != nil {
			return 0, err
		}
		c.mu.Lock()
		c.running = append(c.running, data)
		c.mu.Unlock()
		out, err := c.run(ctx, filepath.Join(c.bin, "pg_ctl"), "-D", data, "-l", logFile, "-w", "-t", "60", "start")
		if err == nil {
			return port, nil
		}
		c.stopServer(data)
		if attempt == 3 || ctx.Err() != nil {
			serverLog, _ := os.ReadFile(logFile)
			return 0, fmt.Errorf("pg_ctl start: %w: %s | %s", err, lastLines(string(out), 2), lastLines(string(serverLog), 3))
		}
	}
}

// stopServer stops one server (fast: sessions are disconnected), then
// immediately if that does not work.
func (c *localServers) stopServer(data string) {
	c.mu.Lock()
	c.running = slices.DeleteFunc(c.running, func(d string) bool { return d == data })
	c.mu.Unlock()
	if _, err := os.Stat(filepath.Join(data, "postmaster.pid")); err != nil {
		return
	}
	pgCtl := filepath.Join(c.bin, "pg_ctl")
	if _, err := c.run(context.Background(), pgCtl, "-D", data, "-m", "fast", "-w", "-t", "30", "stop"); err != nil {
		if out, err := c.run(context.Background(), pgCtl, "-D", data, "-m", "immediate", "-w", "stop"); err != nil && c.logf != nil {
			c.logf("cleanup: pg_ctl stop %s: %v: %s", data, err, lastLines(string(out), 2))
		}
	}
}

// stop stops both servers (the replica first) and removes the directory. It
// may be called more than once, and on a half-started cluster.
func (c *replicaCluster) stop() {
	if c == nil {
		return
	}
	c.localServers.stop()
}

// stop stops the servers, the last started first, and removes the
// directory. It may be called more than once, and on a half-started set.
func (c *localServers) stop() {
	if c == nil {
		return
	}
	c.mu.Lock()
	running := slices.Clone(c.running)
	c.mu.Unlock()
	for i := len(running) - 1; i >= 0; i-- {
		c.stopServer(running[i])
	}
	if c.dir != "" {
		_ = os.RemoveAll(c.dir)
		c.dir = ""
	}
}

// run runs a PostgreSQL tool as the servers' owner in its directory, in its
// own process group so that a Ctrl-C reaches the bench, which cleans up,
// rather than a half-done pg_basebackup.
func (c *localServers) run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if c.owner != nil {
		args = append([]string{"-u", c.owner.Username, "--", name}, args...)
		name = "runuser"
	}
	if c.cpus != "" {
		// The postmaster inherits the affinity before it forks anything.
		args = append([]string{"-c", c.cpus, name}, args...)
		name = "taskset"
	}
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = c.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// pg_ctl's postmaster must not keep our output pipe open forever.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

func (c *localServers) writeFile(path, text string) error {
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		return err
	}
	return chownTree(path, c.owner)
}

func chownTree(path string, owner *user.User) error {
	if owner == nil {
		return nil
	}
	return pglocal.ChownTree(path, owner.Uid, owner.Gid)
}

// lagSample is the replica's distance behind the primary at one moment.
type lagSample struct {
	bytes int64         // WAL written on the primary and not yet replayed
	delay time.Duration // pg_stat_replication.replay_lag
}

// sampleLag asks the primary how far its one standby is behind.
func sampleLag(ctx context.Context, primary *pgxpool.Pool) (lagSample, error) {
	var s lagSample
	var secs float64
	err := primary.QueryRow(ctx, `
SELECT coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), replay_lsn), 0)::bigint,
       coalesce(extract(epoch FROM replay_lag), 0)::float8
FROM pg_stat_replication ORDER BY backend_start LIMIT 1`).Scan(&s.bytes, &secs)
	s.delay = time.Duration(secs * float64(time.Second))
	return s, err
}

// lagStats summarizes the lag samples of one placement of the readers,
// pooled over its runs.
type lagStats struct {
	Samples  int     `json:"samples"`
	MaxBytes int64   `json:"max_bytes"`
	P95Bytes int64   `json:"p95_bytes"`
	MaxMs    float64 `json:"max_ms"`
	P95Ms    float64 `json:"p95_ms"`
	// CatchUpMs is the longest wait, over the runs, from the last row being
	// visible on the primary to the replica having replayed the WAL then
	// written.
	CatchUpMs float64 `json:"catch_up_ms"`
	// Errors counts samples that could not be taken (no standby connected).
	Errors int `json:"errors,omitempty"`
}

// lagRecorder collects lag samples every interval while ingest runs.
type lagRecorder struct {
	mu      sync.Mutex
	samples []lagSample
	errors  int
	catchUp time.Duration
}

func (l *lagRecorder) record(ctx context.Context, primary *pgxpool.Pool, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		s, err := sampleLag(ctx, primary)
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		if err != nil {
			l.errors++
		} else {
			l.samples = append(l.samples, s)
		}
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *lagRecorder) caughtUp(d time.Duration) {
	l.mu.Lock()
	l.catchUp = max(l.catchUp, d)
	l.mu.Unlock()
}

func (l *lagRecorder) stats() lagStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := lagStats{Samples: len(l.samples), Errors: l.errors, CatchUpMs: ms(l.catchUp)}
	if len(l.samples) == 0 {
		return st
	}
	bytes := make([]time.Duration, len(l.samples)) // percentile works on durations
	delays := make([]time.Duration, len(l.samples))
	for i, s := range l.samples {
		bytes[i], delays[i] = time.Duration(s.bytes), s.delay
	}
	slices.Sort(bytes)
	slices.Sort(delays)
	st.MaxBytes, st.P95Bytes = int64(bytes[len(bytes)-1]), int64(percentile(bytes, 0.95))
	st.MaxMs, st.P95Ms = ms(delays[len(delays)-1]), ms(percentile(delays, 0.95))
	return st
}

// waitReplayed waits until the replica has replayed everything the primary
// has written so far, and returns how long that took.
func waitReplayed(ctx context.Context, primary, replica *pgxpool.Pool, timeout time.Duration) (time.Duration, error) {
	t0 := time.Now()
	var target string
	if err := primary.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&target); err != nil {
		return 0, err
	}
	for {
		var done bool
		if err := replica.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", target).Scan(&done); err != nil {
			return 0, err
		}
		if done {
			return time.Since(t0), nil
		}
		if time.Since(t0) > timeout {
			return 0, fmt.Errorf("the replica has not replayed %s after %s", target, timeout)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}
