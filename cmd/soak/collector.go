package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// collectorConfig is the distribution's config for the soak: OTLP gRPC into
// the postgrescopy exporter coordinated through Redis. It is JSON, which the
// Collector reads as YAML.
func collectorConfig(o *options, grpcAddr, healthAddr, metricsAddr, schemaName, prefix string) map[string]any {
	host, port, _ := net.SplitHostPort(metricsAddr)
	portNum, _ := strconv.Atoi(port)
	return map[string]any{
		"extensions": map[string]any{
			"health_check": map[string]any{"endpoint": healthAddr},
		},
		"receivers": map[string]any{
			"otlp": map[string]any{"protocols": map[string]any{
				"grpc": map[string]any{"endpoint": grpcAddr},
			}},
		},
		"exporters": map[string]any{
			"postgrescopy": map[string]any{
				"endpoint":      o.pgURL,
				"schema":        schemaName,
				"create_schema": true,
				"timeout":       "10s",
				// Redis is the queue: an in-memory queue would acknowledge
				// before Redis holds the request (the exporter refuses that).
				"sending_queue": map[string]any{"enabled": false},
				// Short retries, so that a request the kill interrupts fails
				// back to the client quickly rather than hanging.
				"retry_on_failure": map[string]any{
					"enabled":          true,
					"initial_interval": "50ms",
					"max_interval":     "500ms",
					"max_elapsed_time": "5s",
				},
				"redis": map[string]any{
					"endpoint":    o.redisAddr,
					"key_prefix":  prefix,
					"claim_after": "3s",
					"max_wait":    "100ms",
					"workers":     2,
				},
			},
		},
		"service": map[string]any{
			"extensions": []string{"health_check"},
			"telemetry": map[string]any{
				// On a free port: the soak reads the claim and ledger
				// counters before each kill, to show recovery ran.
				"metrics": map[string]any{
					"level": "normal",
					"readers": []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
						"prometheus": map[string]any{"host": host, "port": portNum},
					}}}},
				},
				"logs": map[string]any{"level": "info"},
			},
			"pipelines": map[string]any{
				"traces": map[string]any{"receivers": []string{"otlp"}, "exporters": []string{"postgrescopy"}},
			},
		},
	}
}

func writeConfig(path string, cfg map[string]any) error {
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// proc is one running collector process.
type proc struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error // valid once exited is closed
}

// collector starts, kills and restarts the built collector with one config;
// every run appends to one log file, behind a marker line.
type collector struct {
	bin, cfgPath, logPath, health, metrics string
	runs                                   int
	cur                                    *proc
}

func (c *collector) start(ctx context.Context) error {
	c.runs++
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(logf, "=== soak: collector run %d at %s ===\n", c.runs, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(c.bin, "--config", "file:"+c.cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C of the soak reaches the soak only,
	// which then stops the collector itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	_ = logf.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("start %s: %w", c.bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	c.cur = p
	return c.waitHealthy(ctx, 60*time.Second)
}

func (c *collector) waitHealthy(ctx context.Context, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	url := "http://" + c.health + "/"
	deadline := time.Now().Add(timeout)
	last := "no answer"
	for time.Now().Before(deadline) {
		select {
		case <-c.cur.exited:
			return fmt.Errorf("collector exited before it was healthy: %v", c.cur.waitErr)
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		resp, err := client.Get(url)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("collector not healthy at %s after %v: %s", url, timeout, last)
}

// kill sends SIGKILL and waits for the process to be gone; until the next
// start there is no current process (its exit was no surprise).
func (c *collector) kill() {
	if c.cur == nil {
		return
	}
	_ = c.cur.cmd.Process.Signal(syscall.SIGKILL)
	<-c.cur.exited
	c.cur = nil
}

// terminate sends SIGTERM (the exporter finishes its batch in flight) and
// waits up to 30s before killing; it returns the exit status.
func (c *collector) terminate() error {
	if c.cur == nil {
		return nil
	}
	select {
	case <-c.cur.exited:
		return c.cur.waitErr
	default:
	}
	_ = c.cur.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.cur.exited:
		return c.cur.waitErr
	case <-time.After(30 * time.Second):
		c.kill()
		return fmt.Errorf("did not exit within 30s of SIGTERM; killed")
	}
}

// errExited marks a collector that exited by itself mid-scenario: a verdict
// on the collector, not a harness failure.
var errExited = errors.New("exited on its own")

// exitedEarly reports an unexpected exit of the current process.
func (c *collector) exitedEarly() error {
	if c.cur == nil {
		return nil
	}
	select {
	case <-c.cur.exited:
		return fmt.Errorf("collector run %d %w: %v", c.runs, errExited, c.cur.waitErr)
	default:
		return nil
	}
}

// recovery is what a collector process's counters say about recovery.
type recovery struct {
	claimed, ledgerHits int64
}

// scrape reads the current process's recovery counters (zero when it cannot:
// they are evidence for the summary, not part of the verdict).
func (c *collector) scrape() recovery {
	var r recovery
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + c.metrics + "/metrics")
	if err != nil {
		return r
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		var dst *int64
		switch {
		case strings.HasPrefix(line, "otelcol_postgrescopy_redis_claimed_entries"):
			dst = &r.claimed
		case strings.HasPrefix(line, "otelcol_postgrescopy_ledger_hits"):
			dst = &r.ledgerHits
		default:
			continue
		}
		if sp := strings.LastIndexByte(line, ' '); sp > 0 {
			if v, err := strconv.ParseFloat(line[sp+1:], 64); err == nil {
				*dst += int64(v)
			}
		}
	}
	return r
}

// tailLines returns the last n lines of the file at path.
func tailLines(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
