package e2e

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestTelemetrygenThroughPgBouncer is the end-to-end run through a real
// PgBouncer in transaction mode: the built collector migrates, checks and
// writes through it, and every item sent arrives exactly once.
func TestTelemetrygenThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.StartPgBouncer(t)
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ep := newEndpoints(t)
	exp := pgExporter(bouncer.URL, schema)
	exp["query_exec_mode"] = "simple_protocol"
	c := startCollector(t, ep, collectorConfig(ep, map[string]any{"postgrescopy": exp}, "info"))

	const traces, childSpans, gauges, logs = 300, 2, 200, 400
	want := map[string]int64{
		"spans":         traces * (1 + childSpans),
		"metrics_gauge": gauges,
		"logs":          logs,
	}
	grpcArgs := []string{"--otlp-insecure", "--otlp-endpoint", ep.grpc, "--rate", "0"}
	runs := [][]string{
		append([]string{"traces", "--traces", strconv.Itoa(traces), "--child-spans", strconv.Itoa(childSpans)}, grpcArgs...),
		append([]string{"metrics", "--metric-type", "Gauge", "--metrics", strconv.Itoa(gauges)}, grpcArgs...),
		append([]string{"logs", "--logs", strconv.Itoa(logs)}, grpcArgs...),
	}
	var wg sync.WaitGroup
	for _, args := range runs {
		wg.Go(func() { telemetrygen(t, args...) })
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	waitRows(t, c, pool, schema, want, 30*time.Second)
	if err := c.terminate(t); err != nil {
		t.Fatalf("collector exit: %v\n%s", err, tail(c.log(t), 30))
	}
	assertRows(t, pool, schema, want)
}
