package main

import (
	"strings"
	"testing"
	"time"
)

func TestSustainedTargets(t *testing.T) {
	q := func(name string, p95 float64) queryStats {
		return queryStats{Name: name, Title: name, Runs: 5, P95Ms: p95}
	}
	res := &sustainedResult{Status: "ok", Rows: 10_001_600, Minutes: []sustainedMinute{
		{Minute: 1, RowsPerS: 20_000, CollectorRSSMiB: 100},
		{Minute: 2, RowsPerS: 18_000, CollectorRSSMiB: 110},
		{Minute: 3, RowsPerS: 15_000, CollectorRSSMiB: 140},
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
	md := res.markdown()
	if !strings.Contains(md, "4 (partial)") || !strings.Contains(md, "### Query latency as the tables grow") {
		t.Errorf("markdown lacks the per-minute or query tables:\n%s", md)
	}
}
