package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// A scenario is one failure the soak puts the built collector through; it
// returns a row per mode it ran.
type scenario struct {
	name string
	run  func(ctx context.Context, o *options) []row
}

// scenarios in the order `-scenarios all` runs them.
var scenarios = []scenario{
	{"kill", runKill},
	{"redis-empty", runRedisEmpty},
	{"redis-aof", runRedisAOF},
	{"pg-outage", runPGOutage},
	{"collector-kill-outage", runCollectorKillOutage},
	{"stop-outage", runStopOutage},
	{"identical", runIdentical},
	{"redis-stream-deleted", runStreamDeleted},
	{"redis-evicting-policy", runEvictingPolicy},
	{"redis-oom", runRedisOOM},
	{"redis-sentinel-unknown-master", runSentinelUnknownMaster},
}

// row is one line of the final table. acked, stored, missing and duplicated
// count items (spans, or log records for identical): stored is the
// acknowledged items found at least once, duplicated every copy beyond the
// first of any item.
type row struct {
	scenario, mode                     string
	acked, stored, missing, duplicated int64
	// reported is "yes"/"no" when acknowledged items were lost and the
	// scenario asks whether the collector said so; "-" otherwise.
	reported string
	pass     bool
	err      error // the scenario could not run: no verdict on the exporter
	notes    []string
}

func (r *row) note(format string, args ...any) {
	r.notes = append(r.notes, fmt.Sprintf(format, args...))
}

func (r *row) verdict() string {
	switch {
	case r.err != nil && !errors.Is(r.err, errExited):
		return "error"
	case r.pass:
		return "pass"
	default:
		return "fail"
	}
}

// selectScenarios parses -scenarios: "all" or a comma-separated list.
func selectScenarios(list string) ([]scenario, error) {
	if list == "" || list == "all" {
		return scenarios, nil
	}
	var out []scenario
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range scenarios {
			if s.name == name {
				out, found = append(out, s), true
			}
		}
		if !found {
			var names []string
			for _, s := range scenarios {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("unknown scenario %q (known: %s, or all)", name, strings.Join(names, ","))
		}
	}
	return out, nil
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintf(w, "\nsoak scenarios\n")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tmode\tacknowledged\tstored\tmissing\tduplicated\treported-loss\tverdict\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t\n", r.scenario, r.mode, r.acked, r.stored, r.missing, r.duplicated, r.reported, r.verdict())
	}
	_ = tw.Flush()
	for _, r := range rows {
		if r.err != nil {
			fmt.Fprintf(w, "  %s/%s: stopped: %v\n", r.scenario, r.mode, r.err)
		}
		for _, n := range r.notes {
			fmt.Fprintf(w, "  %s/%s: %s\n", r.scenario, r.mode, n)
		}
	}
}

// env is one collector under test and what it writes to: its own schema,
// temp dir, and (Redis mode) key prefix on a Redis of the scenario's.
type env struct {
	o              *options
	label          string // scenario/mode, for progress lines
	tmp            string
	pool           *pgxpool.Pool
	pgURL, schema  string
	redisAddr      string // "" in direct mode
	rdb            *redis.Client
	prefix         string
	coll           *collector
	grpcAddr       string
	keep           bool // temp dir kept for a failed scenario
	metricsAtCheck string
}

func newEnv(ctx context.Context, o *options, label, pgURL, redisAddr string) (*env, error) {
	e := &env{o: o, label: label, pgURL: pgURL, redisAddr: redisAddr}
	var err error
	if e.tmp, err = os.MkdirTemp("", "postgrescopy-soak-"+strings.ReplaceAll(label, "/", "-")+"-"); err != nil {
		return nil, err
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	e.schema, e.prefix = "soak_"+suffix, "soak-"+suffix
	if e.pool, err = pgxpool.New(ctx, pgURL); err == nil {
		err = e.pool.Ping(ctx)
	}
	if err != nil {
		e.close()
		return nil, fmt.Errorf("PostgreSQL at %s: %w", pgURL, err)
	}
	if _, err := e.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{e.schema}.Sanitize()); err != nil {
		e.close()
		return nil, fmt.Errorf("create schema %s: %w", e.schema, err)
	}
	if redisAddr != "" {
		// No retries of our own: a reading taken while Redis is down should
		// say so rather than wait.
		e.rdb = redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: -1})
	}
	return e, nil
}

func (e *env) logf(format string, args ...any) {
	fmt.Printf("soak[%s]: "+format+"\n", append([]any{e.label}, args...)...)
}

// collectorSpec is what differs between the scenarios' collector configs.
type collectorSpec struct {
	// queue replaces the exporter's sending_queue section (nil: its
	// default; Redis mode always turns it off, as the exporter requires).
	queue map[string]any
	// retry replaces retry_on_failure (nil: the default, as users get it).
	retry map[string]any
	// fileStorage adds a file_storage extension keeping its files there.
	fileStorage string
	// signals are the pipelines: "traces" and/or "logs".
	signals []string
	// redis adds settings to the redis section (Redis mode only).
	redis map[string]any
}

// startCollector writes the config and starts the collector on free ports.
func (e *env) startCollector(ctx context.Context, spec collectorSpec) error {
	ps, err := ports.Free(3)
	if err != nil {
		return err
	}
	grpcAddr, healthAddr, metricsAddr := ports.Addr(ps[0]), ports.Addr(ps[1]), ports.Addr(ps[2])
	cfgPath := filepath.Join(e.tmp, "config.yaml")
	if err := writeConfig(cfgPath, e.config(spec, grpcAddr, healthAddr, metricsAddr)); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	e.grpcAddr = grpcAddr
	e.coll = &collector{bin: e.o.collector, cfgPath: cfgPath, logPath: filepath.Join(e.tmp, "collector.log"), health: healthAddr, metrics: metricsAddr}
	return e.coll.start(ctx)
}

func (e *env) config(spec collectorSpec, grpcAddr, healthAddr, metricsAddr string) map[string]any {
	host, port, _ := net.SplitHostPort(metricsAddr)
	portNum, _ := strconv.Atoi(port)
	exp := map[string]any{
		"endpoint":      e.pgURL,
		"schema":        e.schema,
		"create_schema": true,
	}
	if spec.queue != nil {
		exp["sending_queue"] = spec.queue
	}
	if spec.retry != nil {
		exp["retry_on_failure"] = spec.retry
	}
	if e.redisAddr != "" {
		exp["sending_queue"] = map[string]any{"enabled": false}
		rc := map[string]any{"endpoint": e.redisAddr, "key_prefix": e.prefix}
		for k, v := range spec.redis {
			rc[k] = v
			if v == nil {
				delete(rc, k) // e.g. no endpoint with a sentinel section
			}
		}
		exp["redis"] = rc
	}
	extensions := map[string]any{"health_check": map[string]any{"endpoint": healthAddr}}
	extNames := []string{"health_check"}
	if spec.fileStorage != "" {
		extensions["file_storage"] = map[string]any{"directory": spec.fileStorage}
		extNames = append(extNames, "file_storage")
	}
	pipelines := map[string]any{}
	for _, sig := range spec.signals {
		pipelines[sig] = map[string]any{"receivers": []string{"otlp"}, "exporters": []string{"postgrescopy"}}
	}
	return map[string]any{
		"extensions": extensions,
		"receivers": map[string]any{"otlp": map[string]any{"protocols": map[string]any{
			"grpc": map[string]any{"endpoint": grpcAddr},
		}}},
		"exporters": map[string]any{"postgrescopy": exp},
		"service": map[string]any{
			"extensions": extNames,
			"telemetry": map[string]any{
				"metrics": map[string]any{
					"level": "normal",
					"readers": []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
						"prometheus": map[string]any{"host": host, "port": portNum},
					}}}},
				},
				"logs": map[string]any{"level": "info"},
			},
			"pipelines": pipelines,
		},
	}
}

// newLoad is a span load on the env's collector with fresh ids.
func (e *env) newLoad(perRequest int, pause time.Duration) *load {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	return &load{perRequest: perRequest, nonce: binary.BigEndian.Uint64(nonce[:]), pause: pause}
}

func (e *env) table(name string) string { return pgx.Identifier{e.schema, name}.Sanitize() }

func (e *env) count(ctx context.Context, table string) (int64, error) {
	var n int64
	err := e.pool.QueryRow(ctx, "SELECT count(*) FROM "+e.table(table)).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count %s: %w", e.table(table), err)
	}
	return n, nil
}

// waitRows waits, in direct mode, until table holds at least want rows and
// the count then holds still for 3s (a duplicate would show up meanwhile),
// or until timeout. It returns whether want was reached; a direct collector
// has no backlog to read from outside, so a shortfall costs the timeout.
func (e *env) waitRows(ctx context.Context, table string, want int64, timeout time.Duration) (bool, error) {
	deadline := time.Now().Add(timeout)
	var reached time.Time
	var last int64 = -1
	var lastReport time.Time
	for {
		if err := e.coll.exitedEarly(); err != nil {
			return false, err
		}
		n, err := e.count(ctx, table)
		if err != nil {
			return false, err
		}
		switch {
		case n < want:
			reached = time.Time{}
		case n != last || reached.IsZero():
			reached = time.Now()
		case time.Since(reached) >= 3*time.Second:
			return true, nil
		}
		last = n
		if time.Now().After(deadline) {
			return n >= want, nil
		}
		if time.Since(lastReport) >= 10*time.Second {
			lastReport = time.Now()
			e.logf("waiting for rows: %d of %d acknowledged", n, want)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// waitDrained waits, in Redis mode, until the stream of sig is empty with
// nothing pending and the table's count is the same on two polls, or until
// timeout; it returns whether it drained.
func (e *env) waitDrained(ctx context.Context, sig, table string, timeout time.Duration) (bool, error) {
	keys := coord.KeysFor(e.prefix, sig)
	deadline := time.Now().Add(timeout)
	last := int64(-1)
	var lastReport time.Time
	for {
		if err := e.coll.exitedEarly(); err != nil {
			return false, err
		}
		xlen, pending, berr := e.backlog(ctx, keys)
		n, err := e.count(ctx, table)
		if err != nil {
			return false, err
		}
		if berr == nil && xlen == 0 && pending == 0 {
			if n == last {
				return true, nil
			}
			last = n
		} else {
			last = -1
		}
		if time.Now().After(deadline) {
			e.logf("not drained after %s: %d entries in %s, %d pending, %d rows (%v)", timeout, xlen, keys.Stream, pending, n, berr)
			return false, nil
		}
		if time.Since(lastReport) >= 10*time.Second {
			lastReport = time.Now()
			e.logf("draining: %d entries in the stream, %d pending, %d rows", xlen, pending, n)
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (e *env) backlog(ctx context.Context, keys coord.Keys) (xlen, pending int64, err error) {
	if xlen, err = e.rdb.XLen(ctx, keys.Stream).Result(); err != nil {
		return -1, -1, fmt.Errorf("xlen %s: %w", keys.Stream, err)
	}
	p, err := e.rdb.XPending(ctx, keys.Stream, keys.Group).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		// NOGROUP after Redis lost its data: not drained, whatever XLEN says.
		return xlen, -1, fmt.Errorf("xpending %s: %w", keys.Stream, err)
	}
	if p != nil {
		pending = p.Count
	}
	return xlen, pending, nil
}

// tally holds the stored spans against the load's log. atRisk, when not
// nil, marks acknowledged requests whose loss the scenario allows (if
// reported); their missing spans are counted apart.
type tally struct {
	acked, stored, missing, missingAtRisk, duplicated int64
	failedStored, unexpected                          int64
	examples                                          []string
}

func (e *env) tally(ctx context.Context, ld *load, atRisk func(request) bool) (*tally, error) {
	t := &tally{}
	handedOut := ld.spans.Load()
	example := func(format string, args ...any) {
		if len(t.examples) < 5 {
			t.examples = append(t.examples, fmt.Sprintf(format, args...))
		}
	}
	seen, st, err := readSpanIDs(ctx, e.pool, e.table("spans"), handedOut, example)
	if err != nil {
		return nil, err
	}
	t.unexpected = st.unexpected
	for _, q := range ld.log {
		if q.acked {
			t.acked += int64(q.n)
		}
		for k := q.first; k < q.first+uint64(q.n); k++ {
			n := seen[k]
			seen[k] = 0
			if n > 1 {
				t.duplicated += int64(n - 1)
				example("span %016x stored %d times", spanID(k), n)
			}
			switch {
			case q.acked && n == 0:
				t.missing++
				if atRisk != nil && atRisk(q) {
					t.missingAtRisk++
				} else {
					example("span %016x (acknowledged %s) missing", spanID(k), q.done.Format("15:04:05.000"))
				}
			case q.acked:
				t.stored++
			case n > 0:
				t.failedStored++
			}
		}
	}
	for _, n := range seen {
		t.unexpected += int64(n)
	}
	return t, nil
}

// fill copies a tally into the row and decides the exactly-once verdict
// (every acknowledged span once, nothing unexpected).
func (t *tally) fill(r *row) {
	r.acked, r.stored, r.missing, r.duplicated = t.acked, t.stored, t.missing, t.duplicated
	r.reported = "-"
	r.pass = t.missing == 0 && t.duplicated == 0 && t.unexpected == 0
	if t.failedStored > 0 {
		r.note("%d spans of failed requests stored once (allowed)", t.failedStored)
	}
	if t.unexpected > 0 {
		r.note("%d rows of spans never sent", t.unexpected)
	}
	for _, ex := range t.examples {
		r.note("e.g. %s", ex)
	}
}

// metricsText is the collector's Prometheus page ("" when unreachable).
func (e *env) metricsText() string {
	if e.coll == nil || e.coll.cur == nil {
		return ""
	}
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + e.coll.metrics + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

var (
	// The exporter's Error line when a stream vanished (internal/coord, runtime.go).
	lossLogLine = regexp.MustCompile(`(\terror\t|"level":"error").*Redis lost the stream`)
	// The exporter's loss counters (documentation.md).
	lossMetric = regexp.MustCompile(`^(otelcol_postgrescopy_redis_(?:data_loss|lost_entries)(?:_total)?)(?:\{[^}]*\})? (\S+)$`)
)

// lossReport says how the collector reported lost Redis data: the first
// matching Error log line and any loss counter above 0.
func lossReport(logPath, metrics string) (evidence []string) {
	if f, err := os.Open(logPath); err == nil {
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
		for sc.Scan() {
			if lossLogLine.MatchString(sc.Text()) {
				line := sc.Text()
				if len(line) > 300 {
					line = line[:300] + "…"
				}
				evidence = append(evidence, "log: "+line)
				break
			}
		}
		_ = f.Close()
	}
	for _, line := range strings.Split(metrics, "\n") {
		if m := lossMetric.FindStringSubmatch(line); m != nil {
			if v, err := strconv.ParseFloat(m[2], 64); err == nil && v > 0 {
				evidence = append(evidence, "metric: "+line)
			}
		}
	}
	return evidence
}

// matchingLines counts the log lines containing s.
func matchingLines(path, s string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return strings.Count(string(b), s)
}

// close stops the collector, drops the schema (kept with -keep), closes the
// clients and removes the temp dir (kept with -keep or after a failure).
func (e *env) close() {
	if e.coll != nil {
		_ = e.coll.terminate()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
	if e.pool != nil {
		if !e.o.keep {
			if _, err := e.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{e.schema}.Sanitize()+" CASCADE"); err != nil {
				fmt.Fprintf(os.Stderr, "soak[%s]: drop schema %s: %v\n", e.label, e.schema, err)
			}
		}
		e.pool.Close()
	}
	if e.o.keep || e.keep {
		fmt.Printf("soak[%s]: temp dir %s kept (collector.log)\n", e.label, e.tmp)
	} else if e.tmp != "" {
		_ = os.RemoveAll(e.tmp)
	}
}

// finish keeps the temp dir of a row that did not pass and points to it.
func (e *env) finish(r *row) {
	if r.pass && r.err == nil {
		return
	}
	e.keep = true
	if e.coll != nil {
		r.note("collector log: %s", e.coll.logPath)
	}
}

// sleepCtx sleeps d, failing early on interruption.
func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// spanIDStats is what readSpanIDs counted besides the per-span tally.
type spanIDStats struct {
	rows       int64 // rows read
	unexpected int64 // rows whose span id is NULL or was never handed out
}

// readSpanIDs reads every stored span id of table once and counts each of
// the handedOut ids the load generated. Ids come from a counter, so the
// counts live in a slice indexed by it (a byte per span handed out) rather
// than in a map.
func readSpanIDs(ctx context.Context, pool *pgxpool.Pool, table string, handedOut uint64,
	example func(format string, args ...any)) ([]uint8, spanIDStats, error) {
	var st spanIDStats
	seen := make([]uint8, handedOut+1)
	rows, err := pool.Query(ctx, "SELECT span_id FROM "+table)
	if err != nil {
		return nil, st, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id *int64
		if err := rows.Scan(&id); err != nil {
			return nil, st, err
		}
		st.rows++
		if id == nil {
			st.unexpected++
			example("a row with a NULL span_id")
			continue
		}
		k := uint64(*id) &^ (1 << 63)
		if k == 0 || k > handedOut || spanID(k) != uint64(*id) {
			st.unexpected++
			example("span %016x stored but never sent", uint64(*id))
			continue
		}
		if seen[k] < 255 {
			seen[k]++
		}
	}
	return seen, st, rows.Err()
}
