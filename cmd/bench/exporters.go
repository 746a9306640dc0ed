package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The exporters part feeds the same loadgen input into postgrescopy (direct
// and with Redis) and into the Collector's own exporters: otlp (gRPC, its
// defaults, and again without compression) to a second collector that drops
// what it receives, and nop, which drops it in the first collector (what
// generating the input costs). Each run reports the first collector's CPU
// per item, and that CPU less the nop run's: what the exporter costs.

// exporterKinds are the exporters part's runs, in report order.
var exporterKinds = []exporterKind{
	{key: "postgrescopy", name: "postgrescopy direct"},
	{key: "postgrescopy-redis", name: "postgrescopy + Redis", redis: true},
	{key: "otlp", name: "otlp (gzip, its defaults) to a collector that drops it", otlp: map[string]any{}},
	{key: "otlp-none", name: "otlp, compression: none, to a collector that drops it", otlp: map[string]any{"compression": "none"}},
	{key: "nop", name: "nop (generation alone)", nop: true},
}

type exporterKind struct {
	key, name string
	redis     bool
	otlp      map[string]any // the otlp exporter's settings over endpoint and tls; nil: not otlp
	nop       bool
}

// exporterResult is one exporter at one scale: the fastest of its runs.
type exporterResult struct {
	Key     string  `json:"key"`
	Name    string  `json:"name"`
	Users   int     `json:"users"`
	Items   int64   `json:"items"`
	Seconds float64 `json:"seconds"`
	// CollectorUsPerItem is the first collector's CPU (user + system) per
	// item, from the loadgen receiver's first batch to the last commit
	// (postgrescopy) or to the process's exit after the receiver finished
	// (otlp and nop: the stop drains the otlp exporter's queue).
	CollectorUsPerItem float64 `json:"collector_us_per_item"`
	// ExporterUsPerItem is CollectorUsPerItem less the nop run's at the same
	// scale: the exporter's own cost, generation excluded.
	ExporterUsPerItem float64 `json:"exporter_us_per_item"`
	// SinkUsPerItem is the receiving collector's CPU per item (otlp runs).
	SinkUsPerItem float64 `json:"sink_us_per_item,omitempty"`
	// PostgresUsPerItem is PostgreSQL's CPU per item (postgrescopy runs).
	PostgresUsPerItem float64 `json:"postgres_us_per_item,omitempty"`
	PeakRSSMiB        float64 `json:"peak_rss_mib"`
	Retries           int64   `json:"retries"`
	Dropped           int64   `json:"dropped_items"`
	Status            string  `json:"status"`
	Note              string  `json:"note,omitempty"`
}

// runExporters runs every exporter kind b.runs times per scale, interleaved,
// keeping each one's fastest run.
func (b *bench) runExporters(ctx context.Context, scale []int) ([]exporterResult, error) {
	schemaName, err := b.newSchema(ctx, "exporters")
	if err != nil {
		return nil, err
	}
	var out []exporterResult
	for _, users := range scale {
		best := make([]exporterResult, len(exporterKinds))
		for run := range b.runs {
			for i, k := range exporterKinds {
				if ctx.Err() != nil {
					return out, ctx.Err()
				}
				if run > 0 && best[i].Status != "ok" {
					continue
				}
				b.progress.step(fmt.Sprintf("exporters: %s @ %d users, run %d/%d", k.name, users, run+1, b.runs))
				r := b.runExporter(ctx, k, users, schemaName)
				if r.Status != "ok" {
					b.logf("exporters: %s @ %d users: %s: %s", k.name, users, r.Status, r.Note)
				}
				if run == 0 || (r.Status == "ok" && r.Seconds < best[i].Seconds) {
					best[i] = r
				}
			}
		}
		subtractNop(best)
		out = append(out, best...)
	}
	return out, nil
}

// subtractNop sets every run's exporter cost: its collector CPU less the nop
// run's of the same scale (none without a nop run).
func subtractNop(rs []exporterResult) {
	var nop float64
	for _, r := range rs {
		if r.Key == "nop" && r.Status == "ok" {
			nop = r.CollectorUsPerItem
		}
	}
	for i := range rs {
		if rs[i].Status == "ok" && nop > 0 {
			rs[i].ExporterUsPerItem = rs[i].CollectorUsPerItem - nop
		}
	}
}

// exporterConfig is the collector config of an otlp or nop run: the
// loadgen receiver as in every collector run, into that exporter alone
// (otlp to sinkAddr).
func (b *bench) exporterConfig(k exporterKind, users int, sinkAddr string) map[string]any {
	cfg := b.collectorConfig("", users, b.seed, "")
	svc := cfg["service"].(map[string]any)
	// Info: the loadgen receiver's start and finish lines, nothing per batch.
	svc["telemetry"].(map[string]any)["logs"].(map[string]any)["level"] = "info"
	name := "nop"
	if k.otlp != nil {
		name = "otlp"
		sec := map[string]any{"endpoint": sinkAddr, "tls": map[string]any{"insecure": true}}
		mergeConfig(sec, k.otlp)
		cfg["exporters"] = map[string]any{"otlp": sec}
	} else {
		cfg["exporters"] = map[string]any{"nop": map[string]any{}}
	}
	pipeline := map[string]any{"receivers": []string{"loadgen"}, "exporters": []string{name}}
	svc["pipelines"] = map[string]any{"traces": pipeline, "metrics": pipeline, "logs": pipeline}
	return cfg
}

func (b *bench) runExporter(ctx context.Context, k exporterKind, users int, schemaName string) exporterResult {
	items := int64(users) * int64(b.events)
	r := exporterResult{Key: k.key, Name: k.name, Users: users, Items: items}
	if k.otlp == nil && !k.nop {
		if err := b.reset(ctx, schemaName); err != nil {
			r.Status, r.Note = "failed", err.Error()
			return r
		}
		prefix := ""
		if k.redis {
			if err := b.redisReachable(ctx); err != nil {
				r.Status, r.Note = "unavailable", fmt.Sprintf("Redis at %s does not answer: %v", b.redisAddr, err)
				return r
			}
			prefix = b.prefix + "-exp-" + strconv.Itoa(users)
			defer b.dropRedisKeys(prefix)
		}
		run, err := b.runCollector(ctx, schemaName, 0, users, b.seed, prefix, 0, nil)
		r.Retries, r.Dropped = run.gen.Retries, run.gen.Dropped
		if err != nil {
			r.Status, r.Note = "failed", err.Error()
			return r
		}
		r.Status, r.Seconds = "ok", run.elapsed.Seconds()
		r.PeakRSSMiB = float64(run.peakRSS) / (1 << 20)
		if run.cpu != nil {
			r.CollectorUsPerItem, r.PostgresUsPerItem = run.cpu.Client, run.cpu.PostgreSQL
		}
		return r
	}

	var sink *sinkCollector
	sinkAddr := ""
	if k.otlp != nil {
		var err error
		if sink, err = b.startSink(ctx); err != nil {
			r.Status, r.Note = "unavailable", err.Error()
			return r
		}
		defer sink.stop()
		sinkAddr = sink.addr
	}
	cfg := b.exporterConfig(k, users, sinkAddr)
	var sinkFrom time.Duration
	if sink != nil {
		sinkFrom, _, _ = procTimes(strconv.Itoa(sink.cmd.Process.Pid))
	}
	run, err := b.runUntilGenerated(ctx, cfg, items)
	r.Retries, r.Dropped = run.gen.Retries, run.gen.Dropped
	if err != nil {
		r.Status, r.Note = "failed", err.Error()
		return r
	}
	if run.gen.Dropped > 0 {
		r.Status, r.Note = "failed", fmt.Sprintf("the loadgen receiver dropped %d items", run.gen.Dropped)
		return r
	}
	r.Status, r.Seconds = "ok", run.elapsed.Seconds()
	r.PeakRSSMiB = float64(run.peakRSS) / (1 << 20)
	r.CollectorUsPerItem = float64(run.cpu.Microseconds()) / float64(items)
	r.Note = fmt.Sprintf("of the collector's CPU, %.0f ms after the receiver finished (the stop, draining the queue)", float64(run.stopCPU.Microseconds())/1000)
	if sink != nil {
		if cpu := sink.stop(); cpu > 0 {
			r.SinkUsPerItem = float64((cpu - sinkFrom).Microseconds()) / float64(items)
		}
	}
	return r
}

// generatedRun is what runUntilGenerated measured.
type generatedRun struct {
	elapsed time.Duration // first batch to the process's exit
	cpu     time.Duration // the process's CPU over the same window
	stopCPU time.Duration // of it, from the receiver's finish to the exit
	peakRSS int64
	gen     genTotals
}

// runUntilGenerated runs a collector of cfg until its loadgen receiver has
// sent every item, then stops it (the stop drains the exporters' queues) and
// measures the process from its first batch to its exit.
func (b *bench) runUntilGenerated(ctx context.Context, cfg map[string]any, items int64) (generatedRun, error) {
	var res generatedRun
	if _, err := os.Stat(b.collector); err != nil {
		return res, fmt.Errorf("%w: no collector at %s (run `make build`)", errUnavailable, b.collector)
	}
	b.collectorRuns++
	cmd, lines, exited, logPath, err := b.startLogged(cfg, "collector-"+strconv.Itoa(b.collectorRuns))
	if err != nil {
		return res, err
	}
	defer stopProcess(cmd, exited)

	timeout := b.collectorTimeout
	if timeout == 0 {
		timeout = collectorTimeout(items)
	}
	deadline := time.After(timeout + time.Minute)
	var (
		t0      time.Time
		cpuFrom time.Duration
	)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				<-exited
				return res, fmt.Errorf("%w: the collector exited before it finished generating (log %s)", errUnavailable, logPath)
			}
			if strings.Contains(line, "Load generation started") && t0.IsZero() {
				t0 = time.Now()
				cpuFrom, _, _ = procTimes(strconv.Itoa(cmd.Process.Pid))
			}
			if strings.Contains(line, "Load generation finished") {
				if json.Unmarshal([]byte(line), &res.gen) == nil {
					res.gen.seen = true
				}
				if t0.IsZero() {
					return res, fmt.Errorf("%w: generation finished before it started (log %s)", errUnavailable, logPath)
				}
				res.peakRSS = procRSS(cmd.Process.Pid, "VmHWM")
				atFinish, _, _ := procTimes(strconv.Itoa(cmd.Process.Pid))
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(60 * time.Second):
					return res, fmt.Errorf("%w: the collector did not stop within 60s of the end of generation (log %s)", errUnavailable, logPath)
				}
				res.elapsed = time.Since(t0)
				if st := cmd.ProcessState; st != nil {
					res.cpu = st.UserTime() + st.SystemTime() - cpuFrom
					res.stopCPU = st.UserTime() + st.SystemTime() - atFinish
				}
				return res, nil
			}
		case <-deadline:
			return res, fmt.Errorf("%w: generation did not finish within %s (log %s)", errUnavailable, (timeout + time.Minute).Round(time.Second), logPath)
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
}

// startLogged writes cfg to b.tmp/<name>.yaml and starts the collector on it
// in its own process group; its output goes to <name>.log and, line by line,
// to the channel (closed at its end).
func (b *bench) startLogged(cfg map[string]any, name string) (*exec.Cmd, <-chan string, <-chan struct{}, string, error) {
	cfgPath := filepath.Join(b.tmp, name+".yaml")
	js, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return nil, nil, nil, "", err
	}
	if err := os.WriteFile(cfgPath, js, 0o600); err != nil {
		return nil, nil, nil, "", err
	}
	logPath := filepath.Join(b.tmp, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, nil, nil, "", err
	}
	cmd := exec.Command(b.collector, "--config", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, nil, nil, "", fmt.Errorf("start collector: %w", err)
	}
	lines := make(chan string, 4096)
	go func() {
		defer close(lines)
		defer logFile.Close()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			fmt.Fprintln(logFile, sc.Text())
			select {
			case lines <- sc.Text():
			default: // nobody reads any more (the run ended): keep draining
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		pw.Close()
		close(exited)
	}()
	return cmd, lines, exited, logPath, nil
}

// sinkCollector is the second collector of the otlp runs: an OTLP gRPC
// receiver into a nop exporter.
type sinkCollector struct {
	cmd    *exec.Cmd
	addr   string
	exited <-chan struct{}
	cpu    time.Duration
	done   bool
}

func (b *bench) startSink(ctx context.Context) (*sinkCollector, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	pipeline := map[string]any{"receivers": []string{"otlp"}, "exporters": []string{"nop"}}
	cfg := map[string]any{
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{"grpc": map[string]any{"endpoint": addr}}}},
		"exporters": map[string]any{"nop": map[string]any{}},
		"service": map[string]any{
			"telemetry": map[string]any{"metrics": map[string]any{"level": "none"}, "logs": map[string]any{"level": "warn"}},
			"pipelines": map[string]any{"traces": pipeline, "metrics": pipeline, "logs": pipeline},
		},
	}
	b.collectorRuns++
	cmd, _, exited, logPath, err := b.startLogged(cfg, "sink-"+strconv.Itoa(b.collectorRuns))
	if err != nil {
		return nil, err
	}
	s := &sinkCollector{cmd: cmd, addr: addr, exited: exited}
	for deadline := time.Now().Add(30 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("%w: the receiving collector exited (log %s)", errUnavailable, logPath)
		case <-ctx.Done():
			s.stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("%w: the receiving collector did not listen on %s within 30s (log %s)", errUnavailable, addr, logPath)
		}
	}
}

// stop stops the sink and returns its CPU over its lifetime (once stopped,
// the same figure again).
func (s *sinkCollector) stop() time.Duration {
	if !s.done {
		s.done = true
		stopProcess(s.cmd, s.exited)
		if st := s.cmd.ProcessState; st != nil {
			s.cpu = st.UserTime() + st.SystemTime()
		}
	}
	return s.cpu
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// exportersMarkdown is the exporters part's section.
func exportersMarkdown(rs []exporterResult) string {
	if len(rs) == 0 {
		return ""
	}
	var sb strings.Builder
	w := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	w("## The collector against the Collector's own exporters\n\n")
	w("The same loadgen input (the same seed) into each exporter of the built distribution. ")
	w("`Collector µs/item` is the collector process's CPU (user + system) per item, from the loadgen receiver's first batch to the last commit (postgrescopy) or to the process's exit after the receiver finished (otlp, nop: the stop drains the otlp exporter's queue); ")
	w("`exporter µs/item` is that less the nop run's (what generating the input costs), the exporter's own cost. ")
	w("otlp sends over gRPC on the loopback to a second collector (an OTLP receiver into a nop exporter), whose CPU is shown apart. ")
	w("Every process shares the machine's cores.\n\n")
	w("| Exporter | Users | Items | Seconds | Collector µs/item | Exporter µs/item | Receiving collector µs/item | PostgreSQL µs/item | Peak RSS MiB | Notes |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	f := func(v float64) string {
		if v == 0 {
			return "—"
		}
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	for _, r := range rs {
		note := r.Note
		if r.Status != "ok" {
			note = "**" + r.Status + "**: " + note
			w("| %s | %d | %s | — | — | — | — | — | — | %s |\n", r.Name, r.Users, num(float64(r.Items)), strings.ReplaceAll(note, "|", "/"))
			continue
		}
		if r.Retries > 0 {
			note = strings.TrimPrefix(note+fmt.Sprintf("; the receiver resent %d refused batches", r.Retries), "; ")
		}
		exp := f(r.ExporterUsPerItem)
		if r.Key == "nop" {
			exp = "0 (the baseline)"
		}
		w("| %s | %d | %s | %.2f | %s | %s | %s | %s | %.0f | %s |\n", r.Name, r.Users, num(float64(r.Items)), r.Seconds,
			f(r.CollectorUsPerItem), exp, f(r.SinkUsPerItem), f(r.PostgresUsPerItem), r.PeakRSSMiB, strings.ReplaceAll(note, "|", "/"))
	}
	w("\n")
	return sb.String()
}
