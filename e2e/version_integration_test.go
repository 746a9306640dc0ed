package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// wantVersion is the version the binary should have been built as: the one
// the Makefile passed to ocb (POSTGRESCOPY_VERSION under make, else the
// stamp it left beside the binary), else what scripts/version.sh says for
// this checkout.
func wantVersion(t *testing.T, bin string) string {
	t.Helper()
	if v := os.Getenv("POSTGRESCOPY_VERSION"); v != "" {
		return v
	}
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(bin), ".dist-version")); err == nil {
		return strings.TrimSpace(string(b))
	}
	out, err := exec.Command("../scripts/version.sh").Output()
	if err != nil {
		t.Fatalf("scripts/version.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// TestVersionReachesTheBinary: the version scripts/version.sh derives from
// git is the binary's --version and the service.version of the collector's
// own telemetry (target_info on its Prometheus endpoint).
func TestVersionReachesTheBinary(t *testing.T) {
	want := wantVersion(t, collectorBinary(t))
	if want == "" {
		t.Fatal("no version to compare with")
	}
	out, code := runBinary(t, "--version")
	if code != 0 {
		t.Fatalf("--version exited %d: %s", code, out)
	}
	if got, line := strings.TrimSpace(out), "otelcol-postgrescopy version "+want; got != line {
		t.Fatalf("--version printed %q, want %q (a binary from another commit? `make build` rebuilds it)", got, line)
	}

	ep := newEndpoints(t)
	c := startCollector(t, ep, collectorConfig(ep, map[string]any{"debug": map[string]any{}}, "info"))
	var versions []string
	for _, s := range samples(c.scrape(t), "target_info") {
		if s.labels["service_name"] == "otelcol-postgrescopy" {
			versions = append(versions, s.labels["service_version"])
		}
	}
	if len(versions) != 1 || versions[0] != want {
		t.Fatalf("target_info service_version of otelcol-postgrescopy: %v, want [%s]", versions, want)
	}
	c.stop(t)
}
