package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

type options struct {
	collector  string
	duration   time.Duration
	kills      int
	senders    int
	perRequest int
	pgURL      string
	redisAddr  string
	seed       uint64
	keep       bool
	drain      time.Duration

	scenarios      string
	outage         time.Duration // pg-outage: how long PostgreSQL is down
	outageLoad     time.Duration // pg-outage: load in the outage's first part
	directDrain    time.Duration // direct mode: the wait for rows after an outage
	shortDrain     time.Duration // Redis mode: the wait for the stream to drain
	redisKillAfter time.Duration // redis-*: load before the SIGKILL of Redis
	redisLoadAfter time.Duration // redis-*: load after Redis is back
	killOutageLoad time.Duration // collector-kill-outage: load while PostgreSQL is down
}

func main() {
	os.Exit(run())
}

func parseFlags() *options {
	o := &options{}
	defURL := os.Getenv("POSTGRESCOPY_TEST_URL")
	if defURL == "" {
		defURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	flag.StringVar(&o.collector, "collector", "_build/otelcol-postgrescopy", "path of the built collector")
	flag.DurationVar(&o.duration, "duration", 90*time.Second, "kill: how long the load runs")
	flag.IntVar(&o.kills, "kills", 5, "kill: SIGKILLs of the collector during the load")
	flag.IntVar(&o.senders, "senders", 4, "kill: concurrent OTLP gRPC senders")
	flag.IntVar(&o.perRequest, "spans-per-request", 50, "kill: spans in each export request")
	flag.StringVar(&o.pgURL, "pg", defURL, "PostgreSQL URL (the throwaway servers of pg-outage and collector-kill-outage aside)")
	flag.StringVar(&o.redisAddr, "redis", "127.0.0.1:6379", "kill: Redis host:port (the other scenarios start their own)")
	flag.Uint64Var(&o.seed, "seed", 0, "kill: seed of the kill schedule (0: from the clock, printed)")
	flag.BoolVar(&o.keep, "keep", false, "keep the schema and the temp dir with the collector log (the Redis keys are deleted regardless)")
	flag.DurationVar(&o.drain, "drain-timeout", 3*time.Minute, "kill: how long to wait for the stream to drain after the load")
	flag.StringVar(&o.scenarios, "scenarios", "all", "comma-separated scenarios to run: kill, redis-empty, redis-aof, pg-outage, collector-kill-outage, identical (or all)")
	flag.DurationVar(&o.outage, "outage", 320*time.Second, "pg-outage: how long PostgreSQL stays down (the Collector's default retry gives up after 300s)")
	flag.DurationVar(&o.directDrain, "outage-drain", 60*time.Second, "pg-outage, collector-kill-outage: how long to wait for the direct collector's rows once PostgreSQL is back")
	flag.DurationVar(&o.shortDrain, "redis-drain", 45*time.Second, "redis-empty, redis-aof, pg-outage, identical: how long to wait for a stream to drain")
	o.outageLoad, o.redisKillAfter, o.redisLoadAfter, o.killOutageLoad = 20*time.Second, 8*time.Second, 12*time.Second, 10*time.Second
	flag.Parse()
	return o
}

func run() int {
	o := parseFlags()
	if o.kills < 0 || o.senders < 1 || o.perRequest < 1 || o.duration <= 0 {
		fmt.Fprintln(os.Stderr, "soak: -kills must be >= 0, -senders and -spans-per-request >= 1, -duration > 0")
		return 2
	}
	if o.outage <= o.outageLoad {
		fmt.Fprintf(os.Stderr, "soak: -outage must be longer than the %s of load it starts with\n", o.outageLoad)
		return 2
	}
	selected, err := selectScenarios(o.scenarios)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: -scenarios: %v\n", err)
		return 2
	}
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	bin, err := filepath.Abs(o.collector)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: no collector at %s (run `make build`): %v\n", o.collector, err)
		return 2
	}
	o.collector = bin

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var rows []row
	for _, sc := range selected {
		begin := time.Now()
		fmt.Printf("\n== soak scenario %s\n", sc.name)
		got := sc.run(ctx, o)
		for _, r := range got {
			fmt.Printf("== %s/%s: %s (%s)\n", r.scenario, r.mode, r.verdict(), time.Since(begin).Round(time.Second))
		}
		rows = append(rows, got...)
		if ctx.Err() != nil {
			break
		}
	}
	printTable(os.Stdout, rows)
	code := 0
	for _, r := range rows {
		switch r.verdict() {
		case "fail":
			code = 1
		case "error":
			if code == 0 {
				code = 2
			}
		}
	}
	if code == 0 {
		fmt.Println("soak: PASS")
	} else {
		fmt.Println("soak: FAIL")
	}
	return code
}

// runKill is the crash soak: Redis mode under load, the collector SIGKILLed
// and restarted -kills times.
func runKill(ctx context.Context, o *options) []row {
	s := &soak{o: o, rng: mrand.New(mrand.NewPCG(o.seed, o.seed^0x9e3779b97f4a7c15))}
	code := s.run(ctx)
	s.cleanup()
	r := row{scenario: "kill", mode: "redis", reported: "-"}
	if s.res == nil {
		r.err = fmt.Errorf("the kill soak could not run (exit %d; see its output above)", code)
		return []row{r}
	}
	r.acked, r.missing = s.res.ackedSpans, s.res.missing
	r.stored = r.acked - r.missing
	r.duplicated = s.res.duplicated + s.res.failedDuplicated
	r.pass = s.res.ok()
	if s.res.unexpected > 0 {
		r.note("%d rows of spans never sent", s.res.unexpected)
	}
	return []row{r}
}

// soak is one run's state.
type soak struct {
	o      *options
	rng    *mrand.Rand
	tmp    string
	schema string
	prefix string
	pool   *pgxpool.Pool
	rdb    *redis.Client
	coll   *collector
	keys   coord.Keys
	rec    recovery // summed over the collector processes
	res    *result  // the verdict, once checked
}

// scrape adds the current process's recovery counters before it goes away.
func (s *soak) scrape() {
	r := s.coll.scrape()
	s.rec.claimed += r.claimed
	s.rec.ledgerHits += r.ledgerHits
}

// fail reports a harness error (not a verdict on the exporter) with the
// collector's log tail.
func (s *soak) fail(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "soak: "+format+"\n", args...)
	s.printLog()
	return 2
}

func (s *soak) printLog() {
	if s.coll == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "\ncollector log %s (last 50 lines; temp dir %s kept):\n%s\n", s.coll.logPath, s.tmp, tailLines(s.coll.logPath, 50))
	s.tmp = "" // keep it for the reader
}

func (s *soak) run(ctx context.Context) int {
	o := s.o
	var err error
	if s.tmp, err = os.MkdirTemp("", "postgrescopy-soak-"); err != nil {
		return s.fail("temp dir: %v", err)
	}
	// Names from crypto/rand, not the seed: a rerun with the same seed must
	// not collide with a kept schema.
	var b [6]byte
	_, _ = rand.Read(b[:])
	suffix := hex.EncodeToString(b[:])
	s.schema = "soak_" + suffix
	s.prefix = "soak-" + suffix
	s.keys = coord.KeysFor(s.prefix, "traces")

	if s.pool, err = pgxpool.New(ctx, o.pgURL); err == nil {
		err = s.pool.Ping(ctx)
	}
	if err != nil {
		return s.fail("PostgreSQL at %s: %v", o.pgURL, err)
	}
	// Created here so that cleanup owns it even when the collector never
	// starts; the exporter migrates the empty schema.
	if _, err := s.pool.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{s.schema}.Sanitize()); err != nil {
		return s.fail("create schema: %v", err)
	}
	s.rdb = redis.NewClient(&redis.Options{Addr: o.redisAddr})
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return s.fail("Redis at %s: %v", o.redisAddr, err)
	}

	ps, err := ports.Free(3)
	if err != nil {
		return s.fail("%v", err)
	}
	grpcAddr, healthAddr, metricsAddr := ports.Addr(ps[0]), ports.Addr(ps[1]), ports.Addr(ps[2])
	cfgPath := filepath.Join(s.tmp, "config.yaml")
	if err := writeConfig(cfgPath, collectorConfig(o, grpcAddr, healthAddr, metricsAddr, s.schema, s.prefix)); err != nil {
		return s.fail("write config: %v", err)
	}
	s.coll = &collector{bin: o.collector, cfgPath: cfgPath, logPath: filepath.Join(s.tmp, "collector.log"), health: healthAddr, metrics: metricsAddr}
	fmt.Printf("soak: seed %d, schema %s, redis prefix %s, %s of load from %d senders × %d spans/request, %d kills\n",
		o.seed, s.schema, s.prefix, o.duration, o.senders, o.perRequest, o.kills)
	if err := s.coll.start(ctx); err != nil {
		return s.fail("%v", err)
	}

	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	ld := &load{perRequest: o.perRequest, nonce: binary.BigEndian.Uint64(nonce[:])}
	begin := time.Now()
	waitLoad, err := ld.run(grpcAddr, o.senders)
	if err != nil {
		return s.fail("OTLP client: %v", err)
	}
	kills, killErr := s.chaos(ctx, begin)
	ld.stopped.Store(true)
	waitLoad()
	loadTime := time.Since(begin)
	if killErr != nil {
		return s.fail("%v", killErr)
	}
	fmt.Printf("soak: load stopped after %s; waiting for the stream to drain\n", loadTime.Round(time.Millisecond))

	rows, err := s.waitDrained(ctx)
	drained := time.Since(begin)
	if err != nil {
		return s.fail("%v", err)
	}
	s.scrape()
	termErr := s.coll.terminate()

	res, err := s.check(ctx, ld.log, ld.spans.Load())
	if err != nil {
		return s.fail("check: %v", err)
	}
	res.kills, res.elapsed, res.drainRows = kills, drained, rows
	res.errors, res.rec = ld.errors, s.rec
	s.res = res
	res.print(os.Stdout)
	if termErr != nil {
		// Reported, not a verdict: the counts above decide.
		fmt.Printf("soak: warning: the collector did not stop cleanly after SIGTERM: %v\n", termErr)
	}
	if !res.ok() {
		fmt.Println("soak: FAIL")
		s.printLog()
		return 1
	}
	fmt.Println("soak: PASS")
	return 0
}

// chaos kills and restarts the collector o.kills times during the load, one
// kill at a random moment in each equal slot of the duration, and returns
// when the duration is over.
func (s *soak) chaos(ctx context.Context, begin time.Time) (int, error) {
	o := s.o
	end := begin.Add(o.duration)
	kills := 0
	for i := range o.kills {
		slot := o.duration / time.Duration(o.kills)
		// Within the slot's first 80%, so the last restart happens under load.
		at := begin.Add(slot*time.Duration(i) + time.Duration(s.rng.Int64N(int64(slot*8/10)+1)))
		if err := s.sleepUntil(ctx, at); err != nil {
			return kills, err
		}
		s.scrape()
		s.coll.kill()
		kills++
		down := 200*time.Millisecond + time.Duration(s.rng.Int64N(int64(1300*time.Millisecond)))
		fmt.Printf("soak: %6.1fs  SIGKILL %d, down %s\n", time.Since(begin).Seconds(), kills, down.Round(time.Millisecond))
		if err := s.sleepUntil(ctx, time.Now().Add(down)); err != nil {
			return kills, err
		}
		if err := s.coll.start(ctx); err != nil {
			return kills, fmt.Errorf("restart %d: %w", kills, err)
		}
	}
	return kills, s.sleepUntil(ctx, end)
}

// sleepUntil waits for t, failing early on interruption or on a collector
// that exits by itself.
func (s *soak) sleepUntil(ctx context.Context, t time.Time) error {
	for {
		if err := s.coll.exitedEarly(); err != nil {
			return err
		}
		d := time.Until(t)
		if d <= 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(d, 250*time.Millisecond)):
		}
	}
}

// waitDrained waits until the traces stream is empty with nothing pending
// and the spans row count is the same on two polls in a row, and returns it.
// Rows commit before their entries are acknowledged, so an empty stream
// means every row is visible; the stable count double-checks that.
func (s *soak) waitDrained(ctx context.Context) (int64, error) {
	deadline := time.Now().Add(s.o.drain)
	last := int64(-1)
	var lastReport time.Time
	for time.Now().Before(deadline) {
		if err := s.coll.exitedEarly(); err != nil {
			return 0, err
		}
		xlen, pending, err := s.backlog(ctx)
		if err != nil {
			return 0, err
		}
		n, err := s.countSpans(ctx)
		if err != nil {
			return 0, err
		}
		if xlen == 0 && pending == 0 {
			if n == last {
				return n, nil
			}
			last = n
		} else {
			last = -1
			if time.Since(lastReport) >= 5*time.Second {
				lastReport = time.Now()
				fmt.Printf("soak: draining: %d entries in the stream, %d pending, %d rows\n", xlen, pending, n)
			}
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	xlen, pending, _ := s.backlog(ctx)
	return 0, fmt.Errorf("not drained after %s: %d entries in %s, %d pending", s.o.drain, xlen, s.keys.Stream, pending)
}

func (s *soak) backlog(ctx context.Context) (xlen, pending int64, err error) {
	if xlen, err = s.rdb.XLen(ctx, s.keys.Stream).Result(); err != nil {
		return 0, 0, fmt.Errorf("xlen %s: %w", s.keys.Stream, err)
	}
	p, err := s.rdb.XPending(ctx, s.keys.Stream, s.keys.Group).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, 0, fmt.Errorf("xpending %s: %w", s.keys.Stream, err)
	}
	if p != nil {
		pending = p.Count
	}
	return xlen, pending, nil
}

func (s *soak) spansTable() string { return pgx.Identifier{s.schema, "spans"}.Sanitize() }

func (s *soak) countSpans(ctx context.Context) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.spansTable()).Scan(&n)
	return n, err
}

// result is the verdict and the counts of the summary.
type result struct {
	requests, ackedRequests, failedRequests int
	ackedSpans, failedSpans                 int64
	rows, drainRows                         int64
	missing, duplicated                     int64 // acknowledged spans stored 0 or >1 times
	failedDuplicated                        int64 // failed-request spans stored >1 times
	failedPresent                           int64 // failed-request spans stored once (allowed)
	failedSplit                             int   // failed requests only partly stored
	unexpected                              int64 // rows whose span id was never sent, or NULL
	kills                                   int
	rec                                     recovery
	elapsed                                 time.Duration
	errors                                  map[string]int
	examples                                []string
}

func (r *result) ok() bool {
	return r.missing == 0 && r.duplicated == 0 && r.failedDuplicated == 0 && r.unexpected == 0
}

// check reads every stored span id once and holds them against the log.
// Span ids come from a counter, so the counts live in a slice indexed by it
// (a byte per span handed out) rather than in a map.
func (s *soak) check(ctx context.Context, log []request, handedOut uint64) (*result, error) {
	r := &result{}
	example := func(format string, args ...any) {
		if len(r.examples) < 10 {
			r.examples = append(r.examples, fmt.Sprintf(format, args...))
		}
	}
	seen, st, err := readSpanIDs(ctx, s.pool, s.spansTable(), handedOut, example)
	if err != nil {
		return nil, err
	}
	r.rows, r.unexpected = st.rows, st.unexpected
	for _, q := range log {
		r.requests++
		if q.acked {
			r.ackedRequests++
			r.ackedSpans += int64(q.n)
		} else {
			r.failedRequests++
			r.failedSpans += int64(q.n)
		}
		present := 0
		for k := q.first; k < q.first+uint64(q.n); k++ {
			n := seen[k]
			seen[k] = 0 // what is left at the end was handed out but never sent
			switch {
			case n > 1 && q.acked:
				r.duplicated += int64(n - 1)
				example("span %016x (acknowledged) stored %d times", spanID(k), n)
			case n > 1:
				r.failedDuplicated += int64(n - 1)
				example("span %016x (failed request) stored %d times", spanID(k), n)
			case n == 0 && q.acked:
				r.missing++
				example("span %016x (acknowledged) missing", spanID(k))
			}
			if n > 0 {
				present++
			}
		}
		if !q.acked && present > 0 {
			r.failedPresent += int64(present)
			if present != int(q.n) {
				r.failedSplit++
			}
		}
	}
	for k, n := range seen {
		if n > 0 {
			r.unexpected += int64(n)
			example("span %016x stored %d times but never sent", spanID(uint64(k)), n)
		}
	}
	return r, nil
}

func (r *result) print(w *os.File) {
	secs := r.elapsed.Seconds()
	fmt.Fprintf(w, "\nsoak summary\n")
	fmt.Fprintf(w, "  requests sent          %d (acknowledged %d, failed %d)\n", r.requests, r.ackedRequests, r.failedRequests)
	fmt.Fprintf(w, "  acknowledged spans     %d\n", r.ackedSpans)
	fmt.Fprintf(w, "  failed spans           %d (stored once: %d, allowed; requests stored in part: %d)\n", r.failedSpans, r.failedPresent, r.failedSplit)
	fmt.Fprintf(w, "  rows                   %d (at drain %d)\n", r.rows, r.drainRows)
	fmt.Fprintf(w, "  missing                %d\n", r.missing)
	fmt.Fprintf(w, "  duplicated             %d (of failed requests: %d)\n", r.duplicated, r.failedDuplicated)
	fmt.Fprintf(w, "  never sent             %d\n", r.unexpected)
	fmt.Fprintf(w, "  kills                  %d (entries claimed from killed consumers: %d, of which found committed in the ledger: %d)\n",
		r.kills, r.rec.claimed, r.rec.ledgerHits)
	fmt.Fprintf(w, "  elapsed                %s (load and drain)\n", r.elapsed.Round(time.Millisecond))
	if secs > 0 {
		fmt.Fprintf(w, "  rows/s                 %.0f\n", float64(r.rows)/secs)
	}
	if len(r.errors) > 0 {
		codes := make([]string, 0, len(r.errors))
		for c, n := range r.errors {
			codes = append(codes, fmt.Sprintf("%s %d", c, n))
		}
		sort.Strings(codes)
		fmt.Fprintf(w, "  failed calls by code   %s\n", strings.Join(codes, ", "))
	}
	for _, e := range r.examples {
		fmt.Fprintf(w, "  e.g. %s\n", e)
	}
}

// cleanup drops the schema (unless -keep), deletes the Redis keys, stops a
// collector still running and removes the temp dir (kept after a failure).
func (s *soak) cleanup() {
	if s.coll != nil {
		_ = s.coll.terminate()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s.rdb != nil && s.prefix != "" {
		var keys []string
		for _, sig := range []string{"traces", "metrics", "logs"} {
			k := coord.KeysFor(s.prefix, sig)
			keys = append(keys, k.Stream, k.Bytes)
		}
		if err := s.rdb.Del(ctx, keys...).Err(); err != nil {
			fmt.Fprintf(os.Stderr, "soak: delete Redis keys %s*: %v\n", s.prefix, err)
		}
		_ = s.rdb.Close()
	}
	if s.pool != nil {
		if s.o.keep {
			fmt.Printf("soak: schema %s and temp dir %s kept\n", s.schema, s.tmp)
			s.tmp = ""
		} else if _, err := s.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s.schema}.Sanitize()+" CASCADE"); err != nil {
			fmt.Fprintf(os.Stderr, "soak: drop schema %s: %v\n", s.schema, err)
		}
		s.pool.Close()
	}
	if s.tmp != "" {
		_ = os.RemoveAll(s.tmp)
	}
}
