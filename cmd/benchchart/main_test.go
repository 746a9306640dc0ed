package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The committed chart is what its report draws: a report or chart changed
// alone fails here until `go run ./cmd/benchchart` is run again.
func TestCommittedChartIsItsReport(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "bench", "results", "20261207-081425.json"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := render(data)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs", "images", "throughput.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("docs/images/throughput.svg is not what its report draws: run go run ./cmd/benchchart")
	}
	for _, label := range []string{"90.4k/s  1.00×", "66.0k/s  0.73×", "61.8k/s  0.68×", "100 users", "direct, 16 callers"} {
		if !strings.Contains(string(got), label) {
			t.Errorf("the chart lacks %q", label)
		}
	}
}

func TestRenderRefusesAReportWithoutScales(t *testing.T) {
	if _, err := render([]byte(`{"ceiling":[],"strategies":[]}`)); err == nil {
		t.Fatal("a report without scales drew a chart")
	}
}
