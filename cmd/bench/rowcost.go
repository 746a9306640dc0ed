package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// The rowcost part measures what one row costs PostgreSQL under storage
// variants of the same information: the backend's own CPU (utime + stime of
// /proc/<pid>/stat of the connection doing the COPY, so the rest of a shared
// machine does not count) and the bytes the rows take on disk (heap, TOAST,
// indexes, and the context dictionary where there is one).
//
// Every variant loads the same rows: the dataset's binary COPY files, as the
// exporter's encoder wrote them, rewritten before the clock into the
// variant's columns (fields dropped, moved, or replaced by a context id: a
// 128-bit hash of the context fields' bytes), so the variants differ only in
// how they store the rows.

// rowcostVariant is one way of storing the workload's rows.
type rowcostVariant struct {
	key, name string
	// context replaces the eight scope and resource columns of every table
	// by context_id, a reference to one row of the contexts dictionary.
	context bool
	// align orders each table's columns by alignment, widest first, then
	// the variable-length ones: no padding between columns.
	align bool
	// dropIndexes lists indexes of indexes.sql not created ("*": none).
	dropIndexes []string
	// options is a storage clause for every leaf partition (WITH (...)).
	options string
	// exporter loads the dataset files as the exporter wrote them into the
	// schema the exporter creates, instead of PostgreSQL's re-rendering.
	exporter bool
}

func rowcostVariants() []rowcostVariant {
	return []rowcostVariant{
		{key: "exporter", name: "default schema, the exporter's own rows", exporter: true},
		{key: "base", name: "default schema"},
		{key: "align", name: "columns ordered by alignment", align: true},
		{key: "tt", name: "toast_tuple_target = 8160", options: "toast_tuple_target = 8160"},
		{key: "noidx", name: "no query indexes", dropIndexes: []string{"*"}},
		{key: "no-svc", name: "without spans (service_name, start_time)", dropIndexes: []string{"spans_service_time_idx"}},
		{key: "no-trace", name: "without spans (trace_id, span_id)", dropIndexes: []string{"spans_trace_span_idx"}},
		{key: "no-logsvc", name: "without logs (service_name, severity, timestamp)", dropIndexes: []string{"logs_service_severity_time_idx"}},
		{key: "ctx", name: "context dictionary", context: true},
		{key: "ctx-align", name: "context dictionary + alignment", context: true, align: true},
		{key: "ctx-tt", name: "context dictionary + toast_tuple_target = 8160", context: true, options: "toast_tuple_target = 8160"},
		{key: "ctx-tt4k", name: "context dictionary + toast_tuple_target = 4096", context: true, options: "toast_tuple_target = 4096"},
		{key: "ctx-tt-nosvc", name: "context dictionary + toast_tuple_target = 8160, without spans (service_name, start_time)", context: true, options: "toast_tuple_target = 8160", dropIndexes: []string{"spans_service_time_idx"}},
	}
}

// contextColumnNames are the columns the context dictionary holds.
var contextColumnNames = []string{"scope_name", "scope_version", "resource_attributes", "scope_attributes",
	"resource_dropped_attributes_count", "scope_dropped_attributes_count", "resource_schema_url", "scope_schema_url"}

type pgColumn struct {
	name, typ string
	notNull   bool
	len       int    // typlen: -1 variable
	align     string // typalign: d, i, s, c
}

func (b *bench) columnsOf(ctx context.Context, schemaName, table string) ([]pgColumn, error) {
	r, err := b.pool.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull, t.typlen, t.typalign::text
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1::regclass AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
		schema.Qualified(schemaName, table))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(r, func(row pgx.CollectableRow) (pgColumn, error) {
		var c pgColumn
		var l int16
		err := row.Scan(&c.name, &c.typ, &c.notNull, &l, &c.align)
		c.len = int(l)
		return c, err
	})
}

var alignRank = map[string]int{"d": 0, "i": 1, "s": 2, "c": 3}

// variantColumns is the column list of table in variant v.
func variantColumns(cols []pgColumn, v rowcostVariant) []pgColumn {
	var out []pgColumn
	for _, c := range cols {
		if v.context && slices.Contains(contextColumnNames, c.name) {
			continue
		}
		out = append(out, c)
	}
	if v.context {
		out = append(out, pgColumn{name: "context_id", typ: "uuid", notNull: true, len: 16, align: "c"})
	}
	if v.align {
		slices.SortStableFunc(out, func(a, b pgColumn) int {
			ra, rb := alignRank[a.align], alignRank[b.align]
			if a.len < 0 {
				ra = 10
			}
			if b.len < 0 {
				rb = 10
			}
			return ra - rb
		})
	}
	return out
}

type rowcostInput struct {
	table string   // target table
	cols  []string // in COPY order
	data  []byte   // binary COPY
	rows  int64
}

type rowcostResult struct {
	Key        string  `json:"key"`
	Name       string  `json:"name"`
	Rows       int64   `json:"rows"`
	CPUUsRow   float64 `json:"postgresql_cpu_us_per_row"`
	BytesRow   float64 `json:"bytes_per_row"`
	SpansUs    float64 `json:"spans_cpu_us_per_row"`
	SpansBytes float64 `json:"spans_bytes_per_row"`
	LogsUs     float64 `json:"logs_cpu_us_per_row"`
	LogsBytes  float64 `json:"logs_bytes_per_row"`
	Status     string  `json:"status"`
	Note       string  `json:"note,omitempty"`
}

// timeCol is the partition key of each workload table.
func timeCol(t tables.Table) string {
	switch t.Name {
	case "spans":
		return "start_time"
	case "logs":
		return "timestamp"
	}
	return "time"
}

// rowcostSchema creates schema name with variant v's tables, partitioned as
// the exporter's (one partition of the dataset's days and a default one), and
// returns the COPY inputs made from src.
func (b *bench) rowcostSchema(ctx context.Context, name, src string, ds *dataset, v rowcostVariant) ([]rowcostInput, error) {
	q := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	if _, err := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q(name)+" CASCADE; CREATE SCHEMA "+q(name)); err != nil {
		return nil, err
	}
	b.schemas = append(b.schemas, name)
	var ddl []string
	var inputs []rowcostInput
	var dict *contextDict
	if v.context {
		dict = &contextDict{seen: map[[16]byte]bool{}}
		srcCols, err := b.columnsOf(ctx, src, "spans")
		if err != nil {
			return nil, err
		}
		defs := []string{"context_id uuid PRIMARY KEY"}
		for _, c := range srcCols {
			if slices.Contains(contextColumnNames, c.name) {
				d := q(c.name) + " " + c.typ
				if c.notNull {
					d += " NOT NULL"
				}
				defs = append(defs, d)
			}
		}
		ddl = append(ddl, "CREATE TABLE "+schema.Qualified(name, "contexts")+" ("+strings.Join(defs, ", ")+")")
		for _, c := range []string{"scope_name", "scope_version", "resource_attributes", "scope_attributes", "resource_schema_url", "scope_schema_url"} {
			ddl = append(ddl, "ALTER TABLE "+schema.Qualified(name, "contexts")+" ALTER COLUMN "+q(c)+" SET COMPRESSION lz4")
		}
	}
	lo := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)
	hi := lo.AddDate(0, 0, 6)
	for _, t := range tables.Tables {
		srcCols, err := b.columnsOf(ctx, src, t.Name)
		if err != nil {
			return nil, err
		}
		cols := variantColumns(srcCols, v)
		defs := make([]string, len(cols))
		names := make([]string, len(cols))
		for i, c := range cols {
			defs[i] = q(c.name) + " " + c.typ
			if c.notNull {
				defs[i] += " NOT NULL"
			}
			names[i] = c.name
		}
		tq := schema.Qualified(name, t.Name)
		ddl = append(ddl, "CREATE TABLE "+tq+" ("+strings.Join(defs, ", ")+") PARTITION BY RANGE ("+q(timeCol(t))+")")
		with := ""
		if v.options != "" {
			with = " WITH (" + v.options + ")"
		}
		// Before the partitions: they take the parent's compression when
		// created, and an ALTER of the parent does not reach existing ones.
		for _, c := range cols {
			if c.len < 0 {
				ddl = append(ddl, "ALTER TABLE "+tq+" ALTER COLUMN "+q(c.name)+" SET COMPRESSION lz4")
			}
		}
		ddl = append(ddl,
			fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')%s",
				schema.Qualified(name, t.Name+"_p"), tq, lo.Format(time.RFC3339), hi.Format(time.RFC3339), with),
			"CREATE TABLE "+schema.Qualified(name, t.Name+"_default")+" PARTITION OF "+tq+" DEFAULT"+with)
		in, err := rewriteRows(ds, t, names, dict)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in)
	}
	if v.context {
		inputs = append([]rowcostInput{dict.input()}, inputs...)
	}
	// The query indexes, as indexes.sql makes them, less the dropped ones.
	r, err := b.pool.Query(ctx, `SELECT i.relname, pg_get_indexdef(i.oid) FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
		JOIN pg_namespace n ON n.oid = t.relnamespace
		WHERE n.nspname = $1 AND t.relkind = 'p'`, src)
	if err != nil {
		return nil, err
	}
	defs, err := pgx.CollectRows(r, func(row pgx.CollectableRow) ([2]string, error) {
		var d [2]string
		err := row.Scan(&d[0], &d[1])
		return d, err
	})
	if err != nil {
		return nil, err
	}
	for _, d := range defs {
		if slices.Contains(v.dropIndexes, "*") || slices.Contains(v.dropIndexes, d[0]) {
			continue
		}
		def := strings.Replace(d[1], " ON ONLY ", " ON ", 1)
		def = strings.ReplaceAll(def, q(src)+".", q(name)+".")
		def = strings.ReplaceAll(def, src+".", q(name)+".")
		ddl = append(ddl, def)
	}
	for _, s := range ddl {
		if _, err := b.pool.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("%s: %w", s, err)
		}
	}
	return inputs, nil
}

// contextDict collects the context dictionary's rows: the first row of
// every distinct id, as the exporter would send it.
type contextDict struct {
	seen map[[16]byte]bool
	buf  bytes.Buffer
	rows int64
}

func (d *contextDict) input() rowcostInput {
	data := append(append(slices.Clone(copyHeader), d.buf.Bytes()...), copyTrailer...)
	return rowcostInput{table: "contexts", cols: append([]string{"context_id"}, contextColumnNames...), data: data, rows: d.rows}
}

func appendField(dst, f []byte) []byte {
	if f == nil {
		return binary.BigEndian.AppendUint32(dst, 0xFFFFFFFF)
	}
	return append(binary.BigEndian.AppendUint32(dst, uint32(len(f))), f...)
}

// rewriteRows reads table t's rows from the dataset files (the exporter's own
// encoding) and writes them with the columns names, computing context_id as
// a 128-bit hash of the eight context fields' bytes and adding an unseen
// context to dict.
func rewriteRows(ds *dataset, t tables.Table, names []string, dict *contextDict) (rowcostInput, error) {
	lt := benchLayout.Table(slices.Index(tableNames(), t.Name))
	pos := map[string]int{}
	for i, c := range lt.Columns {
		pos[c] = i
	}
	ctxPos := make([]int, len(contextColumnNames))
	for i, c := range contextColumnNames {
		ctxPos[i] = pos[c]
	}
	out := rowcostInput{table: t.Name, cols: names}
	buf := slices.Clone(copyHeader)
	var key []byte
	for h := range halves {
		path := ds.files[h][slices.Index(tableNames(), t.Name)]
		if path == "" {
			continue
		}
		r, err := openCopyFile(path)
		if err != nil {
			return out, err
		}
		for {
			fields, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				r.Close()
				return out, err
			}
			var id [16]byte
			if dict != nil {
				key = key[:0]
				for _, p := range ctxPos {
					key = appendField(key, fields[p])
				}
				sum := sha256.Sum256(key)
				copy(id[:], sum[:16])
				if !dict.seen[id] {
					dict.seen[id] = true
					dict.rows++
					dict.buf.Write(binary.BigEndian.AppendUint16(nil, uint16(1+len(ctxPos))))
					dict.buf.Write(appendField(nil, id[:]))
					dict.buf.Write(key)
				}
			}
			buf = binary.BigEndian.AppendUint16(buf, uint16(len(names)))
			for _, n := range names {
				if n == "context_id" {
					buf = appendField(buf, id[:])
					continue
				}
				buf = appendField(buf, fields[pos[n]])
			}
			out.rows++
		}
		r.Close()
	}
	out.data = append(buf, copyTrailer...)
	return out, nil
}

func tableNames() []string {
	n := make([]string, numTables)
	for i, t := range tables.Tables {
		n[i] = t.Name
	}
	return n
}

// backendCPU is the CPU the backend of conn used so far.
func backendCPU(ctx context.Context, conn *pgx.Conn) (time.Duration, error) {
	var pid int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		return 0, err
	}
	own, _, ok := procTimes(strconv.Itoa(pid))
	if !ok {
		return 0, fmt.Errorf("cannot read /proc/%d/stat: is PostgreSQL on this machine?", pid)
	}
	return own, nil
}

// rowcostLoad empties schemaName and loads the inputs on one connection in one
// transaction per table, returning each table's backend CPU.
func (b *bench) rowcostLoad(ctx context.Context, schemaName string, inputs []rowcostInput) (map[string]time.Duration, error) {
	if err := b.reset(ctx, schemaName); err != nil {
		return nil, err
	}
	// A new connection: its backend's counters start near zero and no
	// cached plan or relcache work from earlier runs is missing from it.
	conn, err := pgx.Connect(ctx, b.url)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	out := map[string]time.Duration{}
	for _, in := range inputs {
		before, err := backendCPU(ctx, conn)
		if err != nil {
			return nil, err
		}
		cols := make([]string, len(in.cols))
		for i, c := range in.cols {
			cols[i] = pgx.Identifier{c}.Sanitize()
		}
		if _, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(in.data),
			"COPY "+schema.Qualified(schemaName, in.table)+" ("+strings.Join(cols, ", ")+") FROM STDIN (FORMAT binary)"); err != nil {
			return nil, fmt.Errorf("copy %s: %w", in.table, err)
		}
		after, err := backendCPU(ctx, conn)
		if err != nil {
			return nil, err
		}
		out[in.table] += after - before
	}
	return out, nil
}

// relationBytes is the on-disk size of a table of schemaName: every
// partition's heap, TOAST and indexes.
func (b *bench) relationBytes(ctx context.Context, schemaName, table string) (int64, error) {
	var n int64
	err := b.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint
		FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
		WHERE ns.nspname = $1 AND c.relkind = 'r'
		  AND (c.relname = $2 OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = (quote_ident($1) || '.' || quote_ident($2))::regclass))`,
		schemaName, table).Scan(&n)
	return n, err
}

// runRowcost measures every variant on ds, each -runs times interleaved,
// keeping each variant's least CPU.
func (b *bench) runRowcost(ctx context.Context, ds *dataset, keys []string) ([]rowcostResult, error) {
	src, err := b.newSchema(ctx, "rowcost_src")
	if err != nil {
		return nil, err
	}
	type prepared struct {
		v      rowcostVariant
		schema string
		inputs []rowcostInput
		best   map[string]time.Duration
	}
	var ps []*prepared
	for i, v := range rowcostVariants() {
		if len(keys) > 0 && !slices.Contains(keys, v.key) {
			continue
		}
		p := &prepared{v: v}
		if v.exporter {
			if p.schema, err = b.newSchema(ctx, "rowcost_exporter"); err != nil {
				return nil, err
			}
			for _, f := range streamFiles(ds, 1)[0] {
				data, err := os.ReadFile(f.path)
				if err != nil {
					return nil, err
				}
				t := benchLayout.Table(f.table)
				p.inputs = append(p.inputs, rowcostInput{table: t.Name, cols: t.Columns, data: data})
			}
		} else {
			p.schema = b.prefix + "_rowcost_" + strconv.Itoa(i)
			if p.inputs, err = b.rowcostSchema(ctx, p.schema, src, ds, v); err != nil {
				return nil, fmt.Errorf("variant %s: %w", v.key, err)
			}
		}
		ps = append(ps, p)
	}
	var out []rowcostResult
	sizes := map[string]map[string]int64{}
	for run := range b.runs {
		for _, p := range ps {
			b.logf("rowcost run %d/%d: %s", run+1, b.runs, p.v.name)
			cpu, err := b.rowcostLoad(ctx, p.schema, p.inputs)
			if err != nil {
				return nil, fmt.Errorf("variant %s: %w", p.v.key, err)
			}
			if p.best == nil || sum(cpu) < sum(p.best) {
				p.best = cpu
			}
			if run == b.runs-1 {
				sz := map[string]int64{}
				for _, in := range p.inputs {
					if sz[in.table], err = b.relationBytes(ctx, p.schema, in.table); err != nil {
						return nil, err
					}
				}
				sizes[p.v.key] = sz
			}
		}
	}
	rowsOf := map[string]int64{}
	var total int64
	for t := range numTables {
		rowsOf[tables.Tables[t].Name] = ds.rows[t]
		total += ds.rows[t]
	}
	for _, p := range ps {
		sz := sizes[p.v.key]
		var bytesAll int64
		for _, n := range sz {
			bytesAll += n
		}
		us := func(d time.Duration, n int64) float64 { return float64(d.Microseconds()) / float64(n) }
		out = append(out, rowcostResult{
			Key: p.v.key, Name: p.v.name, Rows: total, Status: "ok",
			CPUUsRow: us(sum(p.best), total), BytesRow: float64(bytesAll) / float64(total),
			SpansUs: us(p.best["spans"], rowsOf["spans"]), SpansBytes: float64(sz["spans"]) / float64(rowsOf["spans"]),
			LogsUs: us(p.best["logs"], rowsOf["logs"]), LogsBytes: float64(sz["logs"]) / float64(rowsOf["logs"]),
		})
	}
	return out, nil
}

func sum(m map[string]time.Duration) time.Duration {
	var d time.Duration
	for _, v := range m {
		d += v
	}
	return d
}

func rowcostMarkdown(rs []rowcostResult) string {
	var s strings.Builder
	s.WriteString("## Row cost\n\nPostgreSQL backend CPU µs per row (least of the runs) and bytes per row on disk (heap + TOAST + indexes + dictionary), all tables; then spans and logs alone. Same rows in every variant.\n\n")
	s.WriteString("| Variant | µs/row | bytes/row | vs default | spans µs | spans bytes | logs µs | logs bytes |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var base *rowcostResult
	for i := range rs {
		if rs[i].Key == "base" {
			base = &rs[i]
		}
	}
	for _, r := range rs {
		vs := ""
		if base != nil {
			vs = fmt.Sprintf("%+.0f%% / %+.0f%%", 100*(r.CPUUsRow/base.CPUUsRow-1), 100*(r.BytesRow/base.BytesRow-1))
		}
		fmt.Fprintf(&s, "| %s | %.1f | %.0f | %s | %.1f | %.0f | %.1f | %.0f |\n", r.Name, r.CPUUsRow, r.BytesRow, vs, r.SpansUs, r.SpansBytes, r.LogsUs, r.LogsBytes)
	}
	return s.String()
}
