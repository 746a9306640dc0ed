package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// smallFS mounts a tmpfs of size (e.g. "30m") on a new directory, so that a
// full disk is certain; it skips unless the test runs as root.
func smallFS(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the full disk is a small tmpfs mounted by the test (mount -t tmpfs)")
	}
	dir := filepath.Join(t.TempDir(), "queue")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("mkdir: %v", err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount a %s tmpfs: %v: %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// TestFileStorageFullDiskLosesNothingAcknowledged: in direct mode with a
// file_storage queue on a filesystem too small for the backlog, with
// PostgreSQL stopped, requests are sent until the collector refuses them;
// the collector is then killed (kill -9) and restarted with PostgreSQL up.
// Every acknowledged span must be stored exactly once: the queue's start
// moves the requests that were in flight back into the queue, which needs
// room on its disk, and the exporter keeps that room
// (persistent_queue::min_free).
func TestFileStorageFullDiskLosesNothingAcknowledged(t *testing.T) {
	begin := time.Now()
	queueDir := smallFS(t, "30m")
	srv := pgtest.StartTLSServer(t) // its own cluster, so it can be stopped
	pool := srv.Pool(t)
	const schema = "e2e_diskfull"

	config := func(ep endpoints) map[string]any {
		exp := pgExporter(srv.URL("verify-full"), schema)
		exp["password"] = srv.Password
		exp["sending_queue"] = map[string]any{"storage": "file_storage"}
		exp["retry_on_failure"] = map[string]any{"initial_interval": "100ms", "max_interval": "500ms"}
		cfg := collectorConfig(ep, map[string]any{"postgrescopy": exp}, "info")
		cfg["extensions"].(map[string]any)["file_storage"] = map[string]any{
			"directory": queueDir,
			// What the docs advise on a small disk: the file shrinks once
			// the backlog has drained.
			"compaction": map[string]any{
				"on_rebound": true, "directory": queueDir, "check_interval": "1s",
				"rebound_needed_threshold_mib": 8, "rebound_trigger_threshold_mib": 2,
			},
		}
		svc := cfg["service"].(map[string]any)
		svc["extensions"] = append(svc["extensions"].([]string), "file_storage")
		return cfg
	}

	ep := newEndpoints(t)
	c := startCollector(t, ep, config(ep))
	waitRows(t, c, pool, schema, map[string]int64{}, 30*time.Second)
	srv.Stop(t)

	acked, refused := sendUntilRefused(t, ep.grpc)
	if t.Failed() {
		t.FailNow()
	}
	if len(acked) == 0 {
		t.Fatalf("no request was acknowledged before the refusals (%d refused)", refused)
	}
	t.Logf("%d spans acknowledged, %d requests refused; the queue's filesystem: %s", len(acked), refused, dfLine(t, queueDir))
	c.kill(t)

	srv.Start(t)
	ep2 := newEndpoints(t)
	c2 := startCollector(t, ep2, config(ep2))
	seen := waitSpanIDs(t, pool, schema, acked, 90*time.Second)
	missing, twice := 0, 0
	for id := range acked {
		switch n := seen[id]; {
		case n == 0:
			missing++
		case n > 1:
			twice++
		}
	}
	for id, n := range seen {
		if !acked[id] && n > 1 {
			twice++ // a refused request may still have been stored, once
		}
	}
	if missing > 0 || twice > 0 {
		t.Errorf("acknowledged %d spans, stored %d of them, %d missing, %d stored more than once", len(acked), len(acked)-missing, missing, twice)
	}
	if log := c2.log(t); strings.Contains(log, "Errors occurred while moving items for dispatching back to queue") {
		t.Errorf("the restarted queue could not move its in-flight requests back")
	}
	c2.stop(t)
	t.Logf("acknowledged %d, stored %d, missing %d, duplicated %d; refused %d requests; the queue's filesystem after the drain: %s; test took %v",
		len(acked), len(acked)-missing, missing, twice, refused, dfLine(t, queueDir), time.Since(begin).Round(time.Millisecond))
}

// sendUntilRefused sends requests of 100 spans of about 1 KB each from 4
// OTLP clients until each has been refused 3 times, and returns the span ids
// of the acknowledged requests.
func sendUntilRefused(t *testing.T, grpcAddr string) (map[int64]bool, int) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	const senders, perRequest, refusals = 4, 100, 3
	var mu sync.Mutex
	acked := map[int64]bool{}
	refused := 0
	pad := strings.Repeat("x", 1000)
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() {
			failed := 0
			for r := 0; failed < refusals; r++ {
				if r >= 1<<16 {
					t.Errorf("sender %d: %d requests and still not refused", g, r)
					return
				}
				ids := make([]uint64, perRequest)
				for i := range ids {
					ids[i] = uint64(g)<<48 | uint64(r)<<16 | uint64(i+1)
				}
				td := makeTraces(ids, pcommon.TraceID{0xdf, byte(g), byte(r >> 8), byte(r), 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
				spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
				for i := range spans.Len() {
					spans.At(i).Attributes().PutStr("pad", pad)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
				cancel()
				mu.Lock()
				if err != nil {
					failed++
					refused++
					if refused == 1 {
						t.Logf("first refusal: %v", err)
					}
				} else {
					for _, id := range ids {
						acked[int64(id)] = true
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked, refused
}

// waitSpanIDs polls the spans table until every id of want is there (or
// timeout) and returns how often each stored span_id is.
func waitSpanIDs(t *testing.T, pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string, want map[int64]bool, timeout time.Duration,
) map[int64]int64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		seen, err := spanIDs(pool, schema)
		if err == nil {
			all := true
			for id := range want {
				if seen[id] == 0 {
					all = false
					break
				}
			}
			if all || time.Now().After(deadline) {
				return seen
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("read spans: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func spanIDs(pool interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, schema string,
) (map[int64]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := pool.Query(ctx, "SELECT span_id, count(*) FROM "+pgx.Identifier{schema, "spans"}.Sanitize()+" GROUP BY span_id")
	if err != nil {
		return nil, err
	}
	seen := map[int64]int64{}
	for rows.Next() {
		var id, n int64
		if err := rows.Scan(&id, &n); err != nil {
			return nil, err
		}
		seen[id] = n
	}
	return seen, rows.Err()
}

// dfLine is df's line for dir (size, used, free).
func dfLine(t *testing.T, dir string) string {
	out, err := exec.Command("df", "-k", dir).CombinedOutput()
	if err != nil {
		return "df: " + errors.Join(err, errors.New(string(out))).Error()
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.Join(strings.Fields(lines[len(lines)-1]), " ")
}
