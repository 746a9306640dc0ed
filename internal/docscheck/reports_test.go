package docscheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tree writes files (path relative to a new temporary root: content) and
// returns the root.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, content := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func lines(n int) string { return strings.Repeat("a line\n", n) }

func TestCheckReadmeLengthFailsPastTheLimit(t *testing.T) {
	if err := CheckReadmeLength(tree(t, map[string]string{"README.md": lines(450)}), 450); err != nil {
		t.Errorf("a README of 450 lines: %v", err)
	}
	// The last line without its newline counts too.
	for _, readme := range []string{lines(451), lines(450) + "no newline"} {
		err := CheckReadmeLength(tree(t, map[string]string{"README.md": readme}), 450)
		if err == nil || !strings.Contains(err.Error(), "451 lines") {
			t.Errorf("a README of 451 lines passed: %v", err)
		}
	}
	if err := CheckReadmeLength(t.TempDir(), 450); err == nil {
		t.Error("a missing README passed")
	}
}

func TestUncitedReportsNamesWhatNoPageCites(t *testing.T) {
	root := tree(t, map[string]string{
		"README.md":    "From [the run](bench/results/run-1.md).\n",
		"docs/perf.md": "See [`soak.md`](../bench/results/soak.md) and bench/results/latest.* for the newest.\n",
		// Cited, with its data and charts.
		"bench/results/run-1.md":             "",
		"bench/results/run-1.json":           "",
		"bench/results/run-1.png":            "",
		"bench/results/run-1-throughput.png": "",
		"bench/results/soak.md":              "",
		// Not cited: an older run, its data, a chart of a report that is
		// not cited, and a file the pattern latest.* does not cite.
		"bench/results/run-0.md":           "",
		"bench/results/run-0.json":         "",
		"bench/results/soak-1-latency.png": "",
		"bench/results/latest.md":          "",
		// Not the data of run-1.md: only its own .json and charts are.
		"bench/results/run-1-2.json": "",
	})
	got, err := UncitedReports(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"latest.md", "run-0.json", "run-0.md", "run-1-2.json", "soak-1-latency.png"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("uncited: %q, want %q", got, want)
	}
}

func TestMissingReportsNamesEachCitationOfAMissingFile(t *testing.T) {
	root := tree(t, map[string]string{
		"README.md":             "From bench/results/here.md and [gone](bench/results/gone.md).\n",
		"docs/a.md":             "Also [gone](../bench/results/gone.md), twice: ../bench/results/gone.md.\n",
		"docs/b.md":             "The data: `bench/results/gone.json`.\n",
		"CHANGELOG.md":          "Measured in bench/results/old.md (not a citing page).\n",
		"bench/results/here.md": "",
	})
	got, err := MissingReports(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"README.md: bench/results/gone.md", "docs/a.md: bench/results/gone.md", "docs/b.md: bench/results/gone.json"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("missing: %q, want %q", got, want)
	}
}

// The repository itself: README.md is a front page, and bench/results holds
// the reports the docs cite, every one of them.
func TestReadmeIsAFrontPage(t *testing.T) {
	if err := CheckReadmeLength(root, MaxReadmeLines); err != nil {
		t.Error(err)
	}
}

func TestEveryReportIsCited(t *testing.T) {
	uncited, err := UncitedReports(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range uncited {
		t.Errorf("%s/%s is cited by no page of README.md or docs/: cite it where its figures are used, or git rm it (git keeps it)", ResultsDir, name)
	}
}

func TestEveryCitedReportExists(t *testing.T) {
	missing, err := MissingReports(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range missing {
		t.Errorf("%s, which does not exist", m)
	}
}
