package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// priceFile is a price file (pricing: {file: ...}) for the loadgen's models
// at the list prices their reported cost is computed from. A model is
// priced under its request name and its response name: a call's model is
// its response model, a failed call's its request model. Rows are exact
// names, as an operator's catalog for these models would hold.
func priceFile(models []loadgenreceiver.ModelPrice) ([]byte, int) {
	var sb strings.Builder
	sb.WriteString("# Written by cmd/bench from the loadgen receiver's model list.\nprices:\n")
	seen := map[[2]string]bool{}
	n := 0
	for _, m := range models {
		for _, name := range []string{m.Request, m.Response} {
			k := [2]string{m.Provider, name}
			if name == "" || seen[k] {
				continue
			}
			seen[k] = true
			n++
			// %q is a YAML double-quoted scalar too: a name like
			// "anthropic.claude-3-5-haiku-20241022-v1:0" stays one string.
			fmt.Fprintf(&sb, "  - provider: %q\n    model: %q\n    input: %s\n    output: %s\n",
				m.Provider, name, decimal(m.Input), decimal(m.Output))
		}
	}
	return []byte(sb.String()), n
}

// decimal writes a price as the file's decimal (no exponent).
func decimal(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

// writePriceFile writes priceFile of the loadgen's models to path and
// returns its rows.
func writePriceFile(path string) (int, error) {
	b, n := priceFile(loadgenreceiver.Models())
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return 0, fmt.Errorf("write price file: %w", err)
	}
	return n, nil
}
