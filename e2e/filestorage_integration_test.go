package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// kill ends the collector with SIGKILL, as a crash: nothing is drained.
func (c *collector) kill(t *testing.T) {
	t.Helper()
	c.stopped = true
	if err := c.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill collector: %v", err)
	}
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatalf("collector still running 10s after SIGKILL")
	}
}

// TestFileStorageSurvivesKillDuringOutage: in direct mode with
// `sending_queue: {storage: file_storage}` (the README's advice), requests
// the collector acknowledged while PostgreSQL was down survive a kill -9 of
// the collector during the outage, and are stored exactly once after both
// come back (issue 15 item 3).
func TestFileStorageSurvivesKillDuringOutage(t *testing.T) {
	begin := time.Now()
	srv := pgtest.StartTLSServer(t) // its own cluster, so it can be stopped
	pool := srv.Pool(t)
	const schema = "e2e_filestorage"
	queueDir := t.TempDir()

	config := func(ep endpoints) map[string]any {
		exp := pgExporter(srv.URL("verify-full"), schema)
		exp["password"] = srv.Password
		exp["sending_queue"] = map[string]any{"storage": "file_storage"}
		// A short backoff keeps the test quick; max_elapsed_time is left at
		// the exporter's default.
		exp["retry_on_failure"] = map[string]any{"initial_interval": "100ms", "max_interval": "500ms"}
		cfg := collectorConfig(ep, map[string]any{"postgrescopy": exp}, "info")
		cfg["extensions"].(map[string]any)["file_storage"] = map[string]any{"directory": queueDir}
		svc := cfg["service"].(map[string]any)
		svc["extensions"] = append(svc["extensions"].([]string), "file_storage")
		return cfg
	}

	ep := newEndpoints(t)
	c := startCollector(t, ep, config(ep))
	// The schema exists once the exporter has prepared it.
	waitRows(t, c, pool, schema, map[string]int64{}, 30*time.Second)

	srv.Stop(t)

	const senders, requests, perRequest = 4, 10, 25
	want := map[int64]bool{}
	batches := make([][]ptrace.Traces, senders)
	for g := range senders {
		for r := range requests {
			ids := make([]uint64, perRequest)
			for i := range ids {
				ids[i] = uint64(g)<<48 | uint64(r)<<16 | uint64(i+1)
				want[int64(ids[i])] = true
			}
			traceID := pcommon.TraceID{0xf5, byte(g), byte(r), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}
			batches[g] = append(batches[g], makeTraces(ids, traceID))
		}
	}
	// Every export must be acknowledged while PostgreSQL is down: they are
	// then only in the queue's file.
	sendTraces(t, ep.grpc, batches)
	if t.Failed() {
		t.FailNow()
	}
	c.kill(t)

	srv.Start(t)
	ep2 := newEndpoints(t)
	c2 := startCollector(t, ep2, config(ep2))
	waitRows(t, c2, pool, schema, map[string]int64{"spans": int64(len(want))}, 30*time.Second)
	c2.stop(t)

	rows, err := pool.Query(context.Background(), "SELECT span_id, count(*) FROM "+pgx.Identifier{schema, "spans"}.Sanitize()+" GROUP BY span_id")
	if err != nil {
		t.Fatalf("query spans: %v", err)
	}
	seen := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatalf("scan: %v", err)
		}
		seen[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read spans: %v", err)
	}
	for id := range want {
		if seen[id] != 1 {
			t.Errorf("span_id %016x stored %d times, want once", uint64(id), seen[id])
		}
	}
	for id := range seen {
		if !want[id] {
			t.Errorf("span_id %016x was never sent", uint64(id))
		}
	}
	t.Logf("%d acknowledged spans in %d requests stored exactly once after kill -9 during the outage; test took %v",
		len(want), senders*requests, time.Since(begin).Round(time.Millisecond))
}
