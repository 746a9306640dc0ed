package pgtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// TLSServer is a throwaway PostgreSQL cluster that accepts only TLS
// connections (hostssl, scram-sha-256) on 127.0.0.1 and 127.0.0.2.
type TLSServer struct {
	// Host is the address to connect to; the certificate is valid for it.
	Host string
	// OtherHost reaches the same server but is not in the certificate, so
	// verify-full against it must fail.
	OtherHost string
	Port      int
	// CAFile is the PEM file of the CA that signed the server certificate.
	CAFile   string
	User     string
	Password string
	// Dir holds the cluster, the certificates and the server log.
	Dir string

	owner   *user.User
	pgCtl   string
	data    string
	logFile string
	running bool
}

// URL returns a URL for the server without the password. sslmode "" leaves
// sslmode out; verify-ca and verify-full also name CAFile as sslrootcert.
func (s *TLSServer) URL(sslmode string) string {
	return s.url(s.Host, sslmode)
}

// URLFor is URL with another host, e.g. OtherHost.
func (s *TLSServer) URLFor(host, sslmode string) string {
	return s.url(host, sslmode)
}

func (s *TLSServer) url(host, sslmode string) string {
	u := url.URL{
		Scheme: "postgres",
		User:   url.User(s.User),
		Host:   net.JoinHostPort(host, strconv.Itoa(s.Port)),
		Path:   "/postgres",
	}
	q := url.Values{}
	if sslmode != "" {
		q.Set("sslmode", sslmode)
	}
	if sslmode == "verify-ca" || sslmode == "verify-full" {
		q.Set("sslrootcert", s.CAFile)
	}
	u.RawQuery = q.Encode()
	return u.String()
}

// Pool connects with verify-full and the password; it is closed when the
// test ends.
func (s *TLSServer) Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pc, err := pgxpool.ParseConfig(s.URL("verify-full"))
	if err != nil {
		t.Fatalf("pgtest: parse TLS URL: %v", err)
	}
	pc.ConnConfig.Password = s.Password
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatalf("pgtest: TLS pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// StartTLSServer creates and starts a TLS-only cluster with a fresh CA; the
// server is stopped and its directory removed when the test ends. The
// binaries come from POSTGRESCOPY_PG_BIN, else /usr/lib/postgresql/*/bin or
// PATH. As root, the server runs as the "postgres" OS user, because initdb
// and postgres refuse to run as root.
func StartTLSServer(t testing.TB) *TLSServer {
	t.Helper()
	bin, err := pglocal.BinDir()
	if err != nil {
		Unavailable(t, "pgtest: %v (make deps)", err)
	}
	var owner *user.User
	if os.Geteuid() == 0 {
		if owner, err = user.Lookup("postgres"); err != nil {
			t.Fatalf("pgtest: running as root needs a postgres OS user to run the server: %v", err)
		}
	}

	// Not t.TempDir: its parent is root-only, which the postgres user cannot
	// traverse.
	dir, err := os.MkdirTemp("", "pgtls-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })

	pw := make([]byte, 12)
	_, _ = rand.Read(pw)
	s := &TLSServer{
		Host:      "127.0.0.1",
		OtherHost: "127.0.0.2",
		CAFile:    filepath.Join(dir, "ca.crt"),
		User:      "tlsuser",
		Password:  "pw" + hex.EncodeToString(pw),
		Dir:       dir,
	}
	certFile, keyFile := filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	if err := writeCerts(s.CAFile, certFile, keyFile); err != nil {
		t.Fatalf("pgtest: certificates: %v", err)
	}
	pwFile := filepath.Join(dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(s.Password+"\n"), 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := chownAll(dir, owner); err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	data := filepath.Join(dir, "data")
	if out, err := runAs(owner, dir, filepath.Join(bin, "initdb"), "-D", data,
		"--auth=scram-sha-256", "--username="+s.User, "--pwfile="+pwFile,
		"--encoding=UTF8", "--locale=C", "--no-sync", "--no-instructions"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	_ = os.Remove(pwFile)
	sockDir := filepath.Join(dir, "sock")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	// Only hostssl lines: a plaintext client finds no pg_hba.conf entry.
	hba := "hostssl all all 127.0.0.0/8 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if err := chownAll(dir, owner); err != nil {
		t.Fatalf("pgtest: %v", err)
	}

	logFile := filepath.Join(dir, "server.log")
	pgCtl := filepath.Join(bin, "pg_ctl")
	// The free port is found by binding and releasing it, so another process
	// may take it before postgres does: retry with a new port.
	for attempt := 1; ; attempt++ {
		s.Port, err = ports.One()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		conf := fmt.Sprintf(`
listen_addresses = '%s,%s'
port = %d
unix_socket_directories = '%s'
ssl = on
ssl_cert_file = '%s'
ssl_key_file = '%s'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 50
shared_buffers = 16MB
`, s.Host, s.OtherHost, s.Port, sockDir, certFile, keyFile)
		if err := os.WriteFile(filepath.Join(data, "postgresql.auto.conf"), []byte(conf), 0o600); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		if err := chownAll(data, owner); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		out, err := runAs(owner, dir, pgCtl, "-D", data, "-l", logFile, "-w", "-t", "30", "start")
		if err == nil {
			break
		}
		serverLog, _ := os.ReadFile(logFile)
		if attempt == 3 {
			t.Fatalf("pgtest: pg_ctl start: %v\n%s\nserver log:\n%s", err, out, serverLog)
		}
		t.Logf("pgtest: pg_ctl start on port %d failed, retrying: %v", s.Port, err)
	}
	s.owner, s.pgCtl, s.data, s.logFile, s.running = owner, pgCtl, data, logFile, true
	t.Cleanup(func() {
		if !s.running {
			return
		}
		if out, err := runAs(owner, dir, pgCtl, "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
			t.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
		}
	})

	if err := s.waitReady(); err != nil {
		serverLog, _ := os.ReadFile(logFile)
		t.Fatalf("pgtest: TLS server does not answer: %v\nserver log:\n%s", err, serverLog)
	}
	return s
}

// Stop shuts the server down (fast mode: sessions are disconnected), as an
// outage or the first half of a restart.
func (s *TLSServer) Stop(t testing.TB) {
	t.Helper()
	if out, err := runAs(s.owner, s.Dir, s.pgCtl, "-D", s.data, "-m", "fast", "-w", "stop"); err != nil {
		t.Fatalf("pgtest: pg_ctl stop: %v\n%s", err, out)
	}
	s.running = false
}

// Start starts a stopped server again on the same port and waits for it.
func (s *TLSServer) Start(t testing.TB) {
	t.Helper()
	if out, err := runAs(s.owner, s.Dir, s.pgCtl, "-D", s.data, "-l", s.logFile, "-w", "-t", "30", "start"); err != nil {
		t.Fatalf("pgtest: pg_ctl start: %v\n%s", err, out)
	}
	s.running = true
	if err := s.waitReady(); err != nil {
		t.Fatalf("pgtest: server does not answer after start: %v", err)
	}
}

// waitReady connects over verify-full TLS until the server answers a query.
func (s *TLSServer) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pc, err := pgxpool.ParseConfig(s.URL("verify-full"))
	if err != nil {
		return err
	}
	pc.ConnConfig.Password = s.Password
	for {
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err == nil {
			err = pool.Ping(ctx)
			pool.Close()
			if err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runAs runs a command as owner (nil: the current user) in dir.
func runAs(owner *user.User, dir, name string, args ...string) ([]byte, error) {
	if owner != nil {
		args = append([]string{"-u", owner.Username, "--", name}, args...)
		name = "runuser"
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	// pg_ctl's postmaster must not keep our output pipe open forever.
	cmd.WaitDelay = 5 * time.Second
	return cmd.CombinedOutput()
}

func chownAll(dir string, owner *user.User) error {
	if owner == nil {
		return nil
	}
	return pglocal.ChownTree(dir, owner.Uid, owner.Gid)
}

// writeCerts writes a new CA and a server certificate for localhost,
// 127.0.0.1 and ::1 signed by it, all ECDSA P-256.
func writeCerts(caFile, certFile, keyFile string) error {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "pgtest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}

	if err := writePEM(caFile, "CERTIFICATE", caDER, 0o644); err != nil {
		return err
	}
	if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
		return err
	}
	// postgres refuses a key file that its group or others can read.
	return writePEM(keyFile, "PRIVATE KEY", keyDER, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode)
}
