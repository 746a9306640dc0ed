package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestDuringEndsWhenTheLastRowIsIn runs runCollector on a stand-in for the
// collector that logs one committed batch holding every row and then idles.
// The rows count that follows is held up by a lock that only the during
// function releases once its context ends: during must end when the last row
// is in, not after the count (a sampler still running then charged the
// count's seconds, and its scan, to the last minute of ingest).
func TestDuringEndsWhenTheLastRowIsIn(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	standInTables(ctx, t, pool, name)
	lock, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lock.Rollback(context.Background()) }()
	if _, err := lock.Exec(ctx, "LOCK TABLE "+schema.Qualified(name, tables.Tables[0].Store)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	fake := filepath.Join(dir, "collector")
	script := `#!/bin/sh
echo '{"level":"info","msg":"Load generation started"}'
sleep 0.3
echo '{"level":"debug","msg":"batch written","rows":10,"signal_rows":10}'
exec sleep 60
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &bench{collector: fake, tmp: dir, url: "postgres://unused", pool: pool, events: 10, collectorStall: time.Minute}

	var endedAt time.Time
	byTimer := false
	during := func(dctx context.Context) {
		select {
		case <-dctx.Done():
			endedAt = time.Now()
		case <-time.After(8 * time.Second):
			byTimer = true
		}
		_ = lock.Rollback(context.Background())
	}
	began := time.Now()
	_, err = b.runCollector(ctx, name, 0, 1, 1, "", 0, during)
	var lost *errLost
	if !errors.As(err, &lost) || lost.lost != 10 {
		t.Fatalf("runCollector: %v, want 10 rows lost (the stand-in writes none)", err)
	}
	if byTimer {
		t.Fatalf("during ran on for 8s after the last row was in, until the rows were counted")
	}
	if d := endedAt.Sub(began); d > 5*time.Second {
		t.Fatalf("during ended %s after the start, want about 0.3s", d)
	}
}

// TestCommittedBySignal: the rows of the batches the collector logs as
// written are counted per signal by the tables each batch names, so that the
// sustained part can give each signal's rate.
func TestCommittedBySignal(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	standInTables(ctx, t, pool, name)
	dir := t.TempDir()
	fake := filepath.Join(dir, "collector")
	script := `#!/bin/sh
echo '{"level":"info","msg":"Load generation started"}'
echo '{"level":"debug","msg":"batch written","rows":6,"signal_rows":5,"tables":["spans"]}'
echo '{"level":"debug","msg":"batch written","rows":3,"signal_rows":3,"tables":["logs"]}'
echo '{"level":"debug","msg":"batch written","rows":1,"signal_rows":1,"tables":["metrics_gauge","metrics_sum"]}'
echo '{"level":"debug","msg":"batch written","rows":2,"signal_rows":1,"tables":["metrics_histogram"]}'
exec sleep 60
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &bench{collector: fake, tmp: dir, url: "postgres://unused", pool: pool, events: 10, collectorStall: time.Minute}
	var got [numSignals]int64
	during := func(dctx context.Context) {
		<-dctx.Done()
		for i := range got {
			got[i] = b.live.bySignal[i].Load()
		}
	}
	if _, err := b.runCollector(ctx, name, 0, 1, 1, "", 0, during); !errors.As(err, new(*errLost)) {
		t.Fatalf("runCollector: %v, want the stand-in's rows lost", err)
	}
	if want := [numSignals]int64{signalSpans: 5, signalLogs: 3, signalMetrics: 2}; got != want {
		t.Fatalf("committed by signal %v, want %v", got, want)
	}
}

// TestWarmUpIsNotTimed: with a warm-up, the rows the collector logged
// before generation started are the warm-up's: they must all be in the
// tables by then, and they neither count towards the run nor end its clock.
func TestWarmUpIsNotTimed(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "collector")
	// The warm-up's batch (10 rows, which the test puts in the tables), its
	// pause, then the run's batch, half a second after generation starts.
	script := `#!/bin/sh
echo '{"level":"debug","msg":"batch written","rows":10,"signal_rows":10,"tables":["spans"]}'
echo '{"level":"info","msg":"Load generation warmed up"}'
sleep 1
echo '{"level":"info","msg":"Load generation started"}'
sleep 0.5
echo '{"level":"debug","msg":"batch written","rows":10,"signal_rows":10,"tables":["spans"]}'
exec sleep 60
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &bench{collector: fake, tmp: dir, url: "postgres://unused", pool: pool, events: 10, collectorStall: time.Minute}
	for _, warmRows := range []int{10, 4} {
		name := pgtest.Schema(t, pool)
		standInTables(ctx, t, pool, name)
		if _, err := pool.Exec(ctx, "INSERT INTO "+schema.Qualified(name, tables.Tables[0].Store)+" SELECT generate_series(1, $1)", warmRows); err != nil {
			t.Fatal(err)
		}
		run, err := b.runCollector(ctx, name, 0, 1, 1, "", 1, nil)
		if warmRows < 10 {
			if err == nil || !strings.Contains(err.Error(), "the warm-up's rows were not all written") || !strings.Contains(err.Error(), "(4 rows in, 10 sent)") {
				t.Fatalf("runCollector with 4 of the warm-up's 10 rows in: %v, want the warm-up named", err)
			}
			continue
		}
		// The run's rows are not in the tables (the stand-in writes none):
		// lost, once the run's own batch was logged, not the warm-up's.
		var lost *errLost
		if !errors.As(err, &lost) || lost.lost != 10 {
			t.Fatalf("runCollector: %v, want the run's 10 rows lost", err)
		}
		if run.elapsed < 500*time.Millisecond {
			t.Fatalf("the clock stopped %s after the start, before the run's batch (0.5s): the warm-up's batch ended it", run.elapsed)
		}
		if run.warmup != 1 {
			t.Fatalf("warmup %d, want 1", run.warmup)
		}
		cfg, err := os.ReadFile(filepath.Join(dir, "collector-1.yaml"))
		if err != nil || !strings.Contains(string(cfg), `"warmup_users": 1`) {
			t.Fatalf("the collector's config does not ask the receiver for the warm-up (%v):\n%s", err, cfg)
		}
	}
}

// standInTables creates schema name with a one-column table for each signal
// table: what runCollector counts the rows of, for a stand-in collector that
// writes none.
func standInTables(ctx context.Context, t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	for _, tb := range tables.Tables[:tables.NumSignalTables] {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+schema.Qualified(name, tb.Store)+" (x int)"); err != nil {
			t.Fatal(err)
		}
	}
}
