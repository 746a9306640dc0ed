package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// Options configure a PgBouncer.
type Options struct {
	// Upstream is the PostgreSQL URL PgBouncer connects to.
	Upstream string
	// Database is the name clients use to reach Upstream's database.
	Database string
	// PoolMode is session, transaction (default) or statement.
	PoolMode string
	// PoolSize is the number of server connections (default 20).
	PoolSize int
	// Dir holds the ini file and the log; it must exist.
	Dir string
	// Logf reports progress (listening); may be nil.
	Logf func(string, ...any)
}

// Server is a running PgBouncer.
type Server struct {
	URL  string // a client URL through PgBouncer (sslmode=disable)
	Addr string
	Dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// Find returns the pgbouncer binary. It installs nothing: tests and the
// bench run side by side, and concurrent apt-get runs fail on dpkg's lock;
// scripts/deps.sh (`make deps`, run by `make test` and `make bench`) does.
func Find() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", errors.New("pgbouncer is not installed: run `make deps` as root (or apt-get install pgbouncer)")
}

// Start runs PgBouncer on a free loopback port and waits until it listens.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.PoolMode == "" {
		o.PoolMode = "transaction"
	}
	if o.PoolSize == 0 {
		o.PoolSize = 20
	}
	bin, err := Find()
	if err != nil {
		return nil, err
	}
	pc, err := pgconn.ParseConfig(o.Upstream)
	if err != nil {
		return nil, err
	}
	port, err := ports.One()
	if err != nil {
		return nil, err
	}
	server := fmt.Sprintf("host=%s port=%d dbname=%s user=%s", pc.Host, pc.Port, pc.Database, pc.User)
	if pc.Password != "" {
		server += " password=" + pc.Password
	}
	ini := strings.Join([]string{
		"[databases]",
		o.Database + " = " + server,
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		"listen_port = " + strconv.Itoa(port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + filepath.Join(o.Dir, "userlist.txt"),
		"pool_mode = " + o.PoolMode,
		"max_client_conn = 500",
		"default_pool_size = " + strconv.Itoa(o.PoolSize),
		"ignore_startup_parameters = extra_float_digits,options",
		"logfile = " + filepath.Join(o.Dir, "pgbouncer.log"),
		"",
	}, "\n")
	files := map[string]string{
		"pgbouncer.ini": ini,
		"userlist.txt":  fmt.Sprintf("%q \"\"\n", pc.User),
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, name), []byte(body), 0o644); err != nil {
			return nil, err
		}
	}
	args := []string{bin, filepath.Join(o.Dir, "pgbouncer.ini")}
	// pgbouncer refuses to run as root; run it as the postgres user then.
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("pgbouncer cannot run as root and there is no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(o.Dir, 0o755); err != nil {
			return nil, err
		}
		if err := os.Chown(o.Dir, uid, gid); err != nil {
			return nil, err
		}
		args = append([]string{"runuser", "-u", "postgres", "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := os.Create(filepath.Join(o.Dir, "pgbouncer.stderr"))
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s := &Server{cmd: cmd, Dir: o.Dir, Addr: addr, done: make(chan struct{}),
		URL: (&url.URL{Scheme: "postgres", User: url.User(pc.User), Host: addr,
			Path: o.Database, RawQuery: "sslmode=disable"}).String()}
	go func() { _ = cmd.Wait(); close(s.done) }()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			break
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(o.Dir, "pgbouncer.log"))
			errOut, _ := os.ReadFile(out.Name())
			return nil, fmt.Errorf("pgbouncer exited: %s", lastLines(string(errOut)+string(log), 5))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("pgbouncer did not listen on %s within 10s", addr)
		}
	}
	o.Logf("pgbouncer %s listening on %s (%s mode, %d server connections)", bin, addr, o.PoolMode, o.PoolSize)
	return s, nil
}

// Stop ends the PgBouncer process group.
func (s *Server) Stop() {
	if s == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	}
}

// Log returns the last lines of PgBouncer's log, for failure messages.
func (s *Server) Log(n int) string {
	b, _ := os.ReadFile(filepath.Join(s.Dir, "pgbouncer.log"))
	return lastLines(string(b), n)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
