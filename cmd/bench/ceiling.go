package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// copyCommand is the psql meta-command that loads one dataset file.
func copyCommand(schemaName string, f copyFile) string {
	t := benchLayout.Table(f.table)
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = pgx.Identifier{c}.Sanitize()
	}
	into := t.Store
	if f.into != "" {
		into = f.into
	}
	return `\copy ` + schema.Qualified(schemaName, into) + " (" + strings.Join(cols, ", ") +
		") FROM '" + f.path + "' WITH (FORMAT binary)"
}

// copyFile is one dataset file and the table it belongs to.
type copyFile struct {
	table int
	path  string
	into  string // the partition of the table that holds every row, when one does
}

// intoPartitions sets each file's partition: the one of its table that
// holds all its rows, when there is one; a file whose rows fall in several
// is cut into one file a partition. The exporter's writer copies a batch so
// (pgwrite's routing), which spares PostgreSQL the tuple routing and keeps
// multi-insert under the capture trigger of spans_rows; the ceiling does the
// same, so that it stays the best \copy PostgreSQL can do. What was found is
// kept per schema and file.
func (b *bench) intoPartitions(ctx context.Context, schemaName string, groups [][]copyFile) ([][]copyFile, error) {
	b.partsMu.Lock()
	defer b.partsMu.Unlock()
	if b.parts == nil {
		b.parts = map[string][]copyFile{}
	}
	out := make([][]copyFile, len(groups))
	for g, files := range groups {
		for _, f := range files {
			key := schemaName + "\x00" + f.path
			into, ok := b.parts[key]
			if !ok {
				data, err := os.ReadFile(f.path)
				if err != nil {
					return nil, err
				}
				t := benchLayout.Table(f.table)
				name, err := b.partitionHolding(ctx, schemaName, t.Store, len(t.Columns), data)
				if err != nil {
					return nil, err
				}
				into = []copyFile{{table: f.table, path: f.path, into: name}}
				if name == "" {
					if into, err = b.partitionPieces(ctx, schemaName, f, data); err != nil {
						return nil, err
					}
				}
				b.parts[key] = into
			}
			out[g] = append(out[g], into...)
		}
	}
	return out, nil
}

// partitionPieces cuts f (its contents data) into one file a partition of
// its table that its rows fall in, next to it, in their order; rows that no
// partition holds go into one more, through the table. f itself when its
// rows have no range or its table no partition.
func (b *bench) partitionPieces(ctx context.Context, schemaName string, f copyFile, data []byte) ([]copyFile, error) {
	t := benchLayout.Table(f.table)
	whole := []copyFile{f}
	if len(data) < len(pgcopy.Header())+len(pgcopy.Trailer()) {
		return whole, nil
	}
	rows, err := b.pool.Query(ctx, `SELECT c.relname, m[1]::timestamptz, m[2]::timestamptz FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), '^FOR VALUES FROM \(''([^'']+)''\) TO \(''([^'']+)''\)$') m
		WHERE i.inhparent = $1::regclass AND c.relkind = 'r' AND m[1] !~ 'infinity' AND m[2] !~ 'infinity'`,
		schema.Qualified(schemaName, t.Store))
	if err != nil {
		return nil, err
	}
	type part struct {
		name   string
		lo, hi int64
	}
	var parts []part
	var bounds []int64
	var name string
	var lo, hi time.Time
	if _, err := pgx.ForEachRow(rows, []any{&name, &lo, &hi}, func() error {
		p := part{name, pgcopy.TimestamptzMicros(lo), pgcopy.TimestamptzMicros(hi)}
		parts, bounds = append(parts, p), append(bounds, p.lo, p.hi)
		return nil
	}); err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return whole, nil
	}
	slices.Sort(bounds)
	tuples := data[len(pgcopy.Header()) : len(data)-len(pgcopy.Trailer())]
	pieces, ok := pgcopy.SplitFirstInt64(tuples, len(t.Columns), slices.Compact(bounds))
	if !ok {
		return whole, nil
	}
	var out []copyFile
	for k, p := range pieces {
		if p.Rows == 0 {
			continue
		}
		c := copyFile{table: f.table, path: f.path + ".part-" + strconv.Itoa(k)}
		for _, pt := range parts {
			if pt.lo <= p.Lo && p.Hi < pt.hi {
				c.into = pt.name
			}
		}
		piece := slices.Concat(pgcopy.Header(), p.Tuples, pgcopy.Trailer())
		if err := os.WriteFile(c.path, piece, 0o600); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// exporterWorkMem is the exporter's default work_mem (its work_mem key),
// which its write transactions set: the ceiling's \copy sessions set it too,
// and so does rowcost's variant of the exporter as it is, so that both
// spare the AI spend capture's transition table the same spill.
const exporterWorkMem = pgwrite.DefaultWorkMem

// psqlCopy runs one psql session that \copies the given files in turn, with
// the exporter's work_mem.
func (b *bench) psqlCopy(ctx context.Context, schemaName string, files []copyFile) error {
	args := []string{"-X", "-q", "-v", "ON_ERROR_STOP=1", "-d", b.url, "-c", "SET work_mem = '" + exporterWorkMem + "'"}
	for _, f := range files {
		args = append(args, "-c", copyCommand(schemaName, f))
	}
	cmd := exec.CommandContext(ctx, b.psql, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("psql \\copy: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// wholeFiles splits the dataset's files over n psql sessions: with one, a
// session loads both halves of every table; with two, each loads one half.
func wholeFiles(ds *dataset, n int) [][]copyFile {
	out := make([][]copyFile, n)
	for h := range halves {
		for t := range numTables {
			if p := ds.files[h][t]; p != "" {
				out[h%n] = append(out[h%n], copyFile{table: t, path: p})
			}
		}
	}
	return out
}

// streamFiles is wholeFiles with each spans file in COPYs of at most
// -ceiling-chunk-rows rows (0: whole), the exporter's flush size by
// default: the AI spend capture trigger reads each COPY's spans back as one
// transition table, which a whole file's hundreds of thousands of spans make
// spill to disk and sort as no flush-sized COPY does, so a whole-file \copy
// is no longer the best COPY PostgreSQL can do with the capture on.
func (b *bench) streamFiles(ds *dataset, n int) ([][]copyFile, error) {
	out := wholeFiles(ds, n)
	if b.ceilingChunk <= 0 {
		return out, nil
	}
	for g := range out {
		var files []copyFile
		for _, f := range out[g] {
			if f.table != tables.IdxSpans {
				files = append(files, f)
				continue
			}
			chunks, err := ds.chunks(f.path, b.ceilingChunk)
			if err != nil {
				return nil, err
			}
			for _, c := range chunks {
				files = append(files, copyFile{table: f.table, path: c})
			}
		}
		out[g] = files
	}
	return out, nil
}

// copyStreams loads each group of files with a psql \copy stream of its
// own, all at once, and returns how long the slowest took and the CPU the
// load cost per row of rows; the first stream's error, if any.
func (b *bench) copyStreams(ctx context.Context, schemaName string, groups [][]copyFile, rows int64) (time.Duration, *cpuPerRow, error) {
	groups, err := b.intoPartitions(ctx, schemaName, groups)
	if err != nil {
		return 0, nil, err
	}
	errs := make(chan error, len(groups))
	before := markCPU(0)
	start := time.Now()
	for _, g := range groups {
		go func() { errs <- b.psqlCopy(ctx, schemaName, g) }()
	}
	var first error
	for range groups {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	elapsed := time.Since(start)
	return elapsed, cpuBetween(before, markCPU(0), clientChildren, rows), first
}

// timeCopy empties schemaName and times loading ds with n parallel psql
// \copy streams, and what the load cost in CPU.
func (b *bench) timeCopy(ctx context.Context, schemaName string, ds *dataset, n int) (time.Duration, *cpuPerRow, error) {
	if err := b.reset(ctx, schemaName); err != nil {
		return 0, nil, err
	}
	groups, err := b.streamFiles(ds, n)
	if err != nil {
		return 0, nil, err
	}
	elapsed, cpu, err := b.copyStreams(ctx, schemaName, groups, ds.totalRows())
	if err != nil {
		return 0, nil, err
	}
	got, err := countRows(ctx, b.pool, schemaName)
	if err != nil {
		return 0, nil, err
	}
	if got != ds.totalRows() {
		return 0, nil, fmt.Errorf("\\copy loaded %d rows, the dataset has %d", got, ds.totalRows())
	}
	return elapsed, cpu, nil
}

// ceilingMeasures are the raw psql \copy runs of ds: into the exporter's
// tables with one and two streams (the better is the ceiling the strategies
// are compared with), and into UNLOGGED copies of them for reference.
func (b *bench) ceilingMeasures(ctx context.Context, ds *dataset, logged, unlogged string) []measure {
	var out []measure
	for _, v := range []struct {
		schema, label, kind string
	}{{logged, "psql \\copy", "ceiling"}, {unlogged, "psql \\copy unlogged", "reference"}} {
		for _, streams := range []int{1, 2} {
			name := fmt.Sprintf("%s, %d stream", v.label, streams)
			if streams > 1 {
				name += "s"
			}
			out = append(out, measure{name: name, run: func() result {
				d, cpu, err := b.timeCopy(ctx, v.schema, ds, streams)
				if err != nil {
					r := result{Name: name, Users: ds.users, Rows: ds.totalRows(), Bytes: ds.totalBytes(), Status: "failed", Note: err.Error()}
					r.Kind = v.kind
					return r
				}
				r := newResult(name, ds, d)
				r.Kind, r.CPU = v.kind, cpu
				return r
			}})
		}
	}
	return out
}
