package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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
// queries run.
type mixedResult struct {
	Users        int          `json:"users"`
	PreloadRows  int64        `json:"preload_rows"`
	Readers      int          `json:"readers"`
	Alone        result       `json:"writes_alone"`
	WithReaders  result       `json:"writes_with_readers"`
	Slowdown     float64      `json:"with_readers_over_alone"`
	QueriesRun   int          `json:"queries_run"`
	QueriesPerS  float64      `json:"queries_per_s"`
	Queries      []queryStats `json:"queries"`
	Status       string       `json:"status"`
	Note         string       `json:"note,omitempty"`
	StrategyName string       `json:"strategy"`
}

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

// runMixed preloads ds, then runs postgrescopy ingest of users more users'
// telemetry twice: alone, and with readers connections looping over the
// queries until the ingest is done.
func (b *bench) runMixed(ctx context.Context, ds *dataset, qsFor func(string) ([]query, error)) (mixedResult, error) {
	res := mixedResult{Users: b.users, PreloadRows: ds.totalRows(), Readers: b.readers, StrategyName: "postgrescopy direct"}
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
		return b.analyze(ctx, s)
	}
	expected := int64(b.users) * int64(b.events)
	// A different seed than the preload: new traces, as new users would send.
	seed := b.seed + 1000

	pool, err := openPool(ctx, b.url, b.readers)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	var (
		mu   sync.Mutex
		lat  = make([][]time.Duration, len(qs))
		errs = make([]int, len(qs))
		busy time.Duration // summed over the runs with readers
	)
	readers := func(ctx context.Context) {
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
					mu.Lock()
					if err != nil {
						errs[k]++
						if errs[k] == 1 {
							b.logf("mixed: %s: %v", qs[k].Name, err)
						}
					} else {
						lat[k] = append(lat[k], d)
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		busy += time.Since(t0)
	}

	// Alone and with readers alternate; each keeps its fastest run, and the
	// query latencies of every run with readers are pooled.
	for run := range b.runs {
		b.progress.step(fmt.Sprintf("mixed: postgrescopy alone @ %d users, run %d/%d", b.users, run+1, b.runs))
		if err := preload(); err != nil {
			return res, err
		}
		alone, err := b.runCollector(ctx, s, ds.totalRows(), b.users, seed, "", nil)
		if err != nil {
			return res, err
		}
		if r := collectorResult("postgrescopy direct, alone", b.users, expected, ds.totalBytes(), alone); run == 0 || r.Seconds < res.Alone.Seconds {
			res.Alone = r
		}

		b.progress.step(fmt.Sprintf("mixed: postgrescopy + %d readers @ %d users, run %d/%d", b.readers, b.users, run+1, b.runs))
		if err := preload(); err != nil {
			return res, err
		}
		with, err := b.runCollector(ctx, s, ds.totalRows(), b.users, seed, "", readers)
		if err != nil {
			return res, err
		}
		if r := collectorResult(fmt.Sprintf("postgrescopy direct, %d readers", b.readers), b.users, expected, ds.totalBytes(), with); run == 0 || r.Seconds < res.WithReaders.Seconds {
			res.WithReaders = r
		}
	}
	res.Slowdown = res.WithReaders.RowsPerS / res.Alone.RowsPerS
	for k, q := range qs {
		st := summarize(q, lat[k], errs[k])
		res.QueriesRun += st.Runs
		res.Queries = append(res.Queries, st)
	}
	if busy > 0 {
		res.QueriesPerS = float64(res.QueriesRun) / busy.Seconds()
	}
	res.Status = "ok"
	return res, nil
}

// loadDataset copies ds into schemaName with two psql streams (no timing).
func (b *bench) loadDataset(ctx context.Context, schemaName string, ds *dataset) error {
	groups := streamFiles(ds, 2)
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
