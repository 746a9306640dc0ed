package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"
)

// runStopOutage: a routine stop (SIGTERM) of the collector in direct mode
// while PostgreSQL cannot take writes, then PostgreSQL and the collector
// start again: every acknowledged span once, the stop within a 30 s grace
// period, and no "Dropping data" line for data that was not dropped. Three
// rows: the default configuration with PostgreSQL stopped, the default with
// every write held by a lock, and a persistent queue that acknowledges on
// disk (file_storage, wait_for_result: false) with PostgreSQL stopped.
func runStopOutage(ctx context.Context, o *options) []row {
	return []row{
		stopOutage(ctx, o, "default, PostgreSQL stopped", false, false),
		stopOutage(ctx, o, "default, writes locked", true, false),
		stopOutage(ctx, o, "file_storage, PostgreSQL stopped", false, true),
	}
}

// r is named so that the deferred finish can add its note.
func stopOutage(ctx context.Context, o *options, mode string, lock, persistent bool) (r row) {
	r = row{scenario: "stop-outage", mode: mode}
	pg, err := startPG(ctx)
	if err != nil {
		r.err = fmt.Errorf("throwaway PostgreSQL: %w", err)
		return r
	}
	defer pg.remove()
	e, err := newEnv(ctx, o, "stop-outage/"+mode, pg.url(), "")
	if err != nil {
		r.err = err
		return r
	}
	defer e.close()
	defer e.finish(&r)
	spec := collectorSpec{signals: []string{"traces"}}
	if persistent {
		spec.fileStorage = filepath.Join(e.tmp, "file_storage")
		if err := os.Mkdir(spec.fileStorage, 0o700); err != nil {
			r.err = err
			return r
		}
		spec.queue = map[string]any{"storage": "file_storage", "wait_for_result": false}
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
	if err := sleepCtx(ctx, 3*time.Second); err != nil {
		r.err = err
		return r
	}
	var held pgx.Tx
	if lock {
		// A lock longer than any grace period on the table every write
		// inserts into first.
		if held, err = e.pool.Begin(ctx); err == nil {
			_, err = held.Exec(ctx, "SET LOCAL lock_timeout = 0; LOCK TABLE "+e.table("ledger")+" IN ACCESS EXCLUSIVE MODE")
		}
	} else {
		err = pg.stop()
	}
	if err != nil {
		r.err = err
		return r
	}
	if err := sleepCtx(ctx, 8*time.Second); err != nil {
		r.err = err
		return r
	}
	stopLoad()
	acked := ackedSpans(ld)
	began := time.Now()
	exitErr := e.coll.terminate()
	took := time.Since(began)
	e.logf("SIGTERM during the outage: exit after %s (%v); %d spans acknowledged", took.Round(time.Millisecond), exitErr, acked)
	r.note("SIGTERM during the outage: exited after %s", took.Round(100*time.Millisecond))
	dropped := matchingLines(e.coll.logPath, "Dropping data")
	kept := matchingLines(e.coll.logPath, "not dropped")
	if lock {
		if err := held.Rollback(ctx); err != nil {
			r.err = err
			return r
		}
	} else if err := pg.start(ctx); err != nil {
		r.err = fmt.Errorf("restart PostgreSQL: %w", err)
		return r
	}
	if err := e.coll.start(ctx); err != nil {
		r.err = fmt.Errorf("restart the collector: %w", err)
		return r
	}
	if _, err := e.waitRows(ctx, "spans", acked, o.directDrain); err != nil {
		r.err = err
		return r
	}
	t, err := e.tally(ctx, ld, nil)
	if err != nil {
		r.err = err
		return r
	}
	t.fill(&r)
	if exitErr != nil || took > 30*time.Second {
		r.pass = false
		r.note("the stop did not fit a 30 s grace period: %v", exitErr)
	}
	if dropped > 0 {
		r.pass = false
		r.note("%d log lines say 'Dropping data'", dropped)
	}
	if kept > 0 {
		r.note("%d log lines say the stop kept the queue's requests ('not dropped')", kept)
	}
	return r
}
