package main

import (
	"os"
	"path/filepath"
	"testing"
)

// lossReport decides redis-empty's reported-loss column: it must take an
// Error line or a loss counter, and not the Warn lines of a wedged worker.
func TestLossReport(t *testing.T) {
	wedged := "2026-12-01T09:41:40.001Z\twarn\tpostgrescopyexporter@v0.0.0/flusher.go:139\twaiting for Redis\t" +
		`{"stream": "{p:traces}:stream", "error": "xreadgroup pending {p:traces}:stream: NOGROUP No such key"}` + "\n"
	reported := "2026-12-01T09:41:41.002Z\terror\tpostgrescopyexporter@v0.0.0/flusher.go:120\tRedis lost the stream and its consumer group (a restart without persistence, a failover to an empty replica, or deleted keys): entries it held are gone\t{}\n"
	for _, tc := range []struct {
		name, log, metrics string
		want               int
	}{
		{"warn lines only", wedged, "otelcol_postgrescopy_redis_stream_entries 0\n", 0},
		{"error line", wedged + reported, "", 1},
		{"counter at zero", "", "otelcol_postgrescopy_redis_lost_entries_total{otel_scope_name=\"x\"} 0\n", 0},
		{"counter above zero", "", "otelcol_postgrescopy_redis_lost_entries_total{otel_scope_name=\"x\"} 3\n", 1},
		{"both", reported, "otelcol_postgrescopy_redis_data_loss_total 1\n", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "collector.log")
			if err := os.WriteFile(path, []byte(tc.log), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := lossReport(path, tc.metrics); len(got) != tc.want {
				t.Errorf("lossReport = %q, want %d pieces of evidence", got, tc.want)
			}
		})
	}
}

func TestSelectScenarios(t *testing.T) {
	all, err := selectScenarios("all")
	if err != nil || len(all) != len(scenarios) {
		t.Fatalf("all: %d scenarios, %v", len(all), err)
	}
	two, err := selectScenarios("identical, kill")
	if err != nil || len(two) != 2 || two[0].name != "identical" || two[1].name != "kill" {
		t.Fatalf("identical, kill: %v, %v", two, err)
	}
	if _, err := selectScenarios("kill,nope"); err == nil {
		t.Fatal("an unknown scenario was accepted")
	}
}
