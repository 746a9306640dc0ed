package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultURL is used when POSTGRESCOPY_TEST_URL is not set.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// URL returns the test server's URL.
func URL() string {
	if u := os.Getenv("POSTGRESCOPY_TEST_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Unavailable reports that something a test needs (a server, a built
// binary) is not there: under -short (`make unit`, no servers) the test is
// skipped with that one line; otherwise it fails, because `make test` provides
// everything and a skip would hide a test that never ran.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	if testing.Short() {
		t.Skipf("skipped under -short: "+format, args...)
	}
	t.Fatalf(format, args...)
}

// Pool connects to the test server; when none answers the test fails, or is
// skipped under -short (see Unavailable).
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, URL())
	if err != nil {
		t.Fatalf("pgtest: connect %s: %v", URL(), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		Unavailable(t, "pgtest: PostgreSQL at %s does not answer (run `make services`): %v", URL(), err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// Schema returns a new, unique schema name and drops the schema (with
// everything in it) when the test ends. The schema itself is not created.
func Schema(t testing.TB, pool *pgxpool.Pool) string {
	t.Helper()
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "pgct_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", name, err)
		}
	})
	return name
}

// Count returns the number of rows of schema.table.
func Count(t testing.TB, pool *pgxpool.Pool, schema, table string) int64 {
	t.Helper()
	var n int64
	err := pool.QueryRow(context.Background(), "SELECT count(*) FROM "+pgx.Identifier{schema, table}.Sanitize()).Scan(&n)
	if err != nil {
		t.Fatalf("pgtest: count %s.%s: %v", schema, table, err)
	}
	return n
}

// CitusURL is the Citus coordinator the Citus tests use,
// POSTGRESCOPY_CITUS_URL: `make test` starts one of its own
// (scripts/citus.sh) when the citus extension is installed. Without one the
// test is skipped, saying why (scripts/citus.sh's reason when it ran).
func CitusURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("POSTGRESCOPY_CITUS_URL"); u != "" {
		return u
	}
	if why := os.Getenv("POSTGRESCOPY_CITUS_SKIP"); why != "" {
		t.Skip(why)
	}
	t.Skip("POSTGRESCOPY_CITUS_URL is not set: no Citus coordinator (make test starts a local cluster with scripts/citus.sh " +
		"when the citus extension is installed; or set it to a coordinator's URL, docs/citus.md)")
	return ""
}
