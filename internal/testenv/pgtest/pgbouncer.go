package pgtest

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgbouncer"
)

// StartPgBouncer runs a PgBouncer in transaction mode in front of the test
// server and stops it when the test ends. Its URL reaches the test database
// under the name "pgct".
func StartPgBouncer(t testing.TB) *pgbouncer.Server {
	t.Helper()
	if _, err := pgbouncer.Find(); err != nil {
		Unavailable(t, "pgtest: %v", err)
	}
	// Not t.TempDir: pgbouncer runs as the postgres user, which cannot enter
	// the test's private temp directory.
	dir, err := os.MkdirTemp("", "pgct-bouncer-")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := pgbouncer.Start(ctx, pgbouncer.Options{Upstream: URL(), Database: "pgct", PoolSize: 8, Dir: dir, Logf: t.Logf})
	if err != nil {
		t.Fatalf("pgtest: start pgbouncer: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
