package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// appStrategy is one of the article's application-side write strategies:
// conns connections each write batches of batch rows of one table.
type appStrategy struct {
	name  string
	conns int
	batch int
	copy  bool // pgx CopyFrom instead of INSERT
	// maps holds every jsonb value as the Go value an application would
	// (maps, slices, numbers), decoded while timed a few batches ahead (before
	// the clock with -pregenerate), so that pgx
	// renders the JSON while timed; without it pgx is handed the JSON text
	// already rendered and only copies it.
	maps bool
	// viaPgbouncer routes the connections through the bench's pgbouncer.
	viaPgbouncer bool
}

// batchJob is a batch of decoded rows of one table.
type batchJob struct {
	table int
	rows  [][]any
	done  *sync.WaitGroup // when set, told when the job is written
}

// feed decodes ds and sends batches of n rows, taking one batch of each
// table in turn so that concurrent writers spread over the tables as the
// exporter's mixed batches do. It closes out when done.
//
// With tokens, it takes one before decoding each batch, so that a caller
// decides when decoding happens (the maps strategy decodes between timed
// windows).
func feed(ctx context.Context, ds *dataset, dec *decoder, n int, out chan<- batchJob, tokens chan struct{}) error {
	defer close(out)
	for h := range halves {
		var readers [numTables]*copyReader
		open := 0
		for t := range numTables {
			if p := ds.files[h][t]; p != "" {
				r, err := openCopyFile(p)
				if err != nil {
					return err
				}
				defer r.Close()
				readers[t] = r
				open++
			}
		}
		for open > 0 {
			for t, r := range readers {
				if r == nil {
					continue
				}
				if tokens != nil {
					select {
					case <-tokens:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				job := batchJob{table: t, rows: make([][]any, 0, n)}
				for len(job.rows) < n {
					fields, err := r.next()
					if errors.Is(err, io.EOF) {
						readers[t] = nil
						open--
						break
					}
					if err != nil {
						return fmt.Errorf("%s: %w", ds.files[h][t], err)
					}
					v, err := dec.row(t, fields)
					if err != nil {
						return err
					}
					job.rows = append(job.rows, v)
				}
				if len(job.rows) == 0 {
					if tokens != nil {
						tokens <- struct{}{} // nothing decoded: give it back
					}
					continue
				}
				select {
				case out <- job:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	}
	return nil
}

// mapsChunk is how many batches the maps strategy holds decoded at a time
// (20 × 5,000 rows: ~700 MB of maps).
const mapsChunk = 20

// feedChunks decodes mapsChunk batches with the clock stopped, sends them
// with it running until every one is written, and adds each timed window to
// elapsed and its CPU to spent.
func feedChunks(ctx context.Context, ds *dataset, dec *decoder, n int, out chan<- batchJob, elapsed *time.Duration, spent *cpuMark) error {
	tokens := make(chan struct{}, mapsChunk)
	all := make(chan batchJob)
	errc := make(chan error, 1)
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { errc <- feed(fctx, ds, dec, n, all, tokens) }()
	for more := true; more; {
		for range mapsChunk {
			tokens <- struct{}{}
		}
		var chunk []batchJob
		for len(chunk) < mapsChunk {
			job, ok := <-all
			if !ok {
				more = false
				break
			}
			chunk = append(chunk, job)
		}
		if len(chunk) == 0 {
			break
		}
		// The feeder now waits for a token: nothing decodes in the window.
		var written sync.WaitGroup
		written.Add(len(chunk))
		m0, t0 := markCPU(0), time.Now()
		for _, job := range chunk {
			job.done = &written
			select {
			case out <- job:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		waited := make(chan struct{})
		go func() { written.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-ctx.Done():
			return ctx.Err()
		}
		*elapsed += time.Since(t0)
		m1 := markCPU(0)
		spent.postgres += m1.postgres - m0.postgres
		spent.redis += m1.redis - m0.redis
		spent.backends += m1.backends - m0.backends
		spent.self += m1.self - m0.self
		spent.children += m1.children - m0.children
	}
	stop()
	if err := <-errc; err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// insertSQL is a multi-row INSERT of n rows into table t.
func insertSQL(schemaName string, t, n int) string {
	tbl := benchLayout.Table(t)
	cols := make([]string, len(tbl.Columns))
	for i, c := range tbl.Columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	var sb strings.Builder
	sb.WriteString("INSERT INTO " + schema.Qualified(schemaName, tbl.Store) + " (" + strings.Join(cols, ", ") + ") VALUES ")
	k := 1
	for r := range n {
		if r > 0 {
			sb.WriteString(", ")
		}
		sb.WriteByte('(')
		for c := range cols {
			if c > 0 {
				sb.WriteString(", ")
			}
			sb.WriteByte('$')
			sb.WriteString(strconv.Itoa(k))
			k++
		}
		sb.WriteByte(')')
	}
	return sb.String()
}

// openPool opens conns connections to url and connects them all before the
// clock starts, so no strategy is timed on its connection set-up.
func openPool(ctx context.Context, url string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	cfg.MinConns = int32(conns)
	// Unnamed statements with cached descriptions: one round trip per
	// statement, binary parameters, and it works through pgbouncer's
	// transaction mode (pgbouncer 1.18 cannot keep named prepared statements).
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	held := make([]*pgxpool.Conn, 0, conns)
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	for range conns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, fmt.Errorf("connect: %w", err)
		}
		held = append(held, c)
	}
	return pool, nil
}

// runApp writes ds into schemaName with strategy s and returns the elapsed
// time from the first batch to the last commit.
func (b *bench) runApp(ctx context.Context, s appStrategy, ds *dataset, schemaName string) (time.Duration, *cpuPerRow, error) {
	if err := b.reset(ctx, schemaName); err != nil {
		return 0, nil, err
	}
	url := b.url
	if s.viaPgbouncer {
		var err error
		if url, err = b.pgbouncerURL(ctx); err != nil {
			return 0, nil, err
		}
	}
	pool, err := openPool(ctx, url, s.conns)
	if err != nil {
		return 0, nil, err
	}
	defer pool.Close()

	dec, err := b.decoderFor(ctx, schemaName)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	jobs := make(chan batchJob, 2*s.conns)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; cancel() })
	}
	var prepared []batchJob
	dec.maps = s.maps
	preload := s.maps && b.pregenerate
	if preload {
		// With -pregenerate, decode the whole dataset before the clock, as
		// an application holds its telemetry before writing it (about 7 KB
		// of maps a row: 14 GB at 1,000 users).
		all := make(chan batchJob)
		errc := make(chan error, 1)
		go func() { errc <- feed(ctx, ds, dec, s.batch, all, nil) }()
		for job := range all {
			prepared = append(prepared, job)
		}
		if err := <-errc; err != nil {
			return 0, nil, err
		}
	}
	// Without -pregenerate the maps strategy holds its telemetry a chunk at
	// a time: mapsChunk batches are decoded with the clock stopped, then
	// written with it running, and the timed windows are added up. (Decoding
	// the maps while timed cost ~30 µs a row, far more than an application
	// that already holds them pays.)
	chunked := s.maps && !preload
	var (
		elapsed time.Duration
		spent   cpuMark // CPU of the timed windows, summed
	)
	before := markCPU(0)
	start := time.Now()
	wg.Go(func() {
		switch {
		case preload:
			defer close(jobs)
			for _, job := range prepared {
				select {
				case jobs <- job:
				case <-ctx.Done():
					return
				}
			}
		case chunked:
			defer close(jobs)
			if err := feedChunks(ctx, ds, dec, s.batch, jobs, &elapsed, &spent); err != nil {
				fail(err)
			}
		default:
			if err := feed(ctx, ds, dec, s.batch, jobs, nil); err != nil {
				fail(err)
			}
		}
	})
	for range s.conns {
		wg.Go(func() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				fail(err)
				return
			}
			defer conn.Release()
			stmts := map[[2]int]string{}
			var args []any
			for job := range jobs {
				if ctx.Err() == nil { // else drain so the feeder can finish
					if err := writeJob(ctx, conn.Conn(), s, schemaName, job, stmts, &args); err != nil {
						fail(fmt.Errorf("%s into %s: %w", s.name, benchLayout.Table(job.table).Name, err))
					}
				}
				if job.done != nil {
					job.done.Done()
				}
			}
		})
	}
	wg.Wait()
	cpu := cpuBetween(cpuMark{}, spent, clientSelf, ds.totalRows())
	if !chunked {
		elapsed = time.Since(start)
		cpu = cpuBetween(before, markCPU(0), clientSelf, ds.totalRows())
	}
	if firstErr != nil {
		return 0, nil, firstErr
	}
	got, err := countRows(context.WithoutCancel(ctx), b.pool, schemaName)
	if err != nil {
		return 0, nil, err
	}
	if got < ds.totalRows() {
		return 0, nil, &errLost{lost: ds.totalRows() - got, msg: fmt.Sprintf("lost %d rows: %s wrote %d, the dataset has %d", ds.totalRows()-got, s.name, got, ds.totalRows())}
	}
	if got != ds.totalRows() {
		return 0, nil, fmt.Errorf("%s wrote %d rows, the dataset has %d", s.name, got, ds.totalRows())
	}
	return elapsed, cpu, nil
}

func writeJob(ctx context.Context, conn *pgx.Conn, s appStrategy, schemaName string, job batchJob, stmts map[[2]int]string, args *[]any) error {
	if s.copy {
		_, err := conn.CopyFrom(ctx, pgx.Identifier{schemaName, benchLayout.Table(job.table).Store},
			benchLayout.Table(job.table).Columns, pgx.CopyFromRows(job.rows))
		return err
	}
	key := [2]int{job.table, len(job.rows)}
	sql, ok := stmts[key]
	if !ok {
		sql = insertSQL(schemaName, job.table, len(job.rows))
		stmts[key] = sql
	}
	*args = (*args)[:0]
	for _, r := range job.rows {
		*args = append(*args, r...)
	}
	_, err := conn.Exec(ctx, sql, *args...)
	return err
}

// decoderFor returns a decoder for the column types of schemaName.
func (b *bench) decoderFor(ctx context.Context, schemaName string) (*decoder, error) {
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	return newDecoder(ctx, conn.Conn(), schemaName)
}

// parseVariants reads -variants: extra runs of postgrescopy + Redis, each
// with another collector binary, exporter settings and/or environment
// variables of the collector process (GOGC...), measured in the
// same run as the others (interleaved, fastest of -runs kept), so that a
// change is compared with what it replaces on the same machine at the same
// time. Their rows are labelled and keyed postgrescopy-redis@<label>; the
// targets keep reading postgrescopy-redis.
func parseVariants(s string) ([]strategy, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var in map[string]struct {
		Collector string            `json:"collector"`
		Exporter  map[string]any    `json:"exporter"`
		Env       map[string]string `json:"env"`
		Loadgen   map[string]any    `json:"loadgen"`
		// Direct runs the variant without Redis (postgrescopy direct).
		Direct bool `json:"direct"`
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return nil, err
	}
	labels := slices.Sorted(maps.Keys(in))
	out := make([]strategy, 0, len(labels))
	for _, label := range labels {
		v := in[label]
		if label == "" || strings.ContainsAny(label, ", ") {
			return nil, fmt.Errorf("label %q: want a word without commas or spaces", label)
		}
		if v.Collector == "" && len(v.Exporter) == 0 && len(v.Env) == 0 && len(v.Loadgen) == 0 {
			return nil, fmt.Errorf("%s: no collector, exporter or loadgen settings or environment", label)
		}
		var env []string
		for _, k := range slices.Sorted(maps.Keys(v.Env)) {
			env = append(env, k+"="+v.Env[k])
		}
		if v.Collector != "" {
			abs, err := filepath.Abs(v.Collector)
			if err != nil {
				return nil, err
			}
			if _, err := os.Stat(abs); err != nil {
				return nil, fmt.Errorf("%s: %w", label, err)
			}
			v.Collector = abs
		}
		key, name := "postgrescopy-redis@"+label, "postgrescopy + Redis ["+label+"]"
		if v.Direct {
			key, name = "postgrescopy@"+label, "postgrescopy direct ["+label+"]"
		}
		out = append(out, strategy{key: key, name: name,
			redis: !v.Direct, collector: v.Collector, exporter: v.Exporter, env: env, loadgen: v.Loadgen})
	}
	return out, nil
}

// mergeConfig merges src over dst: maps key by key, at every depth, anything
// else replaced. dst is changed; src's maps are copied, not shared.
func mergeConfig(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			dm, ok := dst[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dst[k] = dm
			}
			mergeConfig(dm, sm)
			continue
		}
		dst[k] = v
	}
}
