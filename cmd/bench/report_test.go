package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRowCostReportKeepsLatest: a row cost run alone is saved under its own
// names and leaves the strategies' latest.* as they were.
func TestRowCostReportKeepsLatest(t *testing.T) {
	dir := t.TempDir()
	latest := filepath.Join(dir, "latest.md")
	require.NoError(t, os.WriteFile(latest, []byte("the strategies' report"), 0o644))
	rep := &report{RowCost: []rowcostResult{{}}}
	written, err := rep.write(dir, "20261201-000000")
	require.NoError(t, err)
	assert.Equal(t, []string{filepath.Join(dir, "rowcost-20261201-000000.md"), filepath.Join(dir, "rowcost-20261201-000000.json")}, written)
	b, err := os.ReadFile(latest)
	require.NoError(t, err)
	assert.Equal(t, "the strategies' report", string(b))
	assert.FileExists(t, filepath.Join(dir, "latest-rowcost.md"))
}
