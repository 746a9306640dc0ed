package pricing

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	prices, err := Parse([]byte(`prices:
  - provider: openai
    model: gpt-4o
    input: 2.50
    output: 10
    cache_read: 1.25
    valid_to: 2026-11-30T12:00:00Z
  - provider: openai
    model: gpt-4o
    input: 2.00
    output: 8
    valid_from: 2026-11-30T12:00:00Z
  - model: claude-sonnet-4*_x%
    input: 3
    output: 15
    currency: EUR
    valid_from: 2026-01-02
`))
	require.NoError(t, err)
	require.Len(t, prices, 3)
	assert.Equal(t, Price{Line: 2, Provider: "openai", Model: "gpt-4o", Input: "2.50", Output: "10", CacheRead: "1.25",
		Currency: "USD", ValidTo: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}, prices[0])
	assert.Equal(t, time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), prices[1].ValidFrom)
	assert.True(t, prices[2].Pattern)
	assert.Equal(t, `claude-sonnet-4%\_x\%`, prices[2].Model, "glob to LIKE, LIKE's wildcards escaped")
	assert.Equal(t, "EUR", prices[2].Currency)
	assert.Equal(t, time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC), prices[2].ValidFrom)
}

// TestParseRefusesWithLineAndReason: every malformed entry is named by its
// line, with what is wrong.
func TestParseRefusesWithLineAndReason(t *testing.T) {
	for name, tc := range map[string]struct{ file, want string }{
		"negative":    {"prices:\n  - model: m\n    input: -1\n    output: 2\n", `line 3: input: "-1" is not a price per million tokens`},
		"text price":  {"prices:\n  - model: m\n    input: cheap\n    output: 2\n", `line 3: input: "cheap" is not a price`},
		"no output":   {"prices:\n  - model: m\n    input: 1\n", "line 2: output is required"},
		"unknown key": {"prices:\n  - model: m\n    input: 1\n    output: 2\n    outptu: 3\n", "line 5: outptu: unknown key"},
		"bad time":    {"prices:\n  - model: m\n    input: 1\n    output: 2\n    valid_from: noon\n", `line 5: valid_from: "noon" is not a time`},
		"to before from": {"prices:\n  - model: m\n    input: 1\n    output: 2\n    valid_from: 2026-02-01\n    valid_to: 2026-01-01\n",
			"line 2: valid_to 2026-01-01T00:00:00Z is not after valid_from"},
		"overlap": {"prices:\n  - model: m\n    input: 1\n    output: 2\n  - model: m\n    input: 1\n    output: 3\n    valid_from: 2026-01-01\n",
			"line 5: m overlaps the price at line 2"},
		"not a list":   {"prices: 3\n", "line 1: prices must be a list"},
		"top key":      {"price:\n  - model: m\n", `line 1: unknown key "price"`},
		"not yaml":     {"prices: [\n", "not YAML"},
		"bad currency": {"prices:\n  - model: m\n    input: 1\n    output: 2\n    currency: dollars\n", `line 5: currency: "dollars" is not a currency code`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.file))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	// Abutting ranges are a price change, not an overlap.
	_, err := Parse([]byte("prices:\n  - model: m\n    input: 1\n    output: 2\n    valid_to: 2026-01-01\n  - model: m\n    input: 1\n    output: 3\n    valid_from: 2026-01-01\n"))
	assert.NoError(t, err)
}

func TestExampleFileParses(t *testing.T) {
	_, here, _, _ := runtime.Caller(0)
	prices, err := ParseFile(filepath.Join(filepath.Dir(here), "..", "..", "examples", "prices.example.yaml"))
	require.NoError(t, err)
	assert.NotEmpty(t, prices)
}
