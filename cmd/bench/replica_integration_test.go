package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestReplicaCluster sets up the mixed part's primary and streaming replica,
// checks that a write on the primary is replayed and readable on the replica
// and that lag can be sampled, and that stop removes everything.
func TestReplicaCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two PostgreSQL servers")
	}
	if _, err := pglocal.BinDir(); err != nil {
		pgtest.Unavailable(t, "%v (make deps)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := &replicaCluster{}
	defer c.stop()
	if err := startReplicaCluster(ctx, os.TempDir(), t.Logf, c); err != nil {
		t.Fatal(err)
	}
	dir := c.dir
	primary, err := pgxpool.New(ctx, c.PrimaryURL)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close()
	replica, err := pgxpool.New(ctx, c.ReplicaURL)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	if _, err := primary.Exec(ctx, "CREATE TABLE t AS SELECT g FROM generate_series(1, 1000) g"); err != nil {
		t.Fatal(err)
	}
	if _, err := waitReplayed(ctx, primary, replica, time.Minute); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := replica.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 1000 {
		t.Fatalf("replica sees %d rows (%v), want 1000", n, err)
	}
	if _, err := replica.Exec(ctx, "CREATE TABLE u (x int)"); err == nil {
		t.Fatal("the replica accepted a write")
	}
	if _, err := sampleLag(ctx, primary); err != nil {
		t.Fatalf("sample lag: %v", err)
	}
	primary.Close()
	replica.Close()
	c.stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after stop (%v)", dir, err)
	}
}

func TestLagStats(t *testing.T) {
	var l lagRecorder
	for i := 1; i <= 100; i++ {
		l.samples = append(l.samples, lagSample{bytes: int64(i) * 1000, delay: time.Duration(i) * time.Millisecond})
	}
	l.caughtUp(30 * time.Millisecond)
	l.caughtUp(10 * time.Millisecond)
	st := l.stats()
	if st.Samples != 100 || st.MaxBytes != 100000 || st.P95Bytes != 95000 || st.MaxMs != 100 || st.P95Ms != 95 || st.CatchUpMs != 30 {
		t.Fatalf("stats = %+v", st)
	}
	if (&lagRecorder{}).stats().Samples != 0 {
		t.Fatal("empty recorder has samples")
	}
}
