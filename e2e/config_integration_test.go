package e2e

import (
	"context"
	"errors"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

const secret = "SECRETPW"

// runBinary runs the collector binary with args to completion and returns
// its combined output and exit code.
func runBinary(t *testing.T, args ...string) (string, int) {
	t.Helper()
	bin := collectorBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s: still running after 30s\n%s", bin, strings.Join(args, " "), out)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	default:
		t.Fatalf("run %s: %v", bin, err)
		return "", -1
	}
}

// TestPrintConfigRedactsPassword: print-config shows the exporter's section
// but neither the password inside endpoint nor the password key.
func TestPrintConfigRedactsPassword(t *testing.T) {
	ep := newEndpoints(t)
	exp := pgExporter("postgres://u:"+secret+"@127.0.0.1:5432/x", "redact_check")
	exp["password"] = "OTHER" + secret
	path := writeConfig(t, t.TempDir(), collectorConfig(ep, map[string]any{"postgrescopy": exp}, "info"))

	for _, format := range []string{"yaml", "json"} {
		out, code := runBinary(t, "print-config", "--format", format, "--config", "file:"+path)
		if code != 0 {
			t.Fatalf("print-config --format %s: exit %d\n%s", format, code, out)
		}
		// Proof that the exporter's section was printed at all.
		if !strings.Contains(out, "redact_check") || !strings.Contains(out, "postgrescopy") {
			t.Fatalf("print-config --format %s does not show the postgrescopy exporter:\n%s", format, out)
		}
		if strings.Contains(out, secret) {
			t.Errorf("print-config --format %s prints the password:\n%s", format, out)
		}
	}

	// The unredacted mode does show it: the check above looks where the
	// secret would be.
	out, code := runBinary(t, "print-config", "--mode", "unredacted", "--config", "file:"+path)
	if code != 0 || !strings.Contains(out, "u:"+secret+"@") || !strings.Contains(out, "OTHER"+secret) {
		t.Fatalf("print-config --mode unredacted (exit %d) should show both passwords:\n%s", code, out)
	}
}

// TestRunLogHasNoPassword runs the collector at debug level with a password
// in both exporters' URLs, one server reachable and one not (so the
// connection-failure and retry paths log their errors), and expects the
// password nowhere in the collector's output.
func TestRunLogHasNoPassword(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ep := newEndpoints(t)

	u, err := url.Parse(pgtest.URL())
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("POSTGRESCOPY_TEST_URL %q must be a postgres:// URL for this test (%v)", pgtest.URL(), err)
	}
	if _, has := u.User.Password(); !has {
		// The test server trusts local connections, so an added password
		// is sent but not needed.
		u.User = url.UserPassword(u.User.Username(), secret)
	}
	down := ports.FreeT(t, 1)[0] // closed again: connections are refused
	downURL := "postgres://postgres:" + secret + "@127.0.0.1:" + strconv.Itoa(down) + "/postgres?sslmode=disable&connect_timeout=2"
	downExp := pgExporter(downURL, schema+"_down")
	// Give up quickly on the unreachable server so shutdown is not delayed.
	downExp["retry_on_failure"] = map[string]any{"enabled": true, "initial_interval": "100ms", "max_interval": "200ms", "max_elapsed_time": "1s"}
	// Acknowledged before it is written, so that its failures do not reach
	// telemetrygen, which would send again into the reachable exporter too.
	downExp["sending_queue"] = map[string]any{"wait_for_result": false, "batch": map[string]any{"flush_timeout": "50ms"}}

	c := startCollector(t, ep, collectorConfig(ep, map[string]any{
		"postgrescopy":      pgExporter(u.String(), schema),
		"postgrescopy/down": downExp,
	}, "debug"))
	telemetrygen(t, "traces", "--otlp-insecure", "--otlp-endpoint", ep.grpc, "--rate", "0", "--traces", "20")
	if t.Failed() {
		t.FailNow()
	}
	waitRows(t, c, pool, schema, map[string]int64{"spans": 40}, 30*time.Second)
	time.Sleep(1500 * time.Millisecond) // let the down exporter retry and give up
	c.stop(t)

	log := c.log(t)
	// Proof that the failure paths ran and logged the target and errors.
	for _, want := range []string{"not reachable", "127.0.0.1:" + strconv.Itoa(down), "Exporting failed"} {
		if !strings.Contains(log, want) {
			t.Errorf("collector log lacks %q, so the redaction check did not cover that path", want)
		}
	}
	if i := strings.Index(log, secret); i >= 0 {
		start := strings.LastIndexByte(log[:i], '\n') + 1
		end := strings.IndexByte(log[i:], '\n')
		if end < 0 {
			end = len(log) - i
		}
		t.Errorf("collector log contains the password: %s", log[start:i+end])
	}
}

// TestBadConfigNamesKey: validate and a plain start both fail on a bad
// exporter configuration, and the message names the offending key.
func TestBadConfigNamesKey(t *testing.T) {
	cases := []struct {
		name string
		set  func(map[string]any)
		key  string
	}{
		{"malformed endpoint", func(e map[string]any) {
			e["endpoint"] = "postgres://u:" + secret + "@127.0.0.1:notaport/x"
		}, `"endpoint"`},
		{"bad schema", func(e map[string]any) { e["schema"] = "bad-name;drop" }, `"schema"`},
		{"unknown key", func(e map[string]any) { e["batch_rows"] = 100 }, "batch_rows"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep := newEndpoints(t)
			exp := pgExporter("postgres://postgres@127.0.0.1:5432/postgres", "otel")
			tc.set(exp)
			path := writeConfig(t, t.TempDir(), collectorConfig(ep, map[string]any{"postgrescopy": exp}, "info"))
			for _, args := range [][]string{
				{"validate", "--config", "file:" + path},
				{"--config", "file:" + path}, // start
			} {
				what := strings.Join(args[:len(args)-1], " ")
				out, code := runBinary(t, args...)
				if code == 0 {
					t.Errorf("%s: exit 0, want failure\n%s", what, out)
				}
				if !strings.Contains(out, tc.key) {
					t.Errorf("%s: output does not name %s:\n%s", what, tc.key, out)
				}
				if strings.Contains(out, secret) {
					t.Errorf("%s: output contains the password:\n%s", what, out)
				}
			}
		})
	}
}
