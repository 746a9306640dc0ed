package main

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
)

// indexQuery is one query's latency without and with the schema's indexes.
type indexQuery struct {
	Name       string  `json:"name"`
	Title      string  `json:"title"`
	BeforeMs   float64 `json:"before_ms"` // median, no secondary indexes
	AfterMs    float64 `json:"after_ms"`  // median, with the schema's indexes
	Speedup    float64 `json:"speedup"`
	PlanBefore string  `json:"plan_before"`
	PlanAfter  string  `json:"plan_after"`
}

// indexResult is the article's third experiment on our schema.
type indexResult struct {
	Users   int          `json:"users"`
	Rows    int64        `json:"rows"`
	Indexes []string     `json:"indexes"`
	Runs    int          `json:"runs_per_query"`
	Queries []indexQuery `json:"queries"`
	// Ingest with and without the indexes: psql \copy, one stream.
	CopyWith    result  `json:"copy_with_indexes"`
	CopyWithout result  `json:"copy_without_indexes"`
	IngestCost  float64 `json:"ingest_cost"` // 1 - with/without
	CopyRuns    int     `json:"copy_runs"`
	// BuildSeconds is CREATE INDEX of all of them after the load.
	BuildSeconds float64 `json:"build_after_load_s"`
	Status       string  `json:"status"`
}

// timeQueries runs each query once to warm the cache, then runs times, and
// returns the median and the top plan node.
func (b *bench) timeQueries(ctx context.Context, qs []query, runs int) ([]time.Duration, []string, error) {
	med := make([]time.Duration, len(qs))
	plans := make([]string, len(qs))
	for i, q := range qs {
		if _, err := runQuery(ctx, b.pool, q); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", q.Name, err)
		}
		lat := make([]time.Duration, 0, runs)
		for range runs {
			d, err := runQuery(ctx, b.pool, q)
			if err != nil {
				return nil, nil, fmt.Errorf("%s: %w", q.Name, err)
			}
			lat = append(lat, d)
		}
		slices.Sort(lat)
		med[i] = lat[len(lat)/2]
		plans[i] = b.scanNodes(ctx, q)
	}
	return med, plans, nil
}

// partitionSuffix ends the name of a partition: _p20261129_0000 or _default.
var partitionSuffix = regexp.MustCompile(`_(p\d{8}_\d{4}|default)$`)

// scanNodes says how the plan reads its tables, one entry per scan type and
// table ("Seq Scan on spans", "Index Scan on spans"), partitions folded into
// their table, so the report shows whether an index was used.
func (b *bench) scanNodes(ctx context.Context, q query) string {
	r, err := b.pool.Query(ctx, "EXPLAIN "+q.SQL)
	if err != nil {
		return ""
	}
	defer r.Close()
	var nodes []string
	for r.Next() {
		var line string
		if r.Scan(&line) != nil {
			continue
		}
		line = strings.TrimLeft(strings.TrimSpace(line), "-> ")
		kind, rest, ok := strings.Cut(line, " on ")
		// A bitmap index scan names an index, its heap scan the table.
		if !ok || !strings.Contains(kind, "Scan") || strings.HasPrefix(kind, "Bitmap Index Scan") {
			continue
		}
		kind, _, _ = strings.Cut(kind, " using ")
		rel := strings.Fields(rest)[0]
		if i := strings.LastIndex(rel, "."); i >= 0 {
			rel = rel[i+1:] // the bench's random schema says nothing
		}
		node := kind + " on " + partitionSuffix.ReplaceAllString(rel, "")
		if !slices.Contains(nodes, node) {
			nodes = append(nodes, node)
		}
	}
	return strings.Join(nodes, "; ")
}

// runIndexes times \copy of ds into a fresh schema with and without its
// indexes, then the queries on the loaded tables with and without them.
func (b *bench) runIndexes(ctx context.Context, ds *dataset, qsFor func(string) ([]query, error)) (indexResult, error) {
	res := indexResult{Users: ds.users, Rows: ds.totalRows(), Runs: b.queryRuns, CopyRuns: b.runs}
	s, err := b.newSchema(ctx, "indexes")
	if err != nil {
		return res, err
	}
	qs, err := qsFor(s)
	if err != nil {
		return res, err
	}
	ixs, err := b.workloadIndexes(ctx, s)
	if err != nil {
		return res, err
	}
	for _, ix := range ixs {
		res.Indexes = append(res.Indexes, ix.name)
	}

	// The ingest cost: \copy with and without the indexes, alternating so
	// that both see the same noise, fastest of each kept. Each run ends by
	// rebuilding the indexes on the loaded tables: the load-then-index cost.
	var with, without, build time.Duration
	for run := range b.runs {
		b.progress.step(fmt.Sprintf("indexes: \\copy with and without indexes @ %d users, run %d/%d", ds.users, run+1, b.runs))
		w, _, err := b.timeCopy(ctx, s, ds, 1)
		if err != nil {
			return res, err
		}
		if err := b.dropIndexes(ctx, s, ixs); err != nil {
			return res, err
		}
		wo, _, err := b.timeCopy(ctx, s, ds, 1)
		if err != nil {
			return res, err
		}
		t0 := time.Now()
		if err := b.createIndexes(ctx, ixs); err != nil {
			return res, err
		}
		bt := time.Since(t0)
		if run == 0 || w < with {
			with = w
		}
		if run == 0 || wo < without {
			without = wo
		}
		if run == 0 || bt < build {
			build = bt
		}
	}
	res.CopyWith = newResult("psql \\copy, with indexes", ds, with)
	res.CopyWithout = newResult("psql \\copy, without indexes", ds, without)
	res.CopyWith.Kind, res.CopyWithout.Kind = "indexes", "indexes"
	res.IngestCost = 1 - res.CopyWith.RowsPerS/res.CopyWithout.RowsPerS
	res.BuildSeconds = build.Seconds()

	// The tables hold ds with the indexes now: time the queries, then again
	// without the indexes.
	b.progress.step(fmt.Sprintf("indexes: queries with and without indexes @ %d users", ds.users))
	if err := b.analyze(ctx, s); err != nil {
		return res, err
	}
	after, plansAfter, err := b.timeQueries(ctx, qs, b.queryRuns)
	if err != nil {
		return res, err
	}
	if err := b.dropIndexes(ctx, s, ixs); err != nil {
		return res, err
	}
	if err := b.analyze(ctx, s); err != nil {
		return res, err
	}
	before, plansBefore, err := b.timeQueries(ctx, qs, b.queryRuns)
	if err != nil {
		return res, err
	}
	for i, q := range qs {
		iq := indexQuery{Name: q.Name, Title: q.Title, BeforeMs: ms(before[i]), AfterMs: ms(after[i]),
			PlanBefore: plansBefore[i], PlanAfter: plansAfter[i]}
		if iq.AfterMs > 0 {
			iq.Speedup = iq.BeforeMs / iq.AfterMs
		}
		res.Queries = append(res.Queries, iq)
	}
	res.Status = "ok"
	return res, nil
}
