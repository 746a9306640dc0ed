package main

import (
	"context"
	"encoding/binary"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

func TestSustainedTargets(t *testing.T) {
	q := func(name string, p95 float64) queryStats {
		return queryStats{Name: name, Title: name, Runs: 40, P95Ms: p95}
	}
	res := &sustainedResult{Status: "ok", Rows: 10_001_600, Minutes: []sustainedMinute{
		{Minute: 1, RowsPerS: 20_000, CollectorRSSMiB: 100},
		{Minute: 2, RowsPerS: 18_000, CollectorRSSMiB: 110},
		{Minute: 3, RowsPerS: 15_000, CollectorRSSMiB: 140, Load: "7.52"},
		{Minute: 4, RowsPerS: 1_000, CollectorRSSMiB: 500, Partial: true}, // left out
	}, Samples: []querySample{
		{Queries: []queryStats{q(queryRecentErrors, 90), q(queryTraceLookup, 90), q(queryTokenCostLastDay, 9000)}},
		{Queries: []queryStats{q(queryRecentErrors, 4.9), q(queryTraceLookup, 5.1), {Name: queryTokenCostLastDay, Errors: 5}}},
	}}
	got := sustainedTargets(res, 10_000_000, 15*time.Minute)
	want := []bool{true, false, false, true, false, false}
	if len(got) != len(want) {
		t.Fatalf("%d targets, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Met != w {
			t.Errorf("target %q met = %v, want %v (%+v)", got[i].Name, got[i].Met, w, got[i])
		}
	}
	if got[1].Value != 0.75 || got[2].Value != 140.0/110 {
		t.Errorf("ratios: %v, %v", got[1].Value, got[2].Value)
	}
	// A failed run misses the rows target whatever it wrote.
	res.Status = "failed"
	if sustainedTargets(res, 10_000_000, 15*time.Minute)[0].Met {
		t.Error("a failed run met the rows target")
	}
	// A cheap query's p95 of 5 runs is their maximum: not judged.
	res.Status = "ok"
	res.Samples[1].Queries[0].Runs = 5
	if got := sustainedTargets(res, 10_000_000, 15*time.Minute)[3]; got.Met || !strings.Contains(got.Name, "fewer than") {
		t.Errorf("a p95 of 5 runs met its target: %+v", got)
	}
	md := res.markdown()
	if !strings.Contains(md, "4 (partial)") || !strings.Contains(md, "| 140 | 7.52 |") || !strings.Contains(md, "### Query latency as the tables grow") {
		t.Errorf("markdown lacks the per-minute or query tables:\n%s", md)
	}
}

// TestSustainedServer starts the sustained part's own server and checks
// that it runs with sustainedSettings (read back as the report shows them)
// and that stop removes it.
func TestSustainedServer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a PostgreSQL server")
	}
	if _, err := pglocal.BinDir(); err != nil {
		pgtest.Unavailable(t, "%v (make deps)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Not t.TempDir(): the postgres OS user must reach the data directory.
	b := &bench{tmp: os.TempDir(), progress: newProgress(1)}
	defer b.progress.finish()
	srv, url, err := b.startSustainedServer(ctx)
	defer srv.stop()
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	got := strings.Join(serverSettings(ctx, pool, sustainedShown), ", ")
	for _, want := range []string{"shared_buffers=4GB", "max_wal_size=16GB", "wal_compression=lz4", "jit=off", "checkpoint_timeout=15min", "synchronous_commit=on", "wal_init_zero=off"} {
		if !strings.Contains(got, want) {
			t.Errorf("settings %s lack %s", got, want)
		}
	}
	pool.Close()
	dir := srv.dir
	srv.stop()
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s still exists after stop (%v)", dir, err)
	}
}

// TestWritersBetween: a writer backend present at both marks counts its
// difference, one that appeared since counts whole, one gone counts nothing
// (its time is in the postmaster's children, the rest of the server's).
func TestWritersBetween(t *testing.T) {
	a := map[int]time.Duration{10: time.Second, 11: 2 * time.Second}
	c := map[int]time.Duration{10: 3 * time.Second, 12: 500 * time.Millisecond}
	if got, want := writersBetween(a, c), 2500*time.Millisecond; got != want {
		t.Fatalf("writersBetween = %s, want %s", got, want)
	}
	if got := writersBetween(nil, nil); got != 0 {
		t.Fatalf("no writers: %s", got)
	}
}

// TestSampleQueriesRoundTrips runs a query round on a database holding two
// loadgen users in the sustained part's schema: every query gets its runs,
// and each point query a SELECT 1 after each of its runs, on its own
// connection, which the targets name beside the point query's p95.
func TestSampleQueriesRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, u := sustainedDB(ctx, t, "pgcb_rounds_")
	readers, err := openReaders(ctx, u, 3, 10*time.Second)
	t.Cleanup(func() {
		for _, r := range readers {
			_ = r.conn.Close(context.Background())
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	prepareNamed(ctx, t, pool, sustainedSchema)
	writeTwoUsers(ctx, t, pool, sustainedSchema)
	qs, err := sustainedQueries("../../queries")
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{progress: newProgress(1)}
	defer b.progress.finish()
	s := &sampler{b: b, adm: pool, readers: readers, qs: qs, queryRuns: 4, budget: 5 * time.Second}
	got := s.sampleQueries(ctx)
	if len(got) != len(qs)+2 {
		t.Fatalf("%d query stats for %d queries, want 2 more (the point queries' round trips)", len(got), len(qs))
	}
	byName := map[string]queryStats{}
	for i, q := range got {
		if i < len(qs) && q.Name != qs[i].Name {
			t.Errorf("stats %d are of %q, want %q", i, q.Name, qs[i].Name)
		}
		byName[q.Name] = q
	}
	for _, name := range []string{queryRecentErrors, queryTraceLookup} {
		q, trip := byName[name], byName[name+"_round_trip"]
		if q.Runs != 4 || q.Errors != 0 {
			t.Errorf("%s: %d runs, %d errors, want 4 runs", name, q.Runs, q.Errors)
		}
		if trip.Runs != q.Runs+q.Errors || trip.P95Ms <= 0 || !strings.HasPrefix(trip.Title, "SELECT 1 after each run of: ") {
			t.Errorf("%s's round trips: %+v, want one a run of %+v", name, trip, q)
		}
	}
	if trip := byName[queryTokenCostLastDay+"_round_trip"]; trip.Runs != 0 {
		t.Errorf("the token cost query got round trips: %+v", trip)
	}
	res := &sustainedResult{Status: "ok", Samples: []querySample{{Queries: got}}}
	var labels []string
	for _, tg := range sustainedTargets(res, 1, time.Minute) {
		labels = append(labels, tg.Name)
	}
	if all := strings.Join(labels, "\n"); strings.Count(all, "SELECT 1 beside it: p95 ") != 2 {
		t.Errorf("targets do not name the round trips' p95 beside both point queries:\n%s", all)
	}
}

// sustainedDB is a new database, dropped after the test, with the sustained
// part's schema prepared in it: a pool on it and its URL.
func sustainedDB(ctx context.Context, t *testing.T, prefix string) (*pgxpool.Pool, string) {
	t.Helper()
	admin := pgtest.Pool(t)
	db := prefix + strconv.FormatInt(time.Now().UnixNano(), 36)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	u, err := dbURL(pgtest.URL(), db)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Close()
		if _, err := admin.Exec(context.Background(), "DROP DATABASE "+db+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", db, err)
		}
	})
	prepareNamed(ctx, t, pool, sustainedSchema)
	return pool, u
}

// TestTraceIDsSpread picks trace ids from a table of 20,000 one-span traces
// written in order: they are distinct, as many as asked, and come from the
// whole table, not from its oldest blocks (where a LIMIT on TABLESAMPLE
// would take them).
func TestTraceIDsSpread(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, _ := sustainedDB(ctx, t, "pgcb_traceids_")
	writeTwoUsers(ctx, t, pool, sustainedSchema)
	// Trace i's id holds i in its last 8 bytes.
	if _, err := pool.Exec(ctx, `CREATE TEMP TABLE one AS SELECT * FROM otel.spans_rows LIMIT 1;
		INSERT INTO otel.spans_rows SELECT (jsonb_populate_record(one, jsonb_build_object('trace_id', lpad(to_hex(i), 32, '0')))).*
		FROM one, generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	b := &bench{progress: newProgress(1)}
	defer b.progress.finish()
	s := &sampler{b: b, adm: pool, queryRuns: 50}
	ids := s.traceIDs(ctx)
	if len(ids) != 50 {
		t.Fatalf("%d trace ids, want 50", len(ids))
	}
	seen, older, newer := map[[16]byte]bool{}, 0, 0
	for _, a := range ids {
		id := a.([16]byte)
		if seen[id] {
			t.Errorf("trace id %x picked twice", id)
		}
		seen[id] = true
		switch i := binary.BigEndian.Uint64(id[8:]); {
		case binary.BigEndian.Uint64(id[:8]) != 0 || i < 1 || i > 20000: // a loadgen trace
		case i <= 10000:
			older++
		default:
			newer++
		}
	}
	// 50 picks, nearly all of the written traces: fewer than 10 in either
	// half is a chance of about one in 10^5 for a uniform pick.
	if older < 10 || newer < 10 {
		t.Errorf("trace ids from the older half: %d, from the newer half: %d; want both 10 or more", older, newer)
	}
}
