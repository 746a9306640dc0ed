package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgbouncer"
)

// bench holds a run's settings and the resources it must clean up.
type bench struct {
	keepTmp   bool // -keep-tmp
	partsMu   sync.Mutex
	parts     map[string][]copyFile // intoPartitions' finds, by schema and file
	url       string
	psql      string
	collector string
	redisAddr string
	// redisHAPortBase is -redis-ha-ports; redisSection, when set, replaces
	// the redis section's endpoint for a run (a started deployment).
	redisHAPortBase int
	redisSection    map[string]any
	pool            *pgxpool.Pool // administration: DDL, counts, queries in the indexes part

	prefix  string   // of every schema this run creates
	schemas []string // created, dropped at the end
	tmp     string   // datasets, configs, logs

	events             int
	seed               uint64
	users              int
	readers            int
	queryRuns          int
	runs               int // of each timed write; the fastest is kept
	loadgenConcurrency int
	pregenerate        bool // collector runs: the loadgen receiver prepares its input before the clock
	collectorTimeout   time.Duration
	collectorStall     time.Duration  // a collector run fails after this long without a commit
	exporterExtra      map[string]any // -exporter-config: merged into every collector run's exporter section
	variantExporter    map[string]any // the running -variants strategy's exporter settings, merged after exporterExtra
	variantEnv         []string       // and its collector environment
	warmupUsers        int            // users a strategy's collector writes untimed first (-warmup-users)
	variantLoadgen     map[string]any // and its loadgen settings, merged after -loadgen-config
	loadgenExtra       map[string]any // merged into the loadgen receiver's section (the sustained part)
	live               *liveRun       // the collector run in progress
	sus                sustainedFlags
	databases          []string // created by the bench, dropped at the end
	bouncerPool        int

	bouncer       *pgbouncer.Server
	replica       bool            // mixed part: also run the readers on a streaming replica
	cluster       *replicaCluster // the mixed part's own primary and replica, when started
	bouncerErr    error
	collectorRuns int // names each run's config and log file
	// pprof is -pprof: the pprof extension's endpoint in every collector run.
	pprof       string
	progress    *progress
	rowcostKeys []string // rowcost part: variants to measure, all when empty
	// ceilingChunk is -ceiling-chunk-rows: the ceiling's \copy loads spans
	// in COPYs of at most that many rows (streamFiles).
	ceilingChunk int
}

func (b *bench) logf(format string, a ...any) { b.progress.message(fmt.Sprintf(format, a...)) }

// strategy is one write strategy of part 2.
type strategy struct {
	key  string
	app  *appStrategy // nil for the collector strategies
	name string
	// redis runs the collector with the exporter's redis section.
	redis bool
	// redisHA names the Redis deployment the bench starts for the run
	// (redisha.go); empty: the -redis server.
	redisHA string
	// collector and exporter, when set, replace the -collector binary and
	// are merged over the exporter section for this strategy's runs: the
	// -variants of postgrescopy + Redis (strategies.go).
	collector string
	exporter  map[string]any
	env       []string       // KEY=value added to the collector's environment
	loadgen   map[string]any // merged over the loadgen receiver's section
}

func (s strategy) displayName() string {
	if s.app != nil {
		return s.app.name
	}
	return s.name
}

func strategies() []strategy {
	return append([]strategy{
		{key: "insert-1", app: &appStrategy{name: "INSERT 1 row x 50 conns", conns: 50, batch: 1}},
		{key: "insert-500", app: &appStrategy{name: "INSERT 500 rows x 20 conns", conns: 20, batch: 500}},
		{key: "copy-5000", app: &appStrategy{name: "pgx CopyFrom 5000 x 4 conns, JSON pre-rendered", conns: 4, batch: 5000, copy: true}},
		{key: "copy-5000-maps", app: &appStrategy{name: "pgx CopyFrom 5000 x 4 conns, attributes as maps", conns: 4, batch: 5000, copy: true, maps: true}},
		// 20 client connections share -pgbouncer-pool server connections.
		{key: "pgbouncer", app: &appStrategy{name: "INSERT 500 x 20 via pgbouncer", conns: 20, batch: 500, viaPgbouncer: true}},
		{key: "postgrescopy", name: "postgrescopy direct"},
		// Direct mode acknowledges a request once its rows are committed, so
		// its rate is the requests in flight over a write's latency: with the
		// loadgen's 2 callers it measures that wait, with 16 (a collector in
		// front of many SDKs and agents) what the exporter writes.
		{key: "postgrescopy-16", name: "postgrescopy direct, 16 callers", loadgen: map[string]any{"concurrency": 16}},
		{key: "postgrescopy-redis", name: "postgrescopy + Redis", redis: true},
	}, redisHAStrategies()...)
}

var allParts = []string{"ceiling", "strategies", "mixed", "indexes"}

// extraParts run only when named: rowcost (what a row costs PostgreSQL under
// storage variants; docs/benchmarks.md), sustained (10M rows, ~15
// minutes, ~35 GB of disk), flushcost (what one flush of postgrescopy +
// Redis costs PostgreSQL, by statement, on a server of its own) and
// exporters (postgrescopy against the Collector's otlp and nop exporters).
var extraParts = []string{"rowcost", "sustained", "flushcost", "exporters"}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a positive user count", f)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseList(s string, valid []string, what string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if !slices.Contains(valid, f) {
			return nil, fmt.Errorf("unknown %s %q: choose from %s", what, f, strings.Join(valid, ","))
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func defaultURL() string {
	if u := os.Getenv("POSTGRESCOPY_TEST_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

func main() { os.Exit(run()) }

func run() int {
	began := time.Now()
	b := &bench{}
	var (
		partsFlag, scaleFlag, stratFlag, outDir, queriesDir, rowcostFlag string
		insertBudget                                                     time.Duration
	)
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&b.url, "db", defaultURL(), "PostgreSQL URL ($POSTGRESCOPY_TEST_URL when set)")
	fs.StringVar(&partsFlag, "parts", strings.Join(allParts, ","), "parts to run: ceiling,strategies,mixed,indexes (and rowcost, sustained, flushcost, exporters)")
	fs.StringVar(&rowcostFlag, "rowcost-variants", "", "rowcost part: the variants to measure (default all)")
	fs.StringVar(&scaleFlag, "scale", "10,50,100", "user counts for the ceiling and the write strategies")
	fs.IntVar(&b.users, "users", 10, "users for the mixed and indexes parts")
	fs.IntVar(&b.events, "events", 1900, "events (spans + data points + log records) per user")
	fs.Uint64Var(&b.seed, "seed", 1, "loadgen seed: the same seed writes the same rows")
	fs.StringVar(&stratFlag, "strategies", "insert-1,insert-500,copy-5000,copy-5000-maps,pgbouncer,postgrescopy,postgrescopy-16,postgrescopy-redis,postgrescopy-redis-replica,postgrescopy-redis-cluster", "write strategies to run")
	fs.DurationVar(&insertBudget, "insert-budget", 90*time.Second, "skip a larger scale of one-row INSERT when the previous scale's rate says it would take longer")
	fs.IntVar(&b.readers, "readers", 8, "reader connections in the mixed part")
	fs.BoolVar(&b.replica, "replica", true, "mixed part: run it on the bench's own primary (initdb) and also send the readers to a streaming replica of it (pg_basebackup); reported unavailable when that cannot be set up")
	fs.IntVar(&b.queryRuns, "query-runs", 5, "timed runs per query in the indexes part (median reported)")
	fs.IntVar(&b.ceilingChunk, "ceiling-chunk-rows", 3000, "the ceiling's \\copy and the rowcost part load the spans in COPYs of at most this many rows, the exporter's flush size (redis max_rows): the AI spend capture reads each COPY's spans back as one transition table; 0 loads whole files")
	fs.IntVar(&b.runs, "runs", 3, "runs of every timed write, interleaved; the fastest is kept (a shared machine is noisy)")
	fs.IntVar(&b.loadgenConcurrency, "loadgen-concurrency", 2, "loadgen receiver concurrency in the collector runs")
	fs.IntVar(&b.warmupUsers, "warmup-users", 100, "write strategies: each collector run first writes as many users as it times, at most this many, of the next seed, untimed: the clock then runs on a collector that has written such a burst, as a running one has, not on a new process's first touch of its memory and its connections' first rows; 0 times the new process")
	fs.BoolVar(&b.pregenerate, "pregenerate", false, "collector runs: the loadgen receiver builds every batch in memory before the clock starts (about 2.5 KB of collector memory per item: 4.9 GB at 1,000 users); by default it generates while timed")
	fs.DurationVar(&b.collectorTimeout, "collector-timeout", 0, "give up on a collector run after this long (0: 2 minutes + 1s per 5,000 rows)")
	fs.DurationVar(&b.collectorStall, "collector-stall", 60*time.Second, "fail a collector run, saying what it lost, when no batch commits for this long")
	var exporterExtra, loadgenExtra, variantsFlag string
	fs.StringVar(&variantsFlag, "variants", "", `JSON object of extra postgrescopy + Redis runs, by label, each with "collector" (another built binary), "exporter" (merged over the exporter section), "loadgen" (merged over the loadgen receiver's section, e.g. {"concurrency":2}), "env" (the collector's environment) and/or "direct": true (without Redis), e.g. '{"workers1":{"exporter":{"redis":{"workers":1}}}}'`)
	fs.StringVar(&loadgenExtra, "loadgen-config", "", `JSON object merged into the loadgen receiver's section of every collector run, e.g. '{"retry_on_failure":{"enabled":false}}'`)
	fs.StringVar(&exporterExtra, "exporter-config", "", `JSON object merged into the exporter section of every collector run, e.g. '{"sending_queue":{"block_on_overflow":false}}'`)
	fs.Int64Var(&b.sus.rows, "sustained-rows", 10_000_000, "sustained part: rows to write (rounded up to whole users)")
	fs.DurationVar(&b.sus.duration, "sustained-duration", 15*time.Minute, "sustained part: the rows must be in within this long (the run stops and fails after it)")
	fs.DurationVar(&b.sus.interval, "sustained-interval", time.Minute, "sustained part: how often every figure and every query is sampled")
	fs.Float64Var(&b.sus.rate, "sustained-rate", 0, "sustained part: loadgen items per second (0: as fast as the exporter's backpressure lets it)")
	fs.BoolVar(&b.sus.noCapture, "sustained-no-ai-capture", false, "sustained part: drop the AI spend capture trigger (schema 5 on) of spans_rows before the collector starts, to measure what it costs ingest (the AI spend queries then read the raw calls)")
	fs.BoolVar(&b.sus.prices, "sustained-prices", true, "sustained part: give the exporter a price file (pricing: {file: ...}) of the loadgen's models at its list prices, so the token cost query is measured priced; false leaves the price catalog empty")
	fs.BoolVar(&b.keepTmp, "keep-tmp", false, "keep the bench's temporary directory (each collector run's config and log, with its per-write debug lines) and print its path")
	fs.BoolVar(&b.sus.keep, "sustained-keep", false, "sustained part: keep its database (and its own server, running) afterwards, to study the grown tables; both are logged")
	var susServer string
	fs.StringVar(&susServer, "sustained-server", "own", "sustained part: own (a server the bench starts with initdb, settings of a production server for the load, in the report) or db (the -db server as it is)")
	fs.IntVar(&b.sus.queryRuns, "sustained-query-runs", 100, "sustained part: the most runs of each query per round (a cheap query's p95 needs many; a dear one stops at -sustained-query-budget)")
	fs.DurationVar(&b.sus.queryBudget, "sustained-query-budget", 5*time.Second, "sustained part: no further run of a query in a round once its runs took this long")
	fs.DurationVar(&b.sus.queryTimeout, "sustained-query-timeout", 10*time.Second, "sustained part: statement_timeout of the readers' queries")
	fs.IntVar(&b.bouncerPool, "pgbouncer-pool", 10, "pgbouncer server connections (default_pool_size) for the 20 client connections")
	fs.StringVar(&b.pprof, "pprof", "", "collector runs: serve Go profiles on this address (the pprof extension, e.g. 127.0.0.1:1777) to profile a run while it writes")
	fs.StringVar(&b.collector, "collector", "_build/otelcol-postgrescopy", "the built distribution (make build)")
	fs.StringVar(&b.redisAddr, "redis", "127.0.0.1:6379", "Redis for the postgrescopy + Redis strategy")
	fs.IntVar(&b.redisHAPortBase, "redis-ha-ports", 16400, "first of the loopback ports the Redis Cluster strategy starts its redis-servers on (and port + 10000, a cluster node's bus); the replica strategy's are free ones")
	fs.StringVar(&b.psql, "psql", "psql", "psql binary for the \\copy ceiling")
	fs.StringVar(&queriesDir, "queries", "queries", "directory of the analytical queries")
	fs.StringVar(&outDir, "out", "bench/results", "where to write <timestamp>.{md,json,png} and latest.*")
	var layout string
	fs.StringVar(&layout, "layout", "shared", "shared (every process on every core, -db's server) or split (the bench's own PostgreSQL on core 0, the client side and its own Redis on core 1)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	parts, err := parseList(partsFlag, append(slices.Clone(allParts), extraParts...), "part")
	if err == nil && len(parts) == 0 {
		err = errors.New("no part selected")
	}
	var scale []int
	if err == nil {
		scale, err = parseInts(scaleFlag)
	}
	all := strategies()
	keys := make([]string, len(all))
	for i, s := range all {
		keys[i] = s.key
	}
	var chosen []string
	if err == nil {
		chosen, err = parseList(stratFlag, keys, "strategy")
	}
	if err == nil && (b.users < 1 || b.events < 1 || b.readers < 1 || b.queryRuns < 1 || b.runs < 1 || b.loadgenConcurrency < 1 || b.bouncerPool < 1) {
		err = errors.New("-users, -events, -readers, -query-runs, -runs, -loadgen-concurrency and -pgbouncer-pool must be positive")
	}
	if err == nil && loadgenExtra != "" {
		if err = json.Unmarshal([]byte(loadgenExtra), &b.loadgenExtra); err != nil {
			err = fmt.Errorf("-loadgen-config: %w", err)
		}
	}
	if err == nil && exporterExtra != "" {
		if err = json.Unmarshal([]byte(exporterExtra), &b.exporterExtra); err != nil {
			err = fmt.Errorf("-exporter-config: %w", err)
		}
	}
	if err == nil && (b.sus.rows < 1 || b.sus.duration <= 0 || b.sus.interval <= 0 || b.sus.rate < 0 || b.sus.queryRuns < 1 || b.sus.queryBudget <= 0 || b.sus.queryTimeout <= 0) {
		err = errors.New("-sustained-rows, -sustained-duration, -sustained-interval and -sustained-query-runs must be positive, -sustained-rate 0 or more")
	}
	if err == nil && susServer != "own" && susServer != "db" {
		err = errors.New("-sustained-server must be own or db")
	}
	b.sus.given = susServer == "db"
	if err == nil && layout != "shared" && layout != "split" {
		err = errors.New("-layout must be shared or split")
	}
	if err == nil && b.collectorStall <= 0 {
		err = errors.New("-collector-stall must be positive")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if abs, err := filepath.Abs(b.collector); err == nil {
		b.collector = abs
	}
	has := func(p string) bool { return slices.Contains(parts, p) }
	// Every part but the strategies loads data with psql \copy.
	if p, err := exec.LookPath(b.psql); err == nil {
		b.psql = p
	} else if has("ceiling") || has("mixed") || has("indexes") {
		fmt.Fprintf(os.Stderr, "bench: psql not found (%v); install postgresql-client\n", err)
		return 1
	}
	var picked []strategy
	for _, s := range all {
		if slices.Contains(chosen, s.key) {
			picked = append(picked, s)
		}
	}
	variants, err := parseVariants(variantsFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -variants:", err)
		return 2
	}
	picked = append(picked, variants...)

	// Steps for the progress bar.
	total := 0
	if has("ceiling") {
		total += b.runs * len(scale) * 4
	}
	if has("strategies") {
		total += b.runs * len(scale) * len(picked)
	}
	if has("mixed") {
		total += 2 * b.runs
		if b.replica {
			total += b.runs + 1 // the readers on the replica, and the set-up
		}
	}
	if has("indexes") {
		total += b.runs + 1
	}
	if has("sustained") {
		total += 3
	}
	if has("rowcost") {
		total += b.runs * len(rowcostVariants())
	}
	if has("flushcost") {
		total += 1 + len(scale)*(1+len(variants))
	}
	if has("exporters") {
		total += b.runs * len(scale) * len(exporterKinds)
	}
	b.rowcostKeys = strings.FieldsFunc(rowcostFlag, func(r rune) bool { return r == ',' })
	b.progress = newProgress(total)
	defer b.progress.finish()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := b.open(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer b.close()

	rep := &report{Machine: b.machine(ctx), Workload: workload{Scale: scale, Users: b.users,
		EventsPerUser: b.events, Seed: b.seed, Parts: parts, CeilingChunkRows: b.ceilingChunk}}
	if layout == "split" {
		split, err := b.setupSplit(ctx, rep)
		defer split.stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench: -layout split:", err)
			return 1
		}
	}
	if !has("ceiling") && !has("strategies") && !has("flushcost") && !has("exporters") {
		rep.Workload.Scale = nil
	}
	// Check the queries before spending minutes on data.
	if _, err := loadQueries(queriesDir, "x"); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	qsFor := func(s string) ([]query, error) { return loadQueries(queriesDir, s) }

	if err := b.runAll(ctx, rep, parts, scale, picked, insertBudget, qsFor, queriesDir); err != nil {
		b.progress.finish()
		fmt.Fprintln(os.Stderr, "bench:", err)
		if ctx.Err() != nil {
			return 130
		}
		return 1
	}
	b.progress.finish()
	rep.TotalSeconds = time.Since(began).Seconds()
	rep.Machine.LoadEnd = loadAverage()
	stamp := time.Now().UTC().Format("20060102-150405")
	fmt.Print(rep.markdown())
	files, err := rep.write(outDir, stamp)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: write results:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "bench: wrote %s (and latest.*)\n", strings.Join(files, ", "))
	return guard(os.Stderr, rep.Targets)
}

// guard prints the Targets section last, where a make bench user reads it,
// and fails the run (exit status 3) on a regression.
func guard(w io.Writer, ts []target) int {
	if len(ts) == 0 {
		return 0
	}
	fmt.Fprint(w, "\n"+targetsMarkdown(ts))
	bad := regressions(ts)
	for _, r := range bad {
		fmt.Fprintln(w, "bench: target missed:", r)
	}
	if len(bad) > 0 {
		return 3
	}
	return 0
}

// open connects and makes the working directory.
func (b *bench) open(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(b.url)
	if err != nil {
		return fmt.Errorf("-db: %w", err)
	}
	cfg.MaxConns = 4
	b.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := b.pool.Ping(pctx); err != nil {
		b.pool.Close()
		return fmt.Errorf("PostgreSQL does not answer at -db (run `make services`): %w", err)
	}
	var r [4]byte
	_, _ = rand.Read(r[:])
	b.prefix = "pgcb_" + hex.EncodeToString(r[:])
	if b.tmp, err = os.MkdirTemp("", "postgrescopy-bench-"); err != nil {
		return err
	}
	// pgbouncer runs as the postgres user and must reach its files here.
	return os.Chmod(b.tmp, 0o755)
}

// close stops what the bench started and drops what it created.
func (b *bench) close() {
	b.bouncer.Stop()
	b.cluster.stop()
	b.dropSchemas()
	b.dropDatabases()
	b.pool.Close()
	if b.tmp != "" && b.keepTmp {
		b.logf("kept the temporary directory %s (-keep-tmp)", b.tmp)
	} else if b.tmp != "" {
		_ = os.RemoveAll(b.tmp)
	}
}

func (b *bench) runAll(ctx context.Context, rep *report, parts []string, scale []int, picked []strategy, insertBudget time.Duration, qsFor func(string) ([]query, error), queriesDir string) error {
	has := func(p string) bool { return slices.Contains(parts, p) }
	datasets := map[int]*dataset{}
	getDataset := func(users int) (*dataset, error) {
		if ds, ok := datasets[users]; ok {
			return ds, nil
		}
		dir := filepath.Join(b.tmp, "users-"+strconv.Itoa(users))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		ds, err := buildDataset(dir, users, b.events, b.seed)
		if err != nil {
			return nil, err
		}
		datasets[users] = ds
		rate := float64(ds.totalRows()) / ds.encode.Seconds()
		// The fastest dataset is the least disturbed by the rest of the machine.
		rep.Workload.EncodeRowsPerS = max(rep.Workload.EncodeRowsPerS, rate)
		rep.Workload.AvgRowBytes = float64(ds.totalBytes()) / float64(ds.totalRows())
		b.logf("dataset %d users: %d rows, %.1f MB binary COPY, generated and encoded in %.1fs (%.0f rows/s)",
			users, ds.totalRows(), float64(ds.totalBytes())/1e6, ds.encode.Seconds(), rate)
		return ds, nil
	}
	dropDataset := func(users int) {
		if ds, ok := datasets[users]; ok && users != b.users {
			_ = os.RemoveAll(filepath.Dir(firstFile(ds)))
			delete(datasets, users)
		}
	}

	if has("ceiling") || has("strategies") {
		logged, err := b.newSchema(ctx, "writes")
		if err != nil {
			return err
		}
		unlogged := ""
		if has("ceiling") {
			if unlogged, err = b.newSchema(ctx, "unlogged"); err != nil {
				return err
			}
			if err := b.setUnlogged(ctx, unlogged); err != nil {
				return err
			}
		}
		var insertRate float64 // one-row INSERT at the previous scale
		for _, users := range scale {
			ds, err := getDataset(users)
			if err != nil {
				return err
			}
			var ms []measure
			if has("ceiling") {
				ms = append(ms, b.ceilingMeasures(ctx, ds, logged, unlogged)...)
			}
			if has("strategies") {
				for _, s := range picked {
					ms = append(ms, measure{key: s.key, name: s.displayName(), run: func() result {
						return b.runStrategy(ctx, s, ds, logged, insertRate, insertBudget)
					}})
				}
			}
			best := b.repeat(ctx, ms, users)
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ceiling result
			for _, r := range best {
				if r.Kind == "ceiling" && r.Status == "ok" && r.RowsPerS > ceiling.RowsPerS {
					ceiling = r
				}
			}
			for i, r := range best {
				if ceiling.RowsPerS > 0 && r.Status == "ok" {
					r.RatioToCeiling = r.RowsPerS / ceiling.RowsPerS
				}
				switch r.Kind {
				case "ceiling", "reference":
					rep.Ceiling = append(rep.Ceiling, r)
				default:
					if ms[i].key == "insert-1" && r.Status == "ok" {
						insertRate = r.RowsPerS
					}
					r.Key = ms[i].key
					if r.Status == "skipped" {
						rep.Notes = append(rep.Notes, fmt.Sprintf("%s at %d users: %s", r.Name, users, r.Note))
					}
					rep.Strategies = append(rep.Strategies, r)
				}
			}
			dropDataset(users)
		}
	}
	if has("mixed") {
		ds, err := getDataset(b.users)
		if err != nil {
			return err
		}
		m, err := b.runMixed(ctx, ds, qsFor)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			m.Status, m.Note = "failed", err.Error()
			if errors.Is(err, errUnavailable) {
				m.Status = "unavailable"
			}
			b.logf("mixed: %v", err)
		}
		rep.Mixed = &m
	}
	if has("indexes") {
		ds, err := getDataset(b.users)
		if err != nil {
			return err
		}
		ix, err := b.runIndexes(ctx, ds, qsFor)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			ix.Status = "failed: " + err.Error()
			b.logf("indexes: %v", err)
		}
		rep.Indexes = &ix
	}
	if has("sustained") {
		sr := b.runSustained(ctx, queriesDir)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rep.Sustained = &sr
	}
	if has("rowcost") {
		ds, err := getDataset(b.users)
		if err != nil {
			return err
		}
		rc, err := b.runRowcost(ctx, ds, b.rowcostKeys)
		if err != nil {
			return fmt.Errorf("rowcost: %w", err)
		}
		rep.RowCost = rc
	}
	if has("flushcost") {
		fc, err := b.runFlushCost(ctx, scale, picked, getDataset, dropDataset)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			rep.Notes = append(rep.Notes, "flushcost: "+err.Error())
			b.logf("flushcost: %v", err)
		}
		rep.FlushCost = fc
	}
	if has("exporters") {
		rs, err := b.runExporters(ctx, scale)
		if err != nil {
			return fmt.Errorf("exporters: %w", err)
		}
		rep.Exporters = rs
	}
	rep.Targets = targets(rep.Strategies, rep.Ceiling)
	rep.Notes = append(rep.Notes, b.standingNotes(rep)...)
	return nil
}

// measure is one timed thing the bench repeats: a ceiling run or a strategy.
type measure struct {
	key  string // the strategy's -strategies key; empty for the ceiling
	name string
	run  func() result
}

// repeat runs every measure b.runs times, interleaved so that a burst of
// load from elsewhere on the machine hits different measures, and keeps each
// one's fastest run, with every run's rows/s. A measure that does not
// succeed is not retried.
func (b *bench) repeat(ctx context.Context, ms []measure, users int) []result {
	best := make([]result, len(ms))
	runs := make([][]float64, len(ms))
	done := func() []result {
		for i := range best {
			best[i].Runs = runs[i]
		}
		return best
	}
	for run := range b.runs {
		for i, m := range ms {
			runs[i] = append(runs[i], 0)
			if ctx.Err() != nil {
				return done()
			}
			if run > 0 && best[i].Status != "ok" {
				continue
			}
			b.progress.step(fmt.Sprintf("%s @ %d users, run %d/%d", m.name, users, run+1, b.runs))
			r := m.run()
			if r.Status == "ok" {
				runs[i][run] = r.RowsPerS
			}
			switch {
			case run == 0:
				best[i] = r
			case r.Status != "ok":
				b.logf("%s @ %d users, run %d: %s: %s", m.name, users, run+1, r.Status, r.Note)
			case r.Seconds < best[i].Seconds:
				best[i] = r
			}
		}
	}
	return done()
}

func firstFile(ds *dataset) string {
	for h := range halves {
		for _, f := range ds.files[h] {
			if f != "" {
				return f
			}
		}
	}
	return ""
}

// runStrategy runs one strategy at one scale; failures become the result's
// status so that one broken strategy does not sink the whole bench.
func (b *bench) runStrategy(ctx context.Context, s strategy, ds *dataset, schemaName string, insertRate float64, budget time.Duration) result {
	name := s.displayName()
	r := result{Name: name, Kind: "strategy", Users: ds.users, Rows: ds.totalRows(), Bytes: ds.totalBytes()}
	if s.key == "insert-1" && insertRate > 0 {
		if est := time.Duration(float64(ds.totalRows()) / insertRate * float64(time.Second)); est > budget {
			r.Status = "skipped"
			r.Note = fmt.Sprintf("would take about %s at the %.0f rows/s of the previous scale, over the -insert-budget of %s", est.Round(time.Second), insertRate, budget)
			return r
		}
	}
	if s.app != nil {
		// Bounded like a collector run: a stalled strategy fails its row.
		limit := b.collectorTimeout
		if limit == 0 {
			limit = collectorTimeout(ds.totalRows())
		}
		actx, cancel := context.WithTimeout(ctx, limit)
		d, cpu, err := b.runApp(actx, *s.app, ds, schemaName)
		cancel()
		if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
			n, _ := countRows(ctx, b.pool, schemaName)
			err = &errLost{lost: ds.totalRows() - n, msg: fmt.Sprintf("lost %d rows: %d of %d written within %s", ds.totalRows()-n, n, ds.totalRows(), limit.Round(time.Second))}
		}
		if err != nil {
			r.Status, r.Note = "failed", err.Error()
			var l *errLost
			if errors.As(err, &l) {
				r.LostRows = l.lost
			}
			if s.app.viaPgbouncer && b.bouncerErr != nil {
				r.Status = "unavailable"
			}
			b.logf("%s @ %d users: %v", name, ds.users, err)
			return r
		}
		out := newResult(name, ds, d)
		out.CPU = cpu
		return out
	}
	if err := b.reset(ctx, schemaName); err != nil {
		r.Status, r.Note = "failed", err.Error()
		return r
	}
	prefix := ""
	if s.redisHA != "" {
		d, err := b.startRedisHA(ctx, s.redisHA)
		if err != nil {
			r.Status, r.Note = "failed", err.Error()
			if errors.Is(err, errUnavailable) {
				r.Status = "unavailable"
			}
			return r
		}
		defer d.stop()
		b.redisSection = d.section
		defer func() { b.redisSection = nil }()
		prefix = b.prefix + "-" + strconv.Itoa(ds.users)
	} else if s.redis {
		if err := b.redisReachable(ctx); err != nil {
			r.Status, r.Note = "unavailable", fmt.Sprintf("Redis at %s does not answer: %v", b.redisAddr, err)
			return r
		}
		prefix = b.prefix + "-" + strconv.Itoa(ds.users)
		defer b.dropRedisKeys(prefix)
	}
	if s.collector != "" {
		defer func(c string) { b.collector = c }(b.collector)
		b.collector = s.collector
	}
	b.variantExporter, b.variantEnv, b.variantLoadgen = s.exporter, s.env, s.loadgen
	defer func() { b.variantExporter, b.variantEnv, b.variantLoadgen = nil, nil, nil }()
	warmup := b.warmupUsers
	if v, ok := s.loadgen["warmup_users"].(float64); ok {
		warmup = int(v) // a variant's own, e.g. 0 to time a new process
	}
	run, err := b.runCollector(ctx, schemaName, 0, ds.users, b.seed, prefix, min(warmup, ds.users), nil)
	if err != nil {
		r.Status, r.Note = "failed", err.Error()
		var l *errLost
		if errors.As(err, &l) {
			r.LostRows = l.lost
			r.Retries, r.Dropped = run.gen.Retries, run.gen.Dropped
		} else if errors.Is(err, errUnavailable) {
			r.Status = "unavailable"
		}
		b.logf("%s @ %d users: %v", name, ds.users, err)
		return r
	}
	out := collectorResult(name, ds.users, ds.totalRows(), ds.totalBytes(), run)
	if l := commitLatency(run.commitAges); l != "" {
		out.Note += "; " + l
	}
	if s.redis && s.redisHA == "" {
		if n := b.redisKeys(prefix); n == 0 {
			out.Note += "; no Redis key was created under the run's key_prefix: the collector wrote directly"
		}
	}
	return out
}

// standingNotes explain how to read the numbers of this run.
func (b *bench) standingNotes(rep *report) []string {
	var notes []string
	if len(rep.Strategies) == 0 && rep.Mixed == nil {
		return nil
	}
	if rep.Workload.EncodeRowsPerS > 0 {
		cpu := "The collector runs pay that CPU on the same %d cores as PostgreSQL; the other strategies write rows prepared before the clock starts."
		if b.pregenerate {
			cpu = "With -pregenerate the collector's input is prepared in memory before the clock starts, like the other strategies' rows (as if it came from other hosts); the collector runs pay only the encoding on the same %d cores as PostgreSQL."
		}
		notes = append(notes, fmt.Sprintf("Generating the workload and encoding it with the exporter's row encoder ran at up to %s rows/s on one core here, without PostgreSQL. "+cpu,
			num(rep.Workload.EncodeRowsPerS), rep.Machine.Cores))
	}
	timing := "Collector runs are timed from the loadgen receiver's first batch (every exporter is started by then) to the commit of the last row (the exporter logs each committed batch; the rows are counted in PostgreSQL afterwards); the collector's start-up is shown in the notes, not counted."
	if b.pregenerate {
		timing = "Collector runs are timed from the loadgen receiver's first batch (every exporter is started and every batch prepared in memory by then, -pregenerate) to the commit of the last row (the exporter logs each committed batch; the rows are counted in PostgreSQL afterwards); the collector's start-up, preparation included, is shown in the notes, not counted."
	}
	notes = append(notes, timing)
	if len(rep.Strategies) > 0 {
		notes = append(notes,
			fmt.Sprintf("pgbouncer runs in transaction mode; the strategy's 20 client connections share %d server connections (-pgbouncer-pool).", b.bouncerPool),
			"Application strategies are timed from the first batch to the last commit on connections opened beforehand; INSERTs use pgx's unnamed statements with cached descriptions (binary parameters, one round trip), which also works through pgbouncer's transaction mode.")
	}
	return notes
}

// redisKeys counts the keys naming prefix (-1 when Redis cannot be asked).
func (b *bench) redisKeys(prefix string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n := 0
	c := newRedisClient(b.redisAddr)
	defer c.Close()
	it := c.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	for it.Next(ctx) {
		n++
	}
	if it.Err() != nil {
		return -1
	}
	return n
}
