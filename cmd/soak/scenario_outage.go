package main

import (
	"context"
	"fmt"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"os"
	"path/filepath"
	"time"
)

// runPGOutage stops a throwaway PostgreSQL for -outage (longer than the
// 300 s the Collector's default retry gives a batch), with load in its
// first seconds, then starts it again: every acknowledged span must be
// stored once. Two collectors share the outage: direct mode with the
// default queue and retry settings (nothing about retries in the config),
// and Redis mode.
func runPGOutage(ctx context.Context, o *options) []row {
	// The deferred finish calls edit the rows through these pointers.
	rows := []row{{scenario: "pg-outage", mode: "direct"}, {scenario: "pg-outage", mode: "redis"}}
	direct, redisRow := &rows[0], &rows[1]
	fail := func(err error) []row {
		direct.err, redisRow.err = err, err
		return rows
	}
	pg, err := startPG(ctx)
	if err != nil {
		return fail(fmt.Errorf("throwaway PostgreSQL: %w", err))
	}
	defer pg.remove()
	rs, err := redisserver.Start(ctx, redisserver.Options{})
	if err != nil {
		return fail(err)
	}
	defer rs.Close()

	ed, err := newEnv(ctx, o, "pg-outage/direct", pg.url(), "")
	if err != nil {
		return fail(err)
	}
	defer ed.close()
	defer ed.finish(direct)
	er, err := newEnv(ctx, o, "pg-outage/redis", pg.url(), rs.Addr())
	if err != nil {
		return fail(err)
	}
	defer er.close()
	defer er.finish(redisRow)
	for _, e := range []*env{ed, er} {
		if err := e.startCollector(ctx, collectorSpec{signals: []string{"traces"}}); err != nil {
			return fail(fmt.Errorf("%s: %w", e.label, err))
		}
	}

	loads := make([]*load, 2)
	waits := make([]func(), 2)
	for i, e := range []*env{ed, er} {
		loads[i] = e.newLoad(50, 50*time.Millisecond)
		if waits[i], err = loads[i].run(e.grpcAddr, 1); err != nil {
			return fail(fmt.Errorf("OTLP client: %w", err))
		}
	}
	stopLoads := func() {
		for i := range loads {
			if !loads[i].stopped.Swap(true) {
				waits[i]()
			}
		}
	}
	defer stopLoads()
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		return fail(err)
	}
	var before [2]int64
	for i, e := range []*env{ed, er} {
		if before[i], err = e.count(ctx, "spans"); err != nil {
			return fail(err)
		}
	}
	if err := pg.stop(); err != nil {
		return fail(err)
	}
	down := time.Now()
	ed.logf("PostgreSQL stopped for %s; load for its first %s", o.outage, o.outageLoad)
	if err := sleepCtx(ctx, o.outageLoad); err != nil {
		return fail(err)
	}
	stopLoads()
	for time.Since(down) < o.outage {
		for _, e := range []*env{ed, er} {
			if err := e.coll.exitedEarly(); err != nil {
				return fail(fmt.Errorf("%s: %w", e.label, err))
			}
		}
		ed.logf("outage %s of %s; direct log: %d 'no more retries left' lines", time.Since(down).Round(time.Second), o.outage,
			matchingLines(ed.coll.logPath, "no more retries left"))
		if err := sleepCtx(ctx, min(30*time.Second, o.outage-time.Since(down))); err != nil {
			return fail(err)
		}
	}
	if err := pg.start(ctx); err != nil {
		return fail(fmt.Errorf("restart PostgreSQL: %w", err))
	}
	ed.logf("PostgreSQL back after %s", time.Since(down).Round(time.Second))

	// The default retry waits up to 45 s (30 s max interval ± half) between
	// attempts: -outage-drain must outlast one.
	if _, err := ed.waitRows(ctx, "spans", ackedSpans(loads[0]), o.directDrain); err != nil {
		direct.err = err
	} else if t, err := ed.tally(ctx, loads[0], nil); err != nil {
		direct.err = err
	} else {
		t.fill(direct)
		if n := matchingLines(ed.coll.logPath, "no more retries left"); n > 0 {
			direct.note("%d collector log lines say 'no more retries left'", n)
		}
	}
	if drained, err := er.waitDrained(ctx, "traces", "spans", o.shortDrain); err != nil {
		redisRow.err = err
	} else if t, err := er.tally(ctx, loads[1], nil); err != nil {
		redisRow.err = err
	} else {
		t.fill(redisRow)
		if !drained {
			redisRow.note("the stream did not drain within %s", o.shortDrain)
		}
	}
	for i, r := range rows {
		if r.err != nil {
			continue
		}
		if r.mode == "direct" {
			// The default queue acknowledges a request once its rows are
			// committed: the clients' requests fail while PostgreSQL is down.
			r.note("%d spans stored before PostgreSQL stopped, %d acknowledged in all", before[i], r.acked)
		} else {
			r.note("%d spans stored before PostgreSQL stopped; the rest was acknowledged while it was down", before[i])
			if r.acked <= before[i] {
				r.err = fmt.Errorf("nothing was acknowledged while PostgreSQL was down (%d acknowledged, %d stored before)", r.acked, before[i])
			}
		}
		rows[i] = r
	}
	return rows
}

// runCollectorKillOutage: direct mode with a persistent queue
// (sending_queue::storage: file_storage); PostgreSQL goes down, requests are
// acknowledged into the queue, the collector is SIGKILLed, then PostgreSQL
// and the collector start again: every acknowledged span once.
func runCollectorKillOutage(ctx context.Context, o *options) []row {
	return []row{collectorKillOutage(ctx, o)}
}

// r is named so that the deferred finish can add its note.
func collectorKillOutage(ctx context.Context, o *options) (r row) {
	r = row{scenario: "collector-kill-outage", mode: "direct"}
	pg, err := startPG(ctx)
	if err != nil {
		r.err = fmt.Errorf("throwaway PostgreSQL: %w", err)
		return r
	}
	defer pg.remove()
	e, err := newEnv(ctx, o, "collector-kill-outage/direct", pg.url(), "")
	if err != nil {
		r.err = err
		return r
	}
	defer e.close()
	defer e.finish(&r)
	storage := filepath.Join(e.tmp, "file_storage")
	if err := os.Mkdir(storage, 0o700); err != nil {
		r.err = err
		return r
	}
	spec := collectorSpec{
		queue:       map[string]any{"storage": "file_storage", "wait_for_result": false},
		fileStorage: storage,
		signals:     []string{"traces"},
	}
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
	stopLoad := func() {
		if !ld.stopped.Swap(true) {
			waitLoad()
		}
	}
	defer stopLoad()
	if err := sleepCtx(ctx, 5*time.Second); err != nil {
		r.err = err
		return r
	}
	before, err := e.count(ctx, "spans")
	if err == nil {
		err = pg.stop()
	}
	if err != nil {
		r.err = err
		return r
	}
	e.logf("PostgreSQL stopped; SIGKILL of the collector in %s", o.killOutageLoad)
	if err := sleepCtx(ctx, o.killOutageLoad); err != nil {
		r.err = err
		return r
	}
	e.coll.kill()
	stopLoad()
	e.logf("collector SIGKILLed with PostgreSQL down; %d spans acknowledged", ackedSpans(ld))
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		r.err = err
		return r
	}
	if err := pg.start(ctx); err != nil {
		r.err = fmt.Errorf("restart PostgreSQL: %w", err)
		return r
	}
	if err := e.coll.start(ctx); err != nil {
		r.err = fmt.Errorf("restart the collector: %w", err)
		return r
	}
	e.logf("PostgreSQL and the collector restarted")
	if _, err := e.waitRows(ctx, "spans", ackedSpans(ld), o.directDrain); err != nil {
		r.err = err
		return r
	}
	t, err := e.tally(ctx, ld, nil)
	if err != nil {
		r.err = err
		return r
	}
	t.fill(&r)
	r.note("%d spans stored before PostgreSQL stopped; the rest was acknowledged while it was down", before)
	if t.acked <= before {
		r.err = fmt.Errorf("nothing was acknowledged while PostgreSQL was down (%d acknowledged, %d stored before)", t.acked, before)
	}
	return r
}

// ackedSpans sums the acknowledged requests of a stopped load.
func ackedSpans(ld *load) int64 {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	var n int64
	for _, q := range ld.log {
		if q.acked {
			n += int64(q.n)
		}
	}
	return n
}
