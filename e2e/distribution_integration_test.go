package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"gopkg.in/yaml.v3"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// docBlock returns the fenced block that follows the marker
// "<!-- distcheck: name -->" in a markdown file.
func docBlock(t *testing.T, path, name string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	re := regexp.MustCompile("(?s)<!-- distcheck: " + regexp.QuoteMeta(name) + " -->\n```[a-z]*\n(.*?)\n```")
	m := re.FindSubmatch(b)
	if m == nil {
		t.Fatalf("%s: no block after <!-- distcheck: %s -->", path, name)
	}
	return string(m[1])
}

// replaceOnce replaces old, which must occur exactly once in s.
func replaceOnce(t *testing.T, s, old, repl string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("%q occurs %d times in docs/install.md's block, want 1", old, n)
	}
	return strings.Replace(s, old, repl, 1)
}

// TestOwnDistribution builds docs/install.md's manifest, a user's own
// distribution with postgrescopy and loadgen beside otlp, batch, filelog,
// file_storage and debug, with ocb in a temporary directory outside the
// repository (only its replaces: path changed, to this checkout), runs it
// with docs/install.md's configuration (ports, paths and schema changed to
// the test's), and finds in PostgreSQL every span telemetrygen sent over
// OTLP, every line appended to the log file and loadgen's 60 spans.
// Its build shares the Go build cache with `make build`'s: seconds warm
// (minutes the first time on a machine); `make distcheck` runs it alone.
func TestOwnDistribution(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds a distribution with ocb")
	}
	ocb := tool(t, "POSTGRESCOPY_OCB", "../.bin/builder", "make tools")
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if rel, err := filepath.Rel(repo, dir); err == nil && !strings.HasPrefix(rel, "..") {
		t.Fatalf("the temporary directory %s is inside the repository %s", dir, repo)
	}

	// Build, as a user would: ocb in the manifest's directory.
	manifest := docBlock(t, "../docs/install.md", "manifest")
	manifest = replaceOnce(t, manifest, "=> /path/to/postgrescopy", "=> "+repo)
	name := regexp.MustCompile(`(?m)^  name: (\S+)$`).FindStringSubmatch(manifest)
	if name == nil {
		t.Fatal("the manifest has no dist::name")
	}
	if err := os.WriteFile(filepath.Join(dir, "builder-config.yaml"), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	build := exec.CommandContext(ctx, ocb, "--config", "builder-config.yaml")
	build.Dir = dir
	// ocb reads its environment over the manifest: a dist.* variable from
	// the caller (the Makefile passes dist.version to its own build) must
	// not change the user's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "dist.") {
			build.Env = append(build.Env, kv)
		}
	}
	began := time.Now()
	out, err := build.CombinedOutput()
	if err != nil {
		t.Fatalf("ocb --config builder-config.yaml in %s: %v\n%s", dir, err, tail(string(out), 16<<10))
	}
	t.Logf("ocb built the distribution in %v", time.Since(began).Round(100*time.Millisecond))
	bin := filepath.Join(dir, "_build", name[1])

	comps, err := exec.Command(bin, "components").CombinedOutput()
	if err != nil {
		t.Fatalf("%s components: %v\n%s", bin, err, comps)
	}
	for _, c := range []string{"postgrescopy", "loadgen", "otlp", "file_log", "batch", "debug", "file_storage", "jaeger_remote_storage"} {
		if !regexp.MustCompile(`(?m)^    - name: ` + c + `$`).Match(comps) {
			t.Errorf("%s components lacks %s:\n%s", bin, c, comps)
		}
	}

	// Run it with the documented configuration.
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ep := newEndpoints(t)
	logFile := filepath.Join(dir, "app.log")
	queueDir := filepath.Join(dir, "queue")
	if err := os.Mkdir(queueDir, 0o755); err != nil {
		t.Fatal(err)
	}
	const lines = 25
	var logText strings.Builder
	for i := range lines {
		fmt.Fprintf(&logText, "distcheck line %d of %s\n", i, schema)
	}
	if err := os.WriteFile(logFile, []byte(logText.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgText := docBlock(t, "../docs/install.md", "config")
	cfgText = replaceOnce(t, cfgText, "endpoint: 127.0.0.1:4317", "endpoint: "+ep.grpc)
	cfgText = replaceOnce(t, cfgText, "[/var/log/myapp/*.log]", "["+logFile+"]")
	cfgText = replaceOnce(t, cfgText, "directory: /var/lib/otelcol-custom", "directory: "+queueDir)
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(cfgText), &cfg); err != nil {
		t.Fatalf("docs/install.md's config: %v", err)
	}
	cfg["exporters"].(map[string]any)["postgrescopy"].(map[string]any)["schema"] = schema
	host, port, _ := net.SplitHostPort(ep.metrics)
	portNum, _ := strconv.Atoi(port)
	cfg["service"].(map[string]any)["telemetry"] = map[string]any{"metrics": map[string]any{
		"readers": []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
			"prometheus": map[string]any{"host": host, "port": portNum},
		}}}},
	}}
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, cfgJSON, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("POSTGRESCOPY_ENDPOINT", pgtest.URL())
	t.Setenv("POSTGRESCOPY_PASSWORD", "")
	c := startBinary(t, bin, ep, cfgPath)

	// telemetrygen's spans over OTLP gRPC (the distribution has no
	// health_check: wait for the port instead).
	waitPort(t, c, ep.grpc, 60*time.Second)
	const workers, traces, children = 2, 10, 2
	telemetrygen(t, "traces", "--otlp-insecure", "--otlp-endpoint", ep.grpc, "--rate", "0",
		"--workers", strconv.Itoa(workers), "--traces", strconv.Itoa(traces), "--child-spans", strconv.Itoa(children))

	spans := pgx.Identifier{schema, "spans"}.Sanitize()
	logs := pgx.Identifier{schema, "logs"}.Sanitize()
	queries := map[string]string{
		"telemetrygen spans": "SELECT count(*) FROM " + spans + " WHERE service_name = 'telemetrygen'",
		"loadgen spans":      "SELECT count(*) FROM " + spans + " WHERE service_name <> 'telemetrygen'",
		"log lines":          "SELECT count(DISTINCT body #>> '{}') FROM " + logs + " WHERE body #>> '{}' LIKE 'distcheck line %'",
	}
	want := map[string]int64{
		"telemetrygen spans": workers * traces * (1 + children),
		"loadgen spans":      60, // 3 users × 20 events, all spans (docs/install.md)
		"log lines":          lines,
	}
	got := map[string]int64{}
	deadline := time.Now().Add(60 * time.Second)
	for {
		for k, q := range queries {
			var n int64
			if err := pool.QueryRow(context.Background(), q).Scan(&n); err == nil {
				got[k] = n
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows in %s: got %v, want %v%s", schema, got, want, c.intake())
	}
	c.stop(t)
	t.Logf("found in PostgreSQL (schema %s): %v", schema, got)
}

// startBinary runs bin with the config file at cfgPath, like startCollector
// but for another distribution, which may have no health_check.
func startBinary(t testing.TB, bin string, ep endpoints, cfgPath string) *collector {
	t.Helper()
	logPath := filepath.Join(filepath.Dir(cfgPath), "collector.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	_ = logf.Close()
	c := &collector{ep: ep, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		if !c.stopped {
			c.terminate(t)
		}
		if t.Failed() {
			t.Logf("collector log (%s):\n%s", logPath, tail(c.log(t), 64<<10))
		}
	})
	return c
}

// waitPort waits until addr accepts TCP connections.
func waitPort(t testing.TB, c *collector, addr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		select {
		case <-c.exited:
			t.Fatalf("collector exited before it listened on %s: %v", addr, c.waitErr)
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = conn.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listens on %s after %v", addr, timeout)
}
