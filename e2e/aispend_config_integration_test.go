package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"
)

// TestAISpendConfigValidates: the built collector accepts
// examples/ai-spend-collector.yaml (docs/ai-spend.md's complete config) as
// it is, run from the repository root as the file says: every receiver,
// processor and exporter section and the price file check out.
func TestAISpendConfigValidates(t *testing.T) {
	bin := collectorBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "validate", "--config", "file:examples/ai-spend-collector.yaml")
	cmd.Dir = ".."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s validate: %v\n%s", bin, err, out)
	}
}
