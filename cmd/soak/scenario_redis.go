package main

import (
	"context"
	"fmt"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
)

// runRedisEmpty: Redis without persistence is SIGKILLed under load and
// restarted empty. The collector must recover by itself and store every
// span acknowledged after the restart; what was acknowledged before and
// still in Redis is lost, which the README says this setup risks — the row
// counts that loss and passes only if the collector reported it.
func runRedisEmpty(ctx context.Context, o *options) []row {
	return []row{redisKill(ctx, o, "redis-empty", false)}
}

// runRedisAOF: the same kill with appendonly yes, appendfsync always;
// Redis restarts from its AOF and nothing may be lost or doubled.
func runRedisAOF(ctx context.Context, o *options) []row {
	return []row{redisKill(ctx, o, "redis-aof", true)}
}

// r is named so that the deferred finish can add its note.
func redisKill(ctx context.Context, o *options, name string, aof bool) (r row) {
	r = row{scenario: name, mode: "redis"}
	var persistence []string // none
	if aof {
		persistence = []string{"--appendonly", "yes", "--appendfsync", "always"}
	}
	rs, err := redisserver.Start(ctx, redisserver.Options{Args: persistence})
	if err != nil {
		r.err = err
		return r
	}
	defer rs.Close()
	e, err := newEnv(ctx, o, name+"/redis", o.pgURL, rs.Addr())
	if err != nil {
		r.err = err
		return r
	}
	defer e.close()
	defer e.finish(&r)
	// One flush worker: while it writes, entries wait in the stream unread,
	// which is what a restart without persistence loses (an entry a worker
	// has read is written from its memory all the same).
	spec := collectorSpec{signals: []string{"traces"}, redis: map[string]any{"workers": 1}}
	if err := e.startCollector(ctx, spec); err != nil {
		r.err = err
		return r
	}

	ld := e.newLoad(50, 20*time.Millisecond)
	waitLoad, err := ld.run(e.grpcAddr, 2)
	if err != nil {
		r.err = fmt.Errorf("OTLP client: %w", err)
		return r
	}
	stopLoad := func() { ld.stopped.Store(true); waitLoad() }
	e.logf("load running; SIGKILL of Redis (%s) in %s", map[bool]string{true: "AOF, fsync always", false: "no persistence"}[aof], o.redisKillAfter)
	if err := sleepCtx(ctx, o.redisKillAfter); err != nil {
		stopLoad()
		r.err = err
		return r
	}
	keys := coord.KeysFor(e.prefix, "traces")
	// Kill while the stream holds entries no worker has read yet, so that
	// redis-empty has a loss to report: wait for a moment there are some.
	var xlen, pending int64
	for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); {
		if xlen, pending, _ = e.backlog(ctx, keys); xlen > pending {
			break
		}
		time.Sleep(time.Millisecond)
	}
	rs.Kill()
	killedAt := time.Now()
	_ = sleepCtx(ctx, time.Second)
	// Acknowledged before the new server exists: written to the old one,
	// the most a restart without persistence may lose.
	restarting := time.Now()
	if err := rs.Restart(ctx); err != nil {
		stopLoad()
		r.err = fmt.Errorf("restart Redis: %w", err)
		return r
	}
	restartedAt := time.Now()
	after, _ := e.rdb.XLen(ctx, keys.Stream).Result()
	e.logf("Redis SIGKILLed with %d entries in the stream (%d pending), back after %s with %d",
		xlen, pending, restartedAt.Sub(killedAt).Round(time.Millisecond), after)
	r.note("at the kill: %d stream entries, %d pending; after the restart: %d entries", xlen, pending, after)
	err = sleepCtx(ctx, o.redisLoadAfter)
	stopLoad()
	if err != nil {
		r.err = err
		return r
	}
	drained, err := e.waitDrained(ctx, "traces", "spans", o.shortDrain)
	if err != nil {
		r.err = err
		return r
	}
	metrics := e.metricsText()
	t, err := e.tally(ctx, ld, func(q request) bool { return !aof && q.done.Before(restarting) })
	if err != nil {
		r.err = err
		return r
	}
	t.fill(&r)
	if !drained {
		r.note("the stream did not drain within %s", o.shortDrain)
	}
	if n := matchingLines(e.coll.logPath, "NOGROUP"); n > 0 {
		r.note("%d collector log lines mention NOGROUP", n)
	}
	if aof {
		return r
	}
	// Allowed: spans acknowledged before Redis came back, if reported.
	lostAfter := t.missing - t.missingAtRisk
	evidence := lossReport(e.coll.logPath, metrics)
	r.reported = "-"
	if t.missing > 0 || len(evidence) > 0 {
		r.reported = map[bool]string{true: "yes", false: "no"}[len(evidence) > 0]
	}
	r.pass = lostAfter == 0 && t.duplicated == 0 && t.unexpected == 0 && (t.missingAtRisk == 0 || len(evidence) > 0)
	r.note("missing: %d acknowledged before Redis restarted empty (the risked loss), %d after (must be 0)", t.missingAtRisk, lostAfter)
	if t.missingAtRisk == 0 {
		r.note("nothing acknowledged before the kill was lost, so the report was not needed")
	}
	for _, ev := range evidence {
		r.note("reported by %s", ev)
	}
	if t.missingAtRisk > 0 && len(evidence) == 0 {
		r.note("lost %d acknowledged spans silently: no Error log line about Redis losing data, no loss counter", t.missingAtRisk)
	}
	return r
}
