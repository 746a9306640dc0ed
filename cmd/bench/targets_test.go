package main

import (
	"io"
	"math"
	"strings"
	"testing"
)

func TestTargets(t *testing.T) {
	res := func(key string, users int, rate, ratio float64) result {
		return result{Key: key, Users: users, RowsPerS: rate, RatioToCeiling: ratio, Status: "ok", Kind: "strategy"}
	}
	strategies := []result{
		res(preRenderedCopy, 10, 60_000, 0.90),
		res(plainCopy, 10, 45_000, 0.70),
		res(targetStrategy, 10, 54_000, 0.84),
		res(preRenderedCopy, 50, 50_000, 0.83),
		res(plainCopy, 50, 52_000, 0.85),
		res(targetStrategy, 50, 46_800, 0.78),
		// No plain COPY at 100 users.
		res(targetStrategy, 100, 61_000, 0.81),
		// A failed run of the target fails its scale; so do lost rows.
		{Key: targetStrategy, Users: 200, Status: "failed"},
		{Key: "insert-500", Users: 200, Status: "failed", LostRows: 1200},
		// 1,000 users: the target is 0.85.
		res(targetStrategy, 1000, 61_000, 0.84),
		res(plainCopy, 1000, 50_000, 0.7),
		// A scale without the target strategy and nothing lost is left out.
		res(plainCopy, 2000, 50_000, 0.7),
	}
	got := targets(strategies, nil)
	if len(got) != 5 {
		t.Fatalf("got %d targets, want 5: %+v", len(got), got)
	}
	yes, no := true, false
	want := []target{
		{Users: 10, RatioToCeiling: 0.84, MeetsCeiling: true, VsPlainCopy: 1.2, AheadOfCopy: &yes, VsPreRendered: 0.9},
		{Users: 50, RatioToCeiling: 0.78, MeetsCeiling: false, VsPlainCopy: 0.9, AheadOfCopy: &no, VsPreRendered: 0.936},
		{Users: 100, RatioToCeiling: 0.81, MeetsCeiling: true},
		{Users: 200},
		{Users: 1000, RatioToCeiling: 0.84, MeetsCeiling: false, VsPlainCopy: 1.22, AheadOfCopy: &yes},
	}
	for i, w := range want {
		g := got[i]
		if g.Users != w.Users || g.MeetsCeiling != w.MeetsCeiling || (g.AheadOfCopy == nil) != (w.AheadOfCopy == nil) ||
			(g.AheadOfCopy != nil && *g.AheadOfCopy != *w.AheadOfCopy) ||
			!near(g.VsPlainCopy, w.VsPlainCopy) || !near(g.VsPreRendered, w.VsPreRendered) {
			t.Errorf("target %d = %+v, want %+v", i, g, w)
		}
	}
	if got[3].NoRowsLost || got[3].LostRows != 1200 || got[0].LostRows != 0 || !got[0].NoRowsLost {
		t.Errorf("lost rows: %+v and %+v", got[0], got[3])
	}
	md := targetsMarkdown(got)
	for _, s := range []string{
		"| 10 | 0.84 | 0.80 | yes | 1.20 | yes | 0.90 | 0 | yes |",
		"| 50 | 0.78 | 0.80 | **no** | 0.90 | **no** | 0.94 | 0 | yes |",
		"| 100 | 0.81 | 0.80 | yes | – | – | – | 0 | yes |",
		"| 200 | failed | 0.80 | **no** | – | – | – | 1,200 (insert-500) | **no** |",
		"| 1000 | 0.84 | 0.85 | **no** | 1.22 | yes | – | 0 | yes |",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("Targets section lacks %q:\n%s", s, md)
		}
	}
	if targetsMarkdown(nil) != "" {
		t.Error("a run without the target strategy has a Targets section")
	}
}

// TestTargetsByRound: each run of the target strategy against the same
// round's best ceiling run and plain COPY run, and their medians, shown
// under the fastest-of-each figures.
func TestTargetsByRound(t *testing.T) {
	ceilings := []result{
		{Kind: "ceiling", Users: 10, Status: "ok", RowsPerS: 100, Runs: []float64{100, 80, 90}},
		{Kind: "ceiling", Users: 10, Status: "ok", RowsPerS: 95, Runs: []float64{90, 95, 0}},
		// An unlogged reference is not the ceiling.
		{Kind: "reference", Users: 10, Status: "ok", RowsPerS: 200, Runs: []float64{200, 200, 200}},
	}
	strategies := []result{
		{Key: targetStrategy, Users: 10, Status: "ok", RowsPerS: 90, RatioToCeiling: 0.9, Runs: []float64{90, 76, 0}},
		{Key: plainCopy, Users: 10, Status: "ok", RowsPerS: 60, Runs: []float64{60, 50, 70}},
	}
	got := targets(strategies, ceilings)
	if len(got) != 1 {
		t.Fatalf("got %d targets: %+v", len(got), got)
	}
	g := got[0]
	// Round 1: 90/100; round 2: 76/95; round 3: the target's run failed.
	if len(g.ByRound) != 3 || !near(g.ByRound[0], 0.9) || !near(g.ByRound[1], 0.8) || g.ByRound[2] != 0 || !near(g.MedianRatio, 0.85) {
		t.Errorf("by round = %v, median %v; want 0.90 / 0.80 / 0, 0.85", g.ByRound, g.MedianRatio)
	}
	if len(g.VsPlainByRound) != 3 || !near(g.VsPlainByRound[0], 1.5) || !near(g.VsPlainByRound[1], 1.52) || !near(g.MedianVsPlainCopy, 1.51) {
		t.Errorf("against plain COPY by round = %v, median %v; want 1.50 / 1.52 / 0, 1.51", g.VsPlainByRound, g.MedianVsPlainCopy)
	}
	md := targetsMarkdown(got)
	if !strings.Contains(md, "| 10 | 0.90 / 0.80 / – | 0.85 | 1.50 / 1.52 / – | 1.51 |") {
		t.Errorf("Targets section lacks the rounds:\n%s", md)
	}
	if _, m := roundRatios([]float64{1, 2, 3}, []float64{1, 1, 1}); m != 2 {
		t.Errorf("median of 1, 2, 3 = %v", m)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-3 }

func TestGuard(t *testing.T) {
	yes, no := true, false
	ahead := target{Users: 10, RatioToCeiling: 0.7, VsPlainCopy: 1.3, AheadOfCopy: &yes, NoRowsLost: true}
	// Below the ceiling target but ahead of plain COPY: reported, not failed.
	var sb strings.Builder
	if got := guard(&sb, []target{ahead}); got != 0 {
		t.Errorf("guard = %d for a run ahead of plain COPY, want 0:\n%s", got, sb.String())
	}
	if !strings.Contains(sb.String(), "## Targets") {
		t.Errorf("guard did not print the Targets section:\n%s", sb.String())
	}
	behind := target{Users: 50, VsPlainCopy: 0.99, AheadOfCopy: &no, NoRowsLost: true}
	lost := target{Users: 100, LostRows: 7, Lost: []string{"postgrescopy-redis"}}
	sb.Reset()
	if got := guard(&sb, []target{ahead, behind, lost}); got != 3 {
		t.Errorf("guard = %d with a scale behind plain COPY and one losing rows, want 3", got)
	}
	for _, s := range []string{
		"bench: target missed: 50 users: postgrescopy-redis at 0.99× copy-5000-maps, behind plain COPY",
		"bench: target missed: 100 users: 7 rows lost by postgrescopy-redis",
	} {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("guard output lacks %q:\n%s", s, sb.String())
		}
	}
	if strings.Contains(sb.String(), "target missed: 10 users") {
		t.Errorf("guard failed a scale ahead of plain COPY:\n%s", sb.String())
	}
	// Plain COPY not run at a scale: nothing to compare, no failure.
	if got := guard(io.Discard, []target{{Users: 10, NoRowsLost: true}}); got != 0 {
		t.Errorf("guard = %d without plain COPY, want 0", got)
	}
	if got := guard(io.Discard, nil); got != 0 {
		t.Errorf("guard = %d without targets, want 0", got)
	}
}
