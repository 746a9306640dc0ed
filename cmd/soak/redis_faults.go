package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// Redis faults the exporter must survive or report exactly: the stream key
// deleted while entries wait (reported with the exact count), an evicting
// maxmemory-policy (refused at start), Redis out of memory with noeviction
// (refused, retryable, named; nothing acknowledged lost), and a sentinel
// that does not know master_name (the collector runs, says why, and writes
// once the sentinel monitors the name).

// faultPerRequest is the spans per request of these scenarios: entries
// reported lost × faultPerRequest is the spans reported lost.
const faultPerRequest = 10

// metricSum sums a counter's series on the Prometheus page.
func metricSum(metrics, name string) int64 {
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(name) + `(?:_total)?(?:\{[^}]*\})? (\S+)$`)
	var n float64
	for _, line := range strings.Split(metrics, "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			v, _ := strconv.ParseFloat(m[1], 64)
			n += v
		}
	}
	return int64(n)
}

// faultEnv starts a throwaway PostgreSQL and a throwaway Redis with args.
func faultEnv(ctx context.Context, o *options, label string, args ...string) (*env, *pgServer, *redisserver.Server, func(), error) {
	pg, err := startPG(ctx)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("throwaway PostgreSQL: %w", err)
	}
	rs, err := redisserver.Start(ctx, redisserver.Options{Args: args})
	if err != nil {
		pg.remove()
		return nil, nil, nil, nil, err
	}
	e, err := newEnv(ctx, o, label, pg.url(), rs.Addr())
	cleanup := func() {
		if e != nil {
			e.close()
		}
		rs.Close()
		pg.remove()
	}
	if err != nil {
		cleanup()
		return nil, nil, nil, nil, err
	}
	return e, pg, rs, cleanup, nil
}

// runStreamDeleted: PostgreSQL stopped under load, so acknowledged entries
// wait in Redis; the stream key is deleted (its epoch marker stays); then
// PostgreSQL is back. What the stream held is lost, and the row passes only
// if the collector reported exactly that: one Error line, and lost_entries
// × spans per request = the spans missing.
func runStreamDeleted(ctx context.Context, o *options) []row {
	return []row{streamDeleted(ctx, o)}
}

func streamDeleted(ctx context.Context, o *options) (r row) {
	r = row{scenario: "redis-stream-deleted", mode: "redis"}
	e, pg, _, cleanup, err := faultEnv(ctx, o, "redis-stream-deleted/redis")
	if err != nil {
		r.err = err
		return r
	}
	defer cleanup()
	defer e.finish(&r)
	if err := e.startCollector(ctx, collectorSpec{signals: []string{"traces"}}); err != nil {
		r.err = err
		return r
	}
	ld := e.newLoad(faultPerRequest, 20*time.Millisecond)
	waitLoad, err := ld.run(e.grpcAddr, 2)
	if err != nil {
		r.err = fmt.Errorf("OTLP client: %w", err)
		return r
	}
	stopLoad := func() {
		if !ld.stopped.Swap(true) {
			waitLoad()
		}
	}
	defer stopLoad()
	steps := []func() error{
		func() error { return sleepCtx(ctx, 3*time.Second) },
		pg.stop,
		func() error { return sleepCtx(ctx, 5*time.Second) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			r.err = err
			return r
		}
	}
	keys := coord.KeysFor(e.prefix, "traces")
	held, _ := e.rdb.XLen(ctx, keys.Stream).Result()
	if err := e.rdb.Del(ctx, keys.Stream).Err(); err != nil {
		r.err = fmt.Errorf("delete %s: %w", keys.Stream, err)
		return r
	}
	e.logf("deleted %s holding %d entries, PostgreSQL down", keys.Stream, held)
	r.note("the stream held %d entries when deleted", held)
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		r.err = err
		return r
	}
	if err := pg.start(ctx); err != nil {
		r.err = err
		return r
	}
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		r.err = err
		return r
	}
	stopLoad()
	drained, err := e.waitDrained(ctx, "traces", "spans", o.shortDrain)
	if err != nil {
		r.err = err
		return r
	}
	// The maintenance loop reports within its 5 s tick.
	_ = sleepCtx(ctx, 6*time.Second)
	metrics := e.metricsText()
	t, err := e.tally(ctx, ld, nil)
	if err != nil {
		r.err = err
		return r
	}
	t.fill(&r)
	lostEntries := metricSum(metrics, "otelcol_postgrescopy_redis_lost_entries")
	lines := matchingLines(e.coll.logPath, "Redis lost entries of a stream")
	reported := lostEntries * faultPerRequest
	r.reported = fmt.Sprintf("%d", reported)
	r.pass = t.duplicated == 0 && t.unexpected == 0 && t.missing == reported && lines == 1 && drained
	r.note("reported: lost_entries %d (× %d spans = %d), %d Error lines; missing from PostgreSQL: %d spans",
		lostEntries, faultPerRequest, reported, lines, t.missing)
	if !drained {
		r.note("the stream did not drain within %s", o.shortDrain)
	}
	return r
}

// runEvictingPolicy: a Redis with maxmemory-policy allkeys-lru would evict
// streams of acknowledged requests; the collector must refuse to start,
// naming the policy. Nothing is acknowledged, so nothing can be lost.
func runEvictingPolicy(ctx context.Context, o *options) []row {
	r := row{scenario: "redis-evicting-policy", mode: "redis", reported: "-"}
	e, _, _, cleanup, err := faultEnv(ctx, o, "redis-evicting-policy/redis", "--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru")
	if err != nil {
		r.err = err
		return []row{r}
	}
	defer cleanup()
	defer e.finish(&r)
	err = e.startCollector(ctx, collectorSpec{signals: []string{"traces"}})
	named := matchingLines(e.coll.logPath, "maxmemory-policy allkeys-lru")
	r.reported = "refused"
	r.pass = err != nil && named > 0
	switch {
	case err == nil:
		r.note("the collector started on an allkeys-lru Redis: acknowledged requests would be evicted")
	case named == 0:
		r.note("the collector did not start, but its log does not name maxmemory-policy allkeys-lru: %v", err)
	default:
		r.note("refused at start: %s", firstLine(e.coll.logPath, "maxmemory-policy allkeys-lru"))
	}
	return []row{r}
}

// runRedisOOM: Redis with noeviction and little headroom while PostgreSQL
// is down: requests are refused once Redis is full (retryable, named as
// Redis out of memory, with no sending_queue hint), and every acknowledged
// span is stored once after PostgreSQL is back.
func runRedisOOM(ctx context.Context, o *options) []row {
	return []row{redisOOM(ctx, o)}
}

func redisOOM(ctx context.Context, o *options) (r row) {
	r = row{scenario: "redis-oom", mode: "redis"}
	e, pg, _, cleanup, err := faultEnv(ctx, o, "redis-oom/redis", "--maxmemory-policy", "noeviction")
	if err != nil {
		r.err = err
		return r
	}
	defer cleanup()
	defer e.finish(&r)
	if err := e.startCollector(ctx, collectorSpec{signals: []string{"traces"}}); err != nil {
		r.err = err
		return r
	}
	info, err := e.rdb.Info(ctx, "memory").Result()
	if err != nil {
		r.err = err
		return r
	}
	var used int64
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			used, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	limit := used + 4<<20
	if err := e.rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(limit, 10)).Err(); err != nil {
		r.err = err
		return r
	}
	ld := e.newLoad(faultPerRequest, 10*time.Millisecond)
	ld.timeout = 5 * time.Second
	waitLoad, err := ld.run(e.grpcAddr, 2)
	if err != nil {
		r.err = fmt.Errorf("OTLP client: %w", err)
		return r
	}
	stopLoad := func() {
		if !ld.stopped.Swap(true) {
			waitLoad()
		}
	}
	defer stopLoad()
	for _, step := range []func() error{
		func() error { return sleepCtx(ctx, 2*time.Second) },
		pg.stop,
		func() error { return sleepCtx(ctx, 20*time.Second) },
		func() error { return pg.start(ctx) },
		func() error { return sleepCtx(ctx, 5*time.Second) },
	} {
		if err := step(); err != nil {
			r.err = err
			return r
		}
	}
	stopLoad()
	drained, err := e.waitDrained(ctx, "traces", "spans", o.shortDrain)
	if err != nil {
		r.err = err
		return r
	}
	t, err := e.tally(ctx, ld, nil)
	if err != nil {
		r.err = err
		return r
	}
	t.fill(&r)
	named := matchingLines(e.coll.logPath, "Redis is out of memory (maxmemory "+strconv.FormatInt(limit, 10)+" bytes, policy noeviction)")
	hint := matchingLines(e.coll.logPath, "Try enabling sending_queue")
	r.reported = "-"
	r.pass = r.pass && drained && named > 0 && hint == 0
	r.note("refusals: %v; log lines naming the OOM with maxmemory %d: %d; with the sending_queue hint: %d", ld.errors, limit, named, hint)
	if named == 0 {
		r.note("Redis filled up (maxmemory %d) but no log line names it: %s", limit, firstLine(e.coll.logPath, "OOM"))
	}
	return r
}

// runSentinelUnknownMaster: the collector's master_name is one the sentinel
// does not monitor. It must start and stay up, say why, and once the
// sentinel monitors the name (SENTINEL MONITOR) write every acknowledged
// span once.
func runSentinelUnknownMaster(ctx context.Context, o *options) []row {
	return []row{sentinelUnknownMaster(ctx, o)}
}

func sentinelUnknownMaster(ctx context.Context, o *options) (r row) {
	r = row{scenario: "redis-sentinel-unknown-master", mode: "sentinel"}
	e, _, rs, cleanup, err := faultEnv(ctx, o, "redis-sentinel-unknown-master/sentinel")
	if err != nil {
		r.err = err
		return r
	}
	defer cleanup()
	defer e.finish(&r)
	sentinel, stopSentinel, err := startSentinel(ctx, e.tmp, rs.Addr(), "soak-monitored")
	if err != nil {
		r.err = err
		return r
	}
	defer stopSentinel()
	spec := collectorSpec{signals: []string{"traces"}, redis: map[string]any{
		"endpoint": nil,
		"sentinel": map[string]any{"master_name": "soak-typo", "endpoints": []string{sentinel}},
	}}
	if err := e.startCollector(ctx, spec); err != nil {
		r.err = err
		return r
	}
	ld := e.newLoad(faultPerRequest, 20*time.Millisecond)
	ld.timeout = 5 * time.Second
	waitLoad, err := ld.run(e.grpcAddr, 2)
	if err != nil {
		r.err = fmt.Errorf("OTLP client: %w", err)
		return r
	}
	stopLoad := func() {
		if !ld.stopped.Swap(true) {
			waitLoad()
		}
	}
	defer stopLoad()
	if err := sleepCtx(ctx, 10*time.Second); err != nil {
		r.err = err
		return r
	}
	if err := e.coll.exitedEarly(); err != nil {
		r.err = err
		r.note("the collector exited while the sentinel did not know master_name")
		return r
	}
	said := matchingLines(e.coll.logPath, `sentinel does not know master_name \"soak-typo\"`) +
		matchingLines(e.coll.logPath, `sentinel does not know master_name "soak-typo"`)
	host, port, _ := strings.Cut(rs.Addr(), ":")
	sc := redis.NewSentinelClient(&redis.Options{Addr: sentinel, MaxRetries: -1})
	defer sc.Close()
	if err := sc.Monitor(ctx, "soak-typo", host, port, "1").Err(); err != nil {
		r.err = fmt.Errorf("SENTINEL MONITOR: %w", err)
		return r
	}
	e.logf("the sentinel monitors soak-typo now; %d log lines said why nothing was written", said)
	if err := sleepCtx(ctx, 10*time.Second); err != nil {
		r.err = err
		return r
	}
	stopLoad()
	drained, err := e.waitDrained(ctx, "traces", "spans", o.shortDrain)
	if err != nil {
		r.err = err
		return r
	}
	t, err := e.tally(ctx, ld, nil)
	if err != nil {
		r.err = err
		return r
	}
	t.fill(&r)
	r.reported = "-"
	r.pass = r.pass && drained && said > 0 && t.acked > 0
	r.note("before SENTINEL MONITOR: %d log lines named the unknown master_name; refusals %v", said, ld.errors)
	if t.acked == 0 {
		r.note("nothing acknowledged after the sentinel monitored the name")
	}
	return r
}

// startSentinel starts one sentinel monitoring primary as name, in dir; it
// returns its address and a stop function.
func startSentinel(ctx context.Context, dir, primary, name string) (string, func(), error) {
	ss, err := redisserver.StartSentinels(ctx, 1, redisserver.SentinelOptions{Dir: dir, Master: name, Primary: primary})
	if err != nil {
		return "", nil, err
	}
	return ss[0].Addr(), ss[0].Close, nil
}

// firstLine is the first line of the file at path containing s, shortened.
func firstLine(path, s string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, s) {
			if len(line) > 300 {
				line = line[:300] + "…"
			}
			return line
		}
	}
	return ""
}
