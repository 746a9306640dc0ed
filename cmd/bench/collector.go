package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// errUnavailable marks a strategy the built collector cannot run (a config
// key it does not know yet, rows that never arrive): reported, not fatal.
var errUnavailable = errors.New("unavailable")

// collectorRun is what one run of the built collector measured.
type collectorRun struct {
	rows int64
	// warmup is the users the collector wrote untimed before the run (the
	// loadgen receiver's warm-up); 0 for none.
	warmup int
	// elapsed runs from the loadgen receiver's "Load generation started"
	// (every exporter is started by then) to the exporter's log line of the
	// commit that completes the expected rows (then counted in PostgreSQL).
	elapsed time.Duration
	// startup is from exec to "Load generation started": process start,
	// config, pool and schema check. Reported, not counted in rows/s.
	startup time.Duration
	// peakRSS is the collector's VmHWM (peak resident set) in bytes when
	// the last row arrived; 0 when /proc does not say.
	peakRSS int64
	// startRSS is the collector's VmRSS in bytes when generation started:
	// with pregenerated input, the baseline that input holds.
	startRSS     int64
	pregenerated bool
	// gen is the loadgen receiver's final counts ("Load generation
	// finished"): its retries and what it dropped.
	gen genTotals
	// cpu is what the run cost in CPU per row, over the same window as
	// elapsed, the collector process as the client.
	cpu *cpuPerRow
	// commitAges are the exporter's "entries committed" ages in Redis mode:
	// each entry's XADD to its commit, in ms.
	commitAges []int64
}

// liveRun is the collector run in progress, for a part that samples it.
type liveRun struct {
	pid       int
	committed *atomic.Int64 // rows of the batches the exporter logged as committed
	// bySignal splits committed by the signal of the batch: a batch holds
	// one signal's tables.
	bySignal *[numSignals]atomic.Int64
}

// Signals, as liveRun.bySignal indexes them.
const (
	signalSpans = iota
	signalLogs
	signalMetrics
	numSignals
)

// batchSignal is the signal of a batch written into tables: spans, logs,
// else metric points.
func batchSignal(tables []string) int {
	switch {
	case slices.Contains(tables, "spans"):
		return signalSpans
	case slices.Contains(tables, "logs"):
		return signalLogs
	}
	return signalMetrics
}

// genTotals is what the loadgen receiver logs when it finishes.
type genTotals struct {
	Refused int64 `json:"refused"`
	Retries int64 `json:"retries"`
	Dropped int64 `json:"dropped"`
	seen    bool
}

func (g genTotals) String() string {
	if !g.seen {
		return "the receiver had not finished generating"
	}
	return fmt.Sprintf("the receiver resent %d refused batches and dropped %d items", g.Retries, g.Dropped)
}

// errLost marks a run that ended with rows missing: reported with the count.
type errLost struct {
	lost int64
	msg  string
}

func (e *errLost) Error() string { return e.msg }
func (e *errLost) Unwrap() error { return errUnavailable }

// procRSS reads a memory field of /proc/<pid>/status (VmRSS, VmHWM), in
// bytes; 0 when /proc does not say.
func procRSS(pid int, field string) int64 {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// collectorConfig is the distribution's config for one bench run: the loadgen
// receiver on every signal into the postgrescopy exporter with its defaults.
// It is JSON, which the Collector reads as YAML.
func (b *bench) collectorConfig(schemaName string, users int, seed uint64, redisPrefix string) map[string]any {
	exp := map[string]any{
		"endpoint":      b.url,
		"schema":        schemaName,
		"create_schema": true,
	}
	if redisPrefix != "" {
		sec := map[string]any{"endpoint": b.redisAddr, "key_prefix": redisPrefix}
		if b.redisSection != nil {
			delete(sec, "endpoint")
			for k, v := range b.redisSection {
				sec[k] = v
			}
		}
		exp["redis"] = sec
		// Redis is the queue: the exporter refuses an in-memory queue that
		// would acknowledge data before Redis holds it.
		exp["sending_queue"] = map[string]any{"enabled": false}
	}
	// Merged key by key: {"redis":{"workers":1}} keeps the run's endpoint
	// and key_prefix.
	mergeConfig(exp, b.exporterExtra)
	mergeConfig(exp, b.variantExporter)
	lg := map[string]any{
		"users":           users,
		"events_per_user": b.events,
		"seed":            seed,
		"concurrency":     b.loadgenConcurrency,
		"pregenerate":     b.pregenerate,
	}
	for k, v := range b.loadgenExtra {
		lg[k] = v
	}
	mergeConfig(lg, b.variantLoadgen)
	pipeline := map[string]any{"receivers": []string{"loadgen"}, "exporters": []string{"postgrescopy"}}
	cfg := map[string]any{
		"receivers": map[string]any{"loadgen": lg},
		"exporters": map[string]any{"postgrescopy": exp},
		"service": map[string]any{
			"telemetry": map[string]any{
				// No internal metrics endpoint: runs must not fight over :8888.
				"metrics": map[string]any{"level": "none"},
				// Debug, unsampled: the exporter logs every committed batch
				// ("batch written", with its rows), which times the run
				// without polling PostgreSQL (see runCollector).
				"logs": map[string]any{"level": "debug", "encoding": "json", "sampling": map[string]any{"enabled": false}},
			},
			"pipelines": map[string]any{"traces": pipeline, "metrics": pipeline, "logs": pipeline},
		},
	}
	if b.pprof != "" {
		cfg["extensions"] = map[string]any{"pprof": map[string]any{"endpoint": b.pprof}}
		cfg["service"].(map[string]any)["extensions"] = []string{"pprof"}
	}
	return cfg
}

// runCollector runs the built collector until base plus the workload's rows
// are in schemaName, calling during (when set) from the start of generation until
// then. With warmup > 0 the collector first writes that many users of the
// next seed (the loadgen receiver's warm-up), untimed, so that the clock
// runs on a collector that has written a burst before. A collector that
// refuses the config or does not deliver in time returns an error wrapping
// errUnavailable.
func (b *bench) runCollector(ctx context.Context, schemaName string, base int64, users int, seed uint64, redisPrefix string, warmup int, during func(context.Context)) (collectorRun, error) {
	var res collectorRun
	if _, err := os.Stat(b.collector); err != nil {
		return res, fmt.Errorf("%w: no collector at %s (run `make build`)", errUnavailable, b.collector)
	}
	b.collectorRuns++
	cfgPath := filepath.Join(b.tmp, "collector-"+strconv.Itoa(b.collectorRuns)+".yaml")
	cfg := b.collectorConfig(schemaName, users, seed, redisPrefix)
	if warmup > 0 {
		lg := cfg["receivers"].(map[string]any)["loadgen"].(map[string]any)
		lg["warmup_users"], lg["warmup_pause"] = warmup, warmupPause(warmup, b.events).String()
	}
	cfgJSON, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(cfgPath, cfgJSON, 0o600); err != nil {
		return res, err
	}
	logPath := strings.TrimSuffix(cfgPath, ".yaml") + ".log"
	logFile, err := os.Create(logPath)
	if err != nil {
		return res, err
	}
	defer logFile.Close()

	// want is the timed run's rows; expected the rows in the tables at its
	// end (base moves past the warm-up's rows once they are in).
	want := int64(users) * int64(b.events)
	expected := base + want
	cmd := exec.Command(b.collector, "--config", cfgPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if len(b.variantEnv) > 0 {
		cmd.Env = append(os.Environ(), b.variantEnv...)
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	execAt := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("start collector: %w", err)
	}
	exited := make(chan struct{})
	var exitErr error
	go func() {
		exitErr = cmd.Wait()
		pw.Close()
		close(exited)
	}()
	scanned := make(chan struct{})
	defer func() {
		stopProcess(cmd, exited)
		<-scanned
	}()

	// Scan the log: note when generation starts, keep the tail for errors.
	type start struct {
		at  time.Time
		rss int64
		cpu cpuMark
	}
	started := make(chan start, 1)
	// done receives when the batches committed so far hold every row.
	done := make(chan time.Time, 1)
	// warmed receives when the receiver's warm-up has been sent.
	warmed := make(chan struct{}, 1)
	// finished receives the receiver's totals when it stops generating.
	finished := make(chan genTotals, 1)
	// committed and lastCommit are read by the stall check below.
	var committed, lastCommit atomic.Int64
	var bySignal [numSignals]atomic.Int64
	var (
		agesMu sync.Mutex
		ages   []int64
	)
	var (
		tailMu sync.Mutex
		tail   []string
	)
	go func() {
		defer close(scanned)
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logFile, line)
			if strings.Contains(line, `"msg":"batch written"`) {
				// signal_rows leaves out the context dictionary's rows a
				// batch carries (ON CONFLICT DO NOTHING: most are not new).
				var rec struct {
					Rows       int64    `json:"rows"`
					SignalRows *int64   `json:"signal_rows"`
					Tables     []string `json:"tables"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil {
					if rec.SignalRows != nil {
						rec.Rows = *rec.SignalRows
					}
					bySignal[batchSignal(rec.Tables)].Add(rec.Rows)
					lastCommit.Store(time.Now().UnixNano())
					if committed.Add(rec.Rows) >= want {
						select {
						case done <- time.Now():
						default:
						}
					}
				}
			}
			if strings.Contains(line, "Load generation finished") {
				var g genTotals
				if json.Unmarshal([]byte(line), &g) == nil {
					g.seen = true
					select {
					case finished <- g:
					default:
					}
				}
			}
			if strings.Contains(line, `"msg":"entries committed"`) {
				var rec struct {
					Ages []int64 `json:"xadd_to_commit_ms"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil {
					agesMu.Lock()
					ages = append(ages, rec.Ages...)
					agesMu.Unlock()
				}
			}
			if strings.Contains(line, "Load generation warmed up") {
				select {
				case warmed <- struct{}{}:
				default:
				}
			}
			if strings.Contains(line, "Load generation started") {
				// The warm-up's batches are not the run's.
				committed.Store(0)
				for i := range bySignal {
					bySignal[i].Store(0)
				}
				// RSS now, before sending grows it: the pregenerated input.
				st := start{at: time.Now(), rss: procRSS(cmd.Process.Pid, "VmRSS"), cpu: markCPU(cmd.Process.Pid)}
				select {
				case started <- st:
				default:
				}
			}
			if strings.Contains(line, `"level":"error"`) || strings.Contains(line, `"level":"warn"`) ||
				strings.HasPrefix(line, "Error") || !strings.HasPrefix(line, "{") {
				tailMu.Lock()
				tail = append(tail, line)
				if len(tail) > 20 {
					tail = tail[1:]
				}
				tailMu.Unlock()
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	why := func() string {
		tailMu.Lock()
		defer tailMu.Unlock()
		if len(tail) == 0 {
			return "no error in its log (" + logPath + ")"
		}
		return lastLines(strings.Join(tail, "\n"), 3)
	}

	// Pregenerating holds back "Load generation started" while every batch
	// is built; allow it 50µs an item on top.
	startWait := 60 * time.Second
	warm := int64(warmup) * int64(b.events)
	if warmup > 0 {
		// The warm-up's writing (5,000 rows a second, the slowest seen)
		// and its pause come first.
		startWait += warmupPause(warmup, b.events) + time.Duration(warm)*200*time.Microsecond
	}
	if warmup > 0 {
		// Every warm-up row must be in before the clock runs, or the run
		// would time some of them: counted from the end of its sending
		// until all are in, which must come before generation starts.
		select {
		case <-warmed:
		case <-exited:
			<-scanned
			return res, fmt.Errorf("%w: the collector exited before its warm-up was sent (%v): %s", errUnavailable, exitErr, why())
		case <-time.After(startWait):
			return res, fmt.Errorf("%w: the collector did not send its warm-up within %s: %s", errUnavailable, startWait.Round(time.Second), why())
		case <-ctx.Done():
			return res, ctx.Err()
		}
		for {
			late := len(started) > 0 // generation started: its rows may be counted too
			n, err := countSignalRows(ctx, b.pool, schemaName)
			if err != nil {
				return res, fmt.Errorf("count the warm-up's rows: %w", err)
			}
			if n-base == warm && !late {
				break
			}
			if late || len(started) > 0 {
				return res, fmt.Errorf("the warm-up's rows were not all written within the %s pause before the run (%d rows in, %d sent): %s", warmupPause(warmup, b.events), n-base, warm, why())
			}
			if n-base > warm {
				return res, fmt.Errorf("the warm-up wrote %d rows, %d sent: duplicates", n-base, warm)
			}
			time.Sleep(100 * time.Millisecond)
		}
		res.warmup = warmup
		base += warm
		expected = base + want
	}
	if b.pregenerate {
		startWait += time.Duration(users) * time.Duration(b.events) * 50 * time.Microsecond
	}
	var (
		t0      time.Time
		cpuFrom cpuMark
	)
	select {
	case st := <-started:
		t0, res.startRSS, res.pregenerated, cpuFrom = st.at, st.rss, b.pregenerate, st.cpu
	case <-exited:
		<-scanned
		return res, fmt.Errorf("%w: the collector exited before generating (%v): %s", errUnavailable, exitErr, why())
	case <-time.After(startWait):
		return res, fmt.Errorf("%w: the collector did not start generating within %s: %s", errUnavailable, startWait.Round(time.Second), why())
	case <-ctx.Done():
		return res, ctx.Err()
	}
	res.startup = t0.Sub(execAt)
	if warmup > 0 {
		// The warm-up's "batch written" lines may have filled done: the
		// counts started again with generation.
		select {
		case <-done:
		default:
		}
	}

	b.live = &liveRun{pid: cmd.Process.Pid, committed: &committed, bySignal: &bySignal}
	defer func() { b.live = nil }()
	duringCtx, stopDuring := context.WithCancel(ctx)
	var duringDone sync.WaitGroup
	if during != nil {
		duringDone.Go(func() { during(duringCtx) })
	}
	defer func() { stopDuring(); duringDone.Wait() }()

	timeout := b.collectorTimeout
	if timeout == 0 {
		timeout = collectorTimeout(expected - base)
	}
	// The clock stops when the exporter has logged commits of every row: a
	// debug line per batch, read as it is written. Polling count(*) instead
	// cost PostgreSQL CPU during the run and overshot by up to one polling
	// interval (a tenth of a second and more at 50 users). The rows are
	// counted in PostgreSQL afterwards. A run fails, saying what it lost,
	// when no batch commits for b.collectorStall, when the receiver has
	// finished and nothing commits for a few seconds more, or at timeout.
	lastCommit.Store(t0.UnixNano())
	check := time.NewTicker(time.Second)
	defer check.Stop()
	deadline := t0.Add(timeout)
	var gen genTotals
	var genAt time.Time
	lost := func(reason string) error {
		n, _ := countSignalRows(context.WithoutCancel(ctx), b.pool, schemaName)
		res.gen = gen
		return &errLost{lost: expected - n, msg: fmt.Sprintf("lost %d of %d rows (%d in PostgreSQL) %s; %s; %s",
			expected-n, expected-base, n-base, reason, gen, why())}
	}
wait:
	for {
		select {
		case at := <-done:
			res.elapsed = at.Sub(t0)
			res.peakRSS = procRSS(cmd.Process.Pid, "VmHWM")
			res.cpu = cpuBetween(cpuFrom, markCPU(cmd.Process.Pid), clientCollector, expected-base)
			// during ends with the ingest it samples: the count below
			// scans every row and takes seconds at scale, and a sample
			// taken after it would charge that idle time and that scan
			// to the last interval of ingest.
			stopDuring()
			duringDone.Wait()
			break wait
		case g := <-finished:
			gen, genAt = g, time.Now()
		case <-exited:
			return res, fmt.Errorf("%w: the collector exited before writing every row (%v): %s", errUnavailable, exitErr, why())
		case <-ctx.Done():
			return res, ctx.Err()
		case now := <-check.C:
			idle := now.Sub(time.Unix(0, lastCommit.Load()))
			switch {
			case now.After(deadline):
				return res, lost(fmt.Sprintf("after the %s timeout", timeout.Round(time.Second)))
			case idle > b.collectorStall:
				return res, lost(fmt.Sprintf("after %s without a commit", idle.Round(time.Second)))
			case !genAt.IsZero() && gen.Dropped > 0 && idle > 5*time.Second:
				return res, lost("once generation ended")
			}
		}
	}
	// A late "finished" line still says what the receiver resent.
	select {
	case g := <-finished:
		gen = g
	case <-time.After(2 * time.Second):
	}
	res.gen = gen
	n, err := countSignalRows(ctx, b.pool, schemaName)
	if err != nil {
		return res, fmt.Errorf("count rows: %w", err)
	}
	res.rows = n - base
	if n < expected {
		return res, &errLost{lost: expected - n, msg: fmt.Sprintf("lost %d rows: the collector logged every row committed but %d of %d are in PostgreSQL", expected-n, n-base, expected-base)}
	}
	stopDuring()
	duringDone.Wait()
	if res.rows+base > expected {
		return res, fmt.Errorf("the collector wrote %d rows, expected %d: duplicates", res.rows, expected-base)
	}
	agesMu.Lock()
	res.commitAges = append([]int64(nil), ages...)
	agesMu.Unlock()
	return res, nil
}

// warmupPause is the loadgen receiver's wait between its warm-up of users
// and the run, for the exporter to write what it still holds: 5s and a
// second per 25,000 rows, several times the longest tail seen (the Redis
// Cluster strategy's XADD-to-commit p99 at 100 users, 2.6s).
func warmupPause(users, events int) time.Duration {
	return 5*time.Second + time.Duration(users)*time.Duration(events)*time.Second/25_000
}

// collectorTimeout bounds a collector run of rows rows: two minutes plus
// 5,000 rows a second, a tenth of what the machine's slowest collector run
// reached (1,000 users: 1.9M rows, 8.3 minutes). Stalls end sooner
// (-collector-stall).
func collectorTimeout(rows int64) time.Duration {
	return 2*time.Minute + time.Duration(rows)*time.Second/5000
}

// stopProcess ends a process group the bench started: SIGTERM, then SIGKILL
// if it has not exited within 15s.
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) {
	if cmd.Process == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(15 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

func newRedisClient(addr string) *redis.Client { return redis.NewClient(&redis.Options{Addr: addr}) }

// dropRedisKeys deletes every key naming prefix: a run's streams and groups
// (the exporter wraps the prefix in a hash tag, {prefix:signal}).
func (b *bench) dropRedisKeys(prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := newRedisClient(b.redisAddr)
	defer c.Close()
	var keys []string
	it := c.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		keys = append(keys, it.Val())
	}
	if err := it.Err(); err != nil {
		b.logf("cleanup: scan Redis keys %s*: %v", prefix, err)
		return
	}
	if len(keys) > 0 {
		if err := c.Del(ctx, keys...).Err(); err != nil {
			b.logf("cleanup: delete Redis keys %s*: %v", prefix, err)
		}
	}
}

// redisReachable reports whether Redis answers PING.
func (b *bench) redisReachable(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c := newRedisClient(b.redisAddr)
	defer c.Close()
	return c.Ping(ctx).Err()
}
