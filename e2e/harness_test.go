package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// tables are every table of schema version 1; the tests check all of them so
// that rows landing in the wrong table are caught too.
var tables = []string{
	"spans", "logs",
	"metrics_gauge", "metrics_sum", "metrics_histogram",
	"metrics_exponential_histogram", "metrics_summary",
}

// tool returns the absolute path of a built executable named by env (or the
// repository default when env is unset). A missing binary fails the test (a
// skip would let `make test` pass without ever running the distribution),
// except under -short (`make unit`), which builds nothing: there it skips.
func tool(t testing.TB, env, def, fix string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = def
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	fi, err := os.Stat(abs)
	if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
		pgtest.Unavailable(t, "%s: no executable at %s (stat: %v); run `%s` first", env, abs, err, fix)
	}
	return abs
}

func collectorBinary(t testing.TB) string {
	t.Helper()
	bin := tool(t, "POSTGRESCOPY_COLLECTOR", "../_build/otelcol-postgrescopy", "make build")
	warnIfStale(t, bin)
	return bin
}

func telemetrygenBinary(t testing.TB) string {
	t.Helper()
	return tool(t, "POSTGRESCOPY_TELEMETRYGEN", "../.bin/telemetrygen", "make tools")
}

var staleOnce sync.Once

// warnIfStale notes (once per run) when exporter sources are newer than the
// binary: the tests then exercise old code, which explains surprises.
func warnIfStale(t testing.TB, bin string) {
	staleOnce.Do(func() { checkStale(t, bin) })
}

func checkStale(t testing.TB, bin string) {
	fi, err := os.Stat(bin)
	if err != nil {
		return
	}
	var newer []string
	for _, dir := range []string{"../exporter", "../internal"} {
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			if !strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, ".sql") {
				return nil
			}
			if info, err := d.Info(); err == nil && info.ModTime().After(fi.ModTime()) {
				newer = append(newer, p)
			}
			return nil
		})
	}
	if len(newer) > 0 {
		t.Logf("note: %s is older than %d source file(s) (e.g. %s); run `make build` to test current code", bin, len(newer), newer[0])
	}
}

// endpoints are the collector's listening addresses.
type endpoints struct {
	grpc, http, health, metrics string
}

func newEndpoints(t testing.TB) endpoints {
	p := ports.FreeT(t, 4)
	addr := func(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }
	return endpoints{grpc: addr(p[0]), http: addr(p[1]), health: addr(p[2]), metrics: addr(p[3])}
}

// pgExporter is a postgrescopy exporter section writing to schema at url.
func pgExporter(url, schema string) map[string]any {
	return map[string]any{
		"endpoint":      url,
		"schema":        schema,
		"create_schema": true,
		"timeout":       "10s",
	}
}

// collectorConfig is a whole collector configuration: OTLP gRPC and HTTP in,
// every exporter in exporters on all three pipelines, health_check, and the
// internal metrics on a Prometheus endpoint (the tests read the exporter's own
// counters there). It is JSON, which is valid YAML for the collector.
func collectorConfig(ep endpoints, exporters map[string]any, logLevel string) map[string]any {
	names := make([]string, 0, len(exporters))
	for n := range exporters {
		names = append(names, n)
	}
	sort.Strings(names)
	host, port, _ := net.SplitHostPort(ep.metrics)
	portNum, _ := strconv.Atoi(port)
	pipeline := func() map[string]any {
		return map[string]any{"receivers": []string{"otlp"}, "exporters": names}
	}
	return map[string]any{
		"extensions": map[string]any{
			"health_check": map[string]any{"endpoint": ep.health},
		},
		"receivers": map[string]any{
			"otlp": map[string]any{"protocols": map[string]any{
				"grpc": map[string]any{"endpoint": ep.grpc},
				"http": map[string]any{"endpoint": ep.http},
			}},
		},
		"exporters": exporters,
		"service": map[string]any{
			"extensions": []string{"health_check"},
			"telemetry": map[string]any{
				"logs": map[string]any{"level": logLevel},
				"metrics": map[string]any{
					"level": "normal",
					"readers": []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
						"prometheus": map[string]any{"host": host, "port": portNum},
					}}}},
				},
			},
			"pipelines": map[string]any{
				"traces": pipeline(), "metrics": pipeline(), "logs": pipeline(),
			},
		},
	}
}

// writeConfig writes cfg to a file in dir and returns its path.
func writeConfig(t testing.TB, dir string, cfg map[string]any) string {
	t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatalf("marshal config: %v", err)
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatalf("write config: %v", err)
	}
	return path
}

// collector is a running otelcol-postgrescopy process.
type collector struct {
	ep      endpoints
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error // valid once exited is closed
	stopped bool
}

// startCollector runs the binary with cfg and returns once health_check
// answers 200. Its stdout and stderr go to a file that is printed when the
// test fails; the process gets SIGTERM at the end of the test at the latest.
func startCollector(t testing.TB, ep endpoints, cfg map[string]any) *collector {
	t.Helper()
	bin := collectorBinary(t)
	dir := t.TempDir()
	cfgPath := writeConfig(t, dir, cfg)
	logPath := filepath.Join(dir, "collector.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatalf("create log: %v", err)
	}
	cmd := exec.Command(bin, "--config", "file:"+cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		_ = logf.Close()
		t.Fatalf("start %s: %v", bin, err)
	}
	_ = logf.Close() // the child holds its own descriptor
	c := &collector{ep: ep, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	// Registered after t.TempDir, so it runs before the log file is removed.
	t.Cleanup(func() {
		if !c.stopped {
			c.terminate(t)
		}
		if t.Failed() {
			t.Logf("collector log (%s):\n%s", logPath, tail(c.log(t), 64<<10))
		}
	})
	c.waitHealthy(t, 30*time.Second)
	return c
}

func (c *collector) waitHealthy(t testing.TB, timeout time.Duration) {
	t.Helper()
	url := "http://" + c.ep.health + "/"
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-c.exited:
			t.Fatalf("collector exited before it was healthy: %v", c.waitErr)
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("collector not healthy at %s after %v: %s", url, timeout, last)
}

// terminate sends SIGTERM and waits for the exit; a collector that does not
// exit within 30 s is killed and the test fails.
func (c *collector) terminate(t testing.TB) error {
	c.stopped = true
	select {
	case <-c.exited:
		return c.waitErr
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exited:
		return c.waitErr
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exited
		t.Errorf("collector did not exit within 30s of SIGTERM; killed")
		return c.waitErr
	}
}

// stop shuts the collector down with SIGTERM, which drains the exporter's
// queue, and fails the test unless it exits with status 0.
func (c *collector) stop(t testing.TB) {
	t.Helper()
	if err := c.terminate(t); err != nil {
		t.Fatalf("collector exited uncleanly after SIGTERM: %v", err)
	}
}

func (c *collector) log(t testing.TB) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		t.Errorf("read collector log: %v", err)
	}
	return string(b)
}

// tail returns the last n bytes of s, cut at a line start.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "...\n" + s
}

// telemetrygen runs telemetrygen to completion. It is safe from several
// goroutines (it reports with Errorf). telemetrygen exits non-zero when an
// export fails, so a rejected batch shows up here.
func telemetrygen(t *testing.T, args ...string) {
	bin := telemetrygenBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if err != nil {
		t.Errorf("telemetrygen %s: %v\n%s", strings.Join(args, " "), err, tail(string(out), 8<<10))
	}
}

// countRows returns the row count of every table in schema, in one query.
func countRows(ctx context.Context, pool *pgxpool.Pool, schema string) (map[string]int64, error) {
	parts := make([]string, len(tables))
	for i, tb := range tables {
		// tb is one of the constant names above, safe as a literal.
		parts[i] = fmt.Sprintf("SELECT '%s'::text, count(*) FROM %s", tb, pgx.Identifier{schema, tb}.Sanitize())
	}
	rows, err := pool.Query(ctx, strings.Join(parts, " UNION ALL "))
	if err != nil {
		return nil, err
	}
	got := make(map[string]int64, len(tables))
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		got[name] = n
	}
	return got, rows.Err()
}

func total(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

func equalCounts(got, want map[string]int64) bool {
	for _, tb := range tables {
		if got[tb] != want[tb] {
			return false
		}
	}
	return true
}

// waitRows polls until every table holds exactly want rows and returns when
// that was first seen; c (may be nil) adds the collector's counters to a
// failure. More rows than wanted fails at once: they can only be
// duplicates. The tables may not exist yet right after start (the schema is
// created by the exporter), so query errors are retried until the deadline.
func waitRows(t *testing.T, c *collector, pool *pgxpool.Pool, schema string, want map[string]int64, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var got map[string]int64
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err = countRows(ctx, pool, schema)
		cancel()
		if err == nil {
			if equalCounts(got, want) {
				return time.Now()
			}
			for _, tb := range tables {
				if got[tb] > want[tb] {
					t.Fatalf("%s.%s has %d rows, more than the %d sent: duplicates (all counts %v)%s", schema, tb, got[tb], want[tb], got, c.intake())
				}
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("rows in %s after %v: got %v (err %v), want %v%s", schema, timeout, got, err, want, c.intake())
	return time.Time{}
}

// assertRows checks the counts once.
func assertRows(t *testing.T, pool *pgxpool.Pool, schema string, want map[string]int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got, err := countRows(ctx, pool, schema)
	if err != nil {
		t.Fatalf("count rows in %s: %v", schema, err)
	}
	if !equalCounts(got, want) {
		t.Fatalf("rows in %s: got %v, want %v", schema, got, want)
	}
}

// scrape returns the collector's internal metrics in Prometheus text format.
func (c *collector) scrape(t *testing.T) string {
	t.Helper()
	text, err := c.scrapeText()
	if err != nil {
		t.Fatalf("scrape internal metrics: %v", err)
	}
	return text
}

func (c *collector) scrapeText() (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + c.ep.metrics + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String(), sc.Err()
}

// intake summarises what the collector accepted, sent and queued, so that a
// count mismatch says whether data was lost before the collector (by the
// client) or inside it.
func (c *collector) intake() string {
	if c == nil {
		return ""
	}
	text, err := c.scrapeText()
	if err != nil {
		return "\n(collector metrics unavailable: " + err.Error() + ")"
	}
	var b strings.Builder
	b.WriteString("\ncollector counters:")
	for _, line := range strings.Split(text, "\n") {
		for _, p := range []string{"otelcol_receiver_accepted_", "otelcol_receiver_refused_", "otelcol_exporter_sent_",
			"otelcol_exporter_send_failed_", "otelcol_exporter_enqueue_failed_", "otelcol_exporter_queue_size", "otelcol_postgrescopy_rows"} {
			if strings.HasPrefix(line, p) {
				b.WriteString("\n  " + line)
			}
		}
	}
	return b.String()
}

// sample is one Prometheus text-format sample.
type sample struct {
	labels map[string]string
	value  float64
}

// samples returns every sample of metric name. Label values containing
// commas or escaped quotes are not handled; the collector's labels have none.
func samples(text, name string) []sample {
	var out []sample
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		end := strings.LastIndexByte(line[:sp], '}')
		if end < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if err != nil {
			continue
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(line[len(name)+1:end], ",") {
			if k, v, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(v, `"`)
			}
		}
		out = append(out, sample{labels: labels, value: v})
	}
	return out
}
