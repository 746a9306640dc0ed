package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// queryStats is the latency distribution of one query.
type queryStats struct {
	Name  string  `json:"name"`
	Title string  `json:"title"`
	Runs  int     `json:"runs"`
	P50Ms float64 `json:"p50_ms"`
	P95Ms float64 `json:"p95_ms"`
	MaxMs float64 `json:"max_ms"`
	// Errors counts failed runs (a cancelled run at the end is not one).
	Errors int `json:"errors,omitempty"`
}

// mixedResult is the article's second experiment: ingest while the analytical
// queries run, with the readers on the primary and, when the bench could set
// one up, on a streaming replica.
type mixedResult struct {
	Users       int   `json:"users"`
	PreloadRows int64 `json:"preload_rows"`
	Readers     int   `json:"readers"`
	// Server is where the mixed part ran: "-db", or "bench primary" (the
	// bench's own cluster, whose replica takes the readers in the third run).
	Server      string       `json:"server"`
	Alone       result       `json:"writes_alone"`
	WithReaders result       `json:"writes_with_readers"`
	Slowdown    float64      `json:"with_readers_over_alone"`
	QueriesRun  int          `json:"queries_run"`
	QueriesPerS float64      `json:"queries_per_s"`
	Queries     []queryStats `json:"queries"`
	// OnReplica is ingest on the primary while the same readers query the
	// replica; nil when there is no replica.
	OnReplica    *readerPlacement `json:"readers_on_replica,omitempty"`
	Replica      replicaInfo      `json:"replica"`
	Status       string           `json:"status"`
	Note         string           `json:"note,omitempty"`
	StrategyName string           `json:"strategy"`
}

// readerPlacement is ingest with the readers on the replica.
type readerPlacement struct {
	Writes      result       `json:"writes"`
	Slowdown    float64      `json:"over_alone"`
	QueriesRun  int          `json:"queries_run"`
	QueriesPerS float64      `json:"queries_per_s"`
	Queries     []queryStats `json:"queries"`
}

// replicaInfo says whether the mixed part had a replica, how it was made,
// and how far it fell behind during each kind of run.
type replicaInfo struct {
	Status   string   `json:"status"` // ok, unavailable, off
	Note     string   `json:"note,omitempty"`
	Version  string   `json:"postgresql_version,omitempty"`
	Settings []string `json:"primary_settings,omitempty"`
	// SetupSeconds is initdb, start, pg_basebackup and the replica's start.
	SetupSeconds float64 `json:"setup_seconds,omitempty"`
	// Lag is sampled on the primary (pg_stat_replication) every
	// lagInterval while ingest runs: alone, with the readers on the primary,
	// with the readers on the replica.
	LagIntervalMs    float64   `json:"lag_interval_ms,omitempty"`
	LagAlone         *lagStats `json:"lag_writes_alone,omitempty"`
	LagReadersOnPrim *lagStats `json:"lag_readers_on_primary,omitempty"`
	LagReadersOnRepl *lagStats `json:"lag_readers_on_replica,omitempty"`
}

const lagInterval = 500 * time.Millisecond

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func summarize(q query, lat []time.Duration, errs int) queryStats {
	slices.Sort(lat)
	s := queryStats{Name: q.Name, Title: q.Title, Runs: len(lat), Errors: errs}
	if len(lat) > 0 {
		s.P50Ms = ms(percentile(lat, 0.50))
		s.P95Ms = ms(percentile(lat, 0.95))
		s.MaxMs = ms(lat[len(lat)-1])
	}
	return s
}

// runQuery runs q to its last row and returns how long that took.
func runQuery(ctx context.Context, pool *pgxpool.Pool, q query) (time.Duration, error) {
	t0 := time.Now()
	r, err := pool.Query(ctx, q.SQL)
	if err != nil {
		return 0, err
	}
	for r.Next() {
	}
	r.Close()
	return time.Since(t0), r.Err()
}

// readerSet is the readers' query latencies over every run with one placement.
type readerSet struct {
	mu   sync.Mutex
	lat  [][]time.Duration
	errs []int
	busy time.Duration
}

func newReaderSet(n int) *readerSet {
	return &readerSet{lat: make([][]time.Duration, n), errs: make([]int, n)}
}

// loop runs b.readers connections of pool over qs until ctx ends.
func (rs *readerSet) loop(ctx context.Context, b *bench, pool *pgxpool.Pool, qs []query, where string) {
	t0 := time.Now()
	var wg sync.WaitGroup
	for r := range b.readers {
		wg.Go(func() {
			// Each reader starts at a different query so all of them run
			// from the first second.
			for i := r; ctx.Err() == nil; i++ {
				k := i % len(qs)
				d, err := runQuery(ctx, pool, qs[k])
				if ctx.Err() != nil {
					return // cut short by the end of ingest: not a sample
				}
				rs.mu.Lock()
				if err != nil {
					rs.errs[k]++
					if rs.errs[k] == 1 {
						b.logf("mixed (readers on %s): %s: %v", where, qs[k].Name, err)
					}
				} else {
					rs.lat[k] = append(rs.lat[k], d)
				}
				rs.mu.Unlock()
			}
		})
	}
	wg.Wait()
	rs.mu.Lock()
	rs.busy += time.Since(t0)
	rs.mu.Unlock()
}

// summary returns each query's distribution, the queries run and their rate.
func (rs *readerSet) summary(qs []query) ([]queryStats, int, float64) {
	var out []queryStats
	n := 0
	for k, q := range qs {
		st := summarize(q, rs.lat[k], rs.errs[k])
		n += st.Runs
		out = append(out, st)
	}
	rate := 0.0
	if rs.busy > 0 {
		rate = float64(n) / rs.busy.Seconds()
	}
	return out, n, rate
}

// useServer points the bench's administration (b.url, b.pool, the schemas it
// drops) at another server until the returned function restores them.
func (b *bench) useServer(url string, pool *pgxpool.Pool) (restore func()) {
	oldURL, oldPool, oldSchemas := b.url, b.pool, b.schemas
	b.url, b.pool, b.schemas = url, pool, nil
	return func() { b.url, b.pool, b.schemas = oldURL, oldPool, oldSchemas }
}

// startReplica sets up the bench's own primary and streaming replica and
// records it for the bench's cleanup.
func (b *bench) startReplica(ctx context.Context) (*replicaCluster, error) {
	b.cluster = &replicaCluster{}
	b.progress.step("mixed: set up a primary and a streaming replica (initdb, pg_basebackup)")
	if err := startReplicaCluster(ctx, b.tmp, b.logf, b.cluster); err != nil {
		b.cluster.stop()
		return nil, err
	}
	b.logf("replica: primary %s, replica %s, ready in %.1fs", b.cluster.PrimaryURL, b.cluster.ReplicaURL, b.cluster.Setup.Seconds())
	return b.cluster, nil
}

// runMixed preloads ds, then runs postgrescopy ingest of users more users'
// telemetry: alone, with readers connections looping over the queries on the
// same server until the ingest is done, and (with -replica) with the readers
// on a streaming replica of it. With a replica the whole part runs on the
// bench's own primary, so that all three runs share one server.
func (b *bench) runMixed(ctx context.Context, ds *dataset, qsFor func(string) ([]query, error)) (mixedResult, error) {
	res := mixedResult{Users: b.users, PreloadRows: ds.totalRows(), Readers: b.readers, StrategyName: "postgrescopy direct", Server: "-db"}
	res.Replica = replicaInfo{Status: "off", Note: "-replica=false"}
	var (
		cl          *replicaCluster
		replicaPool *pgxpool.Pool // the readers' on the replica
		replicaAdm  *pgxpool.Pool // replay checks
	)
	if b.replica {
		var err error
		cl, err = b.startReplica(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.Replica = replicaInfo{Status: "unavailable", Note: err.Error()}
			b.logf("replica: unavailable (%v)", err)
		}
	}
	if cl != nil {
		defer cl.stop()
		adm, err := openPool(ctx, cl.PrimaryURL, 4)
		if err != nil {
			return res, fmt.Errorf("bench primary: %w", err)
		}
		defer adm.Close()
		restore := b.useServer(cl.PrimaryURL, adm)
		defer restore()
		if replicaAdm, err = openPool(ctx, cl.ReplicaURL, 1); err != nil {
			return res, fmt.Errorf("replica: %w", err)
		}
		defer replicaAdm.Close()
		if replicaPool, err = openPool(ctx, cl.ReplicaURL, b.readers); err != nil {
			return res, fmt.Errorf("replica: %w", err)
		}
		defer replicaPool.Close()
		res.Server = "bench primary"
		res.Replica = replicaInfo{Status: "ok", Version: cl.Version, Settings: primarySettings,
			SetupSeconds: cl.Setup.Seconds(), LagIntervalMs: ms(lagInterval)}
	}

	s, err := b.newSchema(ctx, "mixed")
	if err != nil {
		return res, err
	}
	qs, err := qsFor(s)
	if err != nil {
		return res, err
	}
	preload := func() error {
		if err := b.reset(ctx, s); err != nil {
			return err
		}
		if err := b.loadDataset(ctx, s, ds); err != nil {
			return err
		}
		if err := b.analyze(ctx, s); err != nil {
			return err
		}
		if cl != nil {
			// The replica's readers must see the same preloaded rows.
			if _, err := waitReplayed(ctx, b.pool, replicaAdm, 2*time.Minute); err != nil {
				return fmt.Errorf("replica: %w", err)
			}
		}
		return nil
	}
	expected := int64(b.users) * int64(b.events)
	// A different seed than the preload: new traces, as new users would send.
	seed := b.seed + 1000

	pool, err := openPool(ctx, b.url, b.readers)
	if err != nil {
		return res, err
	}
	defer pool.Close()

	onPrimary, onReplica := newReaderSet(len(qs)), newReaderSet(len(qs))
	lagAlone, lagPrim, lagRepl := &lagRecorder{}, &lagRecorder{}, &lagRecorder{}
	var withReplica result

	// during returns what runs while the collector ingests: the readers (if
	// any) and, with a replica, the lag sampler.
	during := func(rs *readerSet, rpool *pgxpool.Pool, where string, lag *lagRecorder) func(context.Context) {
		if cl == nil && rs == nil {
			return nil
		}
		return func(ctx context.Context) {
			var wg sync.WaitGroup
			if cl != nil {
				wg.Go(func() { lag.record(ctx, b.pool, lagInterval) })
			}
			if rs != nil {
				wg.Go(func() { rs.loop(ctx, b, rpool, qs, where) })
			}
			wg.Wait()
		}
	}
	// ingest preloads, runs the collector and keeps the fastest run in best.
	ingest := func(label string, run int, best *result, d func(context.Context), lag *lagRecorder) error {
		b.progress.step(fmt.Sprintf("mixed: postgrescopy %s @ %d users, run %d/%d", label, b.users, run+1, b.runs))
		if err := preload(); err != nil {
			return err
		}
		// The base is the preload's signal rows: runCollector counts those
		// (the context dictionary holds the same contexts either way).
		cr, err := b.runCollector(ctx, s, ds.totalRows()-ds.rows[tables.IdxContexts], b.users, seed, "", 0, d)
		if err != nil {
			return err
		}
		if cl != nil {
			wait, err := waitReplayed(ctx, b.pool, replicaAdm, 2*time.Minute)
			if err != nil {
				return fmt.Errorf("replica: %w", err)
			}
			lag.caughtUp(wait)
		}
		if r := collectorResult("postgrescopy direct, "+label, b.users, expected, ds.totalBytes(), cr); run == 0 || r.Seconds < best.Seconds {
			*best = r
		}
		return nil
	}

	// The runs alternate; each kind keeps its fastest run, and the query
	// latencies of every run of a placement are pooled.
	for run := range b.runs {
		if err := ingest("alone", run, &res.Alone, during(nil, nil, "", lagAlone), lagAlone); err != nil {
			return res, err
		}
		label := fmt.Sprintf("%d readers", b.readers)
		if cl != nil {
			label += " on the primary"
		}
		if err := ingest(label, run, &res.WithReaders, during(onPrimary, pool, "the primary", lagPrim), lagPrim); err != nil {
			return res, err
		}
		if cl != nil {
			label := fmt.Sprintf("%d readers on the replica", b.readers)
			if err := ingest(label, run, &withReplica, during(onReplica, replicaPool, "the replica", lagRepl), lagRepl); err != nil {
				return res, err
			}
		}
	}
	res.Slowdown = res.WithReaders.RowsPerS / res.Alone.RowsPerS
	res.Queries, res.QueriesRun, res.QueriesPerS = onPrimary.summary(qs)
	if cl != nil {
		p := &readerPlacement{Writes: withReplica, Slowdown: withReplica.RowsPerS / res.Alone.RowsPerS}
		p.Queries, p.QueriesRun, p.QueriesPerS = onReplica.summary(qs)
		res.OnReplica = p
		a, pr, rr := lagAlone.stats(), lagPrim.stats(), lagRepl.stats()
		res.Replica.LagAlone, res.Replica.LagReadersOnPrim, res.Replica.LagReadersOnRepl = &a, &pr, &rr
	}
	res.Status = "ok"
	return res, nil
}

// loadDataset copies ds into schemaName with two psql streams (no timing).
func (b *bench) loadDataset(ctx context.Context, schemaName string, ds *dataset) error {
	groups, err := b.streamFiles(ds, 2)
	if err != nil {
		return err
	}
	if groups, err = b.intoPartitions(ctx, schemaName, groups); err != nil {
		return err
	}
	errs := make(chan error, len(groups))
	for _, g := range groups {
		go func() { errs <- b.psqlCopy(ctx, schemaName, g) }()
	}
	var first error
	for range groups {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}
