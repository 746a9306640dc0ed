package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// pgServer is a throwaway PostgreSQL cluster (trust auth for postgres on
// 127.0.0.1) that a scenario may stop and start: an outage without touching
// the machine's own server.
type pgServer struct {
	port                          int
	dir, data, logFile, pgCtlPath string
	owner                         *user.User
	running                       bool
}

func (p *pgServer) url() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", p.port)
}

// startPG creates and starts a cluster in a new temp dir. As root the server
// runs as the postgres OS user (initdb and postgres refuse root), as
// internal/testenv/pgtest does.
func startPG(ctx context.Context) (*pgServer, error) {
	bin, err := pglocal.BinDir()
	if err != nil {
		return nil, err
	}
	p := &pgServer{pgCtlPath: filepath.Join(bin, "pg_ctl")}
	if os.Geteuid() == 0 {
		if p.owner, err = user.Lookup("postgres"); err != nil {
			return nil, fmt.Errorf("running as root needs a postgres OS user for the throwaway server: %w", err)
		}
	}
	// Not under the soak's temp dir: the postgres user must traverse it.
	if p.dir, err = os.MkdirTemp("", "postgrescopy-soak-pg-"); err != nil {
		return nil, err
	}
	p.data, p.logFile = filepath.Join(p.dir, "data"), filepath.Join(p.dir, "server.log")
	sock := filepath.Join(p.dir, "sock")
	if err := os.Mkdir(sock, 0o700); err != nil {
		return nil, err
	}
	if err := p.chown(); err != nil {
		return nil, err
	}
	if out, err := p.runAs(filepath.Join(bin, "initdb"), "-D", p.data, "--auth=trust", "--username=postgres",
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	for attempt := 1; ; attempt++ {
		if p.port, err = ports.One(); err != nil {
			return nil, err
		}
		// Durable settings are beside the point here: the server is only
		// ever stopped cleanly, and its page cache survives that.
		conf := fmt.Sprintf("listen_addresses = '127.0.0.1'\nport = %d\nunix_socket_directories = '%s'\n"+
			"fsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 60\nshared_buffers = 32MB\n", p.port, sock)
		if err := os.WriteFile(filepath.Join(p.data, "postgresql.auto.conf"), []byte(conf), 0o600); err != nil {
			return nil, err
		}
		if err := p.chown(); err != nil {
			return nil, err
		}
		err := p.start(ctx)
		if err == nil {
			return p, nil
		}
		if attempt == 3 {
			return nil, err
		}
	}
}

// start starts the stopped cluster on its port and waits until it answers.
func (p *pgServer) start(ctx context.Context) error {
	if out, err := p.runAs(p.pgCtlPath, "-D", p.data, "-l", p.logFile, "-w", "-t", "30", "start"); err != nil {
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, tailLines(p.logFile, 10))
	}
	p.running = true
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := pgx.Connect(ctx, p.url())
		if err == nil {
			err = c.Ping(ctx)
			_ = c.Close(ctx)
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("throwaway PostgreSQL on port %d does not answer: %w", p.port, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop shuts the server down in fast mode: sessions are disconnected, as in
// an outage.
func (p *pgServer) stop() error {
	if !p.running {
		return nil
	}
	if out, err := p.runAs(p.pgCtlPath, "-D", p.data, "-m", "fast", "-w", "stop"); err != nil {
		return fmt.Errorf("pg_ctl stop: %w\n%s", err, out)
	}
	p.running = false
	return nil
}

// remove stops the server and deletes its directory.
func (p *pgServer) remove() {
	if p == nil {
		return
	}
	if p.running {
		_, _ = p.runAs(p.pgCtlPath, "-D", p.data, "-m", "immediate", "-w", "stop")
		p.running = false
	}
	_ = os.RemoveAll(p.dir)
}

func (p *pgServer) chown() error {
	if p.owner == nil {
		return nil
	}
	return pglocal.ChownTree(p.dir, p.owner.Uid, p.owner.Gid)
}

func (p *pgServer) runAs(name string, args ...string) ([]byte, error) {
	if p.owner != nil {
		args = append([]string{"-u", p.owner.Username, "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = p.dir
	// The postmaster pg_ctl starts must not hold our output pipe open.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}
