package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/postgrescopy/postgrescopy/internal/jsonb"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// The rowcost part measures what one row costs PostgreSQL under storage
// variants of the same information: the backend's own CPU (utime + stime of
// /proc/<pid>/stat of the connection doing the COPY, so the rest of a shared
// machine does not count) and the bytes the rows take on disk (heap, TOAST,
// indexes, and the context dictionary where there is one).
//
// Every variant loads the same rows, from the dataset's binary COPY files as
// the exporter's encoder wrote them (each row referencing its context, and
// the contexts), rewritten before the clock into the variant's columns, the
// spans in the exporter's flush-sized COPYs as the ceiling loads them (one
// COPY of a whole file would make the AI spend capture's transition table
// spill as no flush does; -ceiling-chunk-rows). The
// "before" variants put each row's context back into its eight columns, as
// the schema before version 3 stored it, with the index set of then (the two
// per-service indexes included). The variants differ only in how they store
// the rows.

// rowcostVariant is one way of storing the workload's rows.
type rowcostVariant struct {
	key, name string
	// legacy stores each row's context in the row (schema version 2):
	// the eight scope and resource columns, NOT NULL where they were,
	// and no dictionary.
	legacy bool
	// align orders each table's columns by alignment, widest first, then
	// the variable-length ones: no padding between columns.
	align bool
	// dropIndexes lists indexes of indexes.sql not created ("*": none).
	dropIndexes []string
	// serviceIndexes adds the two per-service indexes of the index set
	// before schema version 4 (the legacy variants always have them).
	serviceIndexes bool
	// options is a storage clause for every leaf partition (WITH (...)).
	options string
	// storage is a storage strategy for every jsonb column (SET STORAGE).
	storage string
	// exporter loads the dataset files as they are into the schema the
	// exporter creates (migrations, promoted columns, indexes, partitions).
	exporter bool
	// noCapture disables the AI spend capture trigger of the exporter's
	// schema, to measure what the trigger costs a COPY.
	noCapture bool
	// partition copies the spans into the partition they fall in, as the
	// writer's routing does (schema 8), instead of into spans_rows.
	partition bool
	// long keeps the attribute maps' long strings apart, as the exporter
	// encodes them since schema 9 (tables.LongSuffix); every other variant
	// has them merged back into the jsonb, as schema 8 and earlier stored
	// them.
	long bool
	// workMem sets work_mem on the loading connection: the capture
	// trigger's transition table spills to disk past it.
	workMem string
	// split, when positive, stores the string values longer than split
	// bytes of the top-level attribute maps (span_attributes,
	// log_attributes) outside the jsonb, in a text[] of alternating keys and
	// values (<column>_long): PostgreSQL lexes every jsonb value a
	// character at a time, and receives a text one as it is.
	split int
	// content, when set, stores the string values of contentKeys (the
	// GenAI semantic conventions' content attributes) of the same maps in
	// a text column each instead: what a promoted column with remove: true
	// per key would do.
	content bool
}

func rowcostVariants() []rowcostVariant {
	return []rowcostVariant{
		{key: "before", name: "before: context in every row (schema 2)", legacy: true},
		{key: "after", name: "after: the exporter's schema and rows (schema 6: context dictionary, no service indexes, AI spend capture trigger)", exporter: true},
		{key: "after-partition", name: "after, spans copied into their partition (schema 8: multi-insert with the capture trigger)", exporter: true, partition: true},
		{key: "after-long", name: "after, spans copied into their partition, long attribute strings apart (schema 9, the server's work_mem)", exporter: true, partition: true, long: true},
		{key: "after-wm", name: "after, as the exporter writes: schema 9, work_mem = " + exporterWorkMem + " in its transactions", exporter: true, partition: true, long: true, workMem: exporterWorkMem},
		{key: "after-partition-wm", name: "after, spans copied into their partition, work_mem = 256MB", exporter: true, partition: true, workMem: "256MB"},
		{key: "after-nocapture", name: "after without the AI spend capture trigger (schema 4's write cost)", exporter: true, noCapture: true},
		{key: "dict", name: "context dictionary, same DDL generated"},
		{key: "before-tt", name: "before + toast_tuple_target = 8160", legacy: true, options: "toast_tuple_target = 8160"},
		{key: "before-noidx", name: "before, no query indexes", legacy: true, dropIndexes: []string{"*"}},
		{key: "main", name: "dictionary + jsonb STORAGE MAIN", storage: "MAIN"},
		{key: "before-main", name: "before + jsonb STORAGE MAIN", legacy: true, storage: "MAIN"},
		{key: "main-tt4k", name: "dictionary + jsonb STORAGE MAIN + toast_tuple_target = 4096", storage: "MAIN", options: "toast_tuple_target = 4096"},
		{key: "align", name: "dictionary + columns ordered by alignment", align: true},
		{key: "tt", name: "dictionary + toast_tuple_target = 8160", options: "toast_tuple_target = 8160"},
		{key: "tt4k", name: "dictionary + toast_tuple_target = 4096", options: "toast_tuple_target = 4096"},
		{key: "noidx", name: "dictionary, no query indexes", dropIndexes: []string{"*"}},
		{key: "dict-svc", name: "schema 3 as released: dictionary + both service indexes", serviceIndexes: true},
		{key: "no-logtrace", name: "dictionary, without logs (trace_id)", dropIndexes: []string{"logs_trace_idx"}},
		{key: "split256", name: "dictionary + attribute strings over 256 bytes in a text[]", split: 256},
		{key: "split1k", name: "dictionary + attribute strings over 1 KB in a text[]", split: 1024},
		{key: "content", name: "dictionary + the GenAI content attributes (semconv keys) in a text column each", content: true},
		{key: "split64", name: "dictionary + attribute strings over 64 bytes in a text[]", split: 64},
		{key: "no-series", name: "dictionary, without the five metrics (metric_name, service_name, time)", dropIndexes: []string{
			"metrics_gauge_series_idx", "metrics_sum_series_idx", "metrics_histogram_series_idx",
			"metrics_exponential_histogram_series_idx", "metrics_summary_series_idx"}},
	}
}

// serviceIndexes are the two indexes of the index set up to schema version
// 3 that version 4 dropped (no query of queries/ uses them): "before" is
// measured with the index set it was released with.
var serviceIndexes = [][2]string{
	{"spans_service_time_idx", "CREATE INDEX spans_service_time_idx ON {{schema}}.spans_rows USING btree (service_name, start_time)"},
	{"logs_service_severity_time_idx", `CREATE INDEX logs_service_severity_time_idx ON {{schema}}.logs_rows USING btree (service_name, severity_number, "timestamp")`},
}

// notNullContext are the context columns NOT NULL before schema version 3.
var notNullContext = []string{"resource_attributes", "scope_attributes", "resource_dropped_attributes_count", "scope_dropped_attributes_count"}

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

// variantColumns is the column list of a stored table (schema 3's) in
// variant v.
func variantColumns(cols []pgColumn, v rowcostVariant) []pgColumn {
	var out []pgColumn
	for _, c := range cols {
		if v.legacy && c.name == tables.ContextID || strings.HasSuffix(c.name, tables.LongSuffix) {
			continue // rewriteRows merges the long strings back
		}
		if v.legacy && slices.Contains(notNullContext, c.name) {
			c.notNull = true
		}
		out = append(out, c)
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
	into  string   // the partition of table copied into, when set
	setup string   // run on the connection before the COPY
	cols  []string // in COPY order
	data  []byte   // binary COPY
	rows  int64
	// copies is data as it is copied: the spans cut into COPYs of
	// -ceiling-chunk-rows rows, once, before any run.
	copies [][]byte
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
	// SpansCopyRows is the most spans one COPY loaded (0: whole files).
	SpansCopyRows int `json:"spans_copy_rows"`
	// PairedVsBefore is the median over the runs of this variant's CPU
	// divided by "before"'s of the same run, minus one: the runs are
	// interleaved, so a load that comes and goes on a shared machine
	// weighs on both sides of each ratio.
	PairedVsBefore *float64 `json:"cpu_vs_before_paired_median,omitempty"`
	Status         string   `json:"status"`
	Note           string   `json:"note,omitempty"`
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
// returns the COPY inputs made from the dataset; src is a schema the exporter
// made, whose stored tables and indexes the variants start from.
func (b *bench) rowcostSchema(ctx context.Context, name, src string, ds *dataset, v rowcostVariant) ([]rowcostInput, error) {
	q := func(s string) string { return pgx.Identifier{s}.Sanitize() }
	if _, err := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+q(name)+" CASCADE; CREATE SCHEMA "+q(name)); err != nil {
		return nil, err
	}
	b.schemas = append(b.schemas, name)
	dict, err := readContexts(ds)
	if err != nil {
		return nil, err
	}
	var ddl []string
	var inputs []rowcostInput
	if !v.legacy {
		cols, err := b.columnsOf(ctx, src, "contexts")
		if err != nil {
			return nil, err
		}
		defs := make([]string, len(cols))
		for i, c := range cols {
			defs[i] = q(c.name) + " " + c.typ
			if c.notNull {
				defs[i] += " NOT NULL"
			}
		}
		defs[0] += " PRIMARY KEY"
		tq := schema.Qualified(name, "contexts")
		ddl = append(ddl, "CREATE TABLE "+tq+" ("+strings.Join(defs, ", ")+")")
		for _, c := range cols {
			if c.len < 0 {
				ddl = append(ddl, "ALTER TABLE "+tq+" ALTER COLUMN "+q(c.name)+" SET COMPRESSION lz4")
			}
		}
		in, err := rewriteRows(ds, tables.IdxContexts, benchLayout.Table(tables.IdxContexts).Columns, nil, rowcostVariant{})
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in)
	}
	lo := time.Now().UTC().Truncate(24*time.Hour).AddDate(0, 0, -2)
	hi := lo.AddDate(0, 0, 6)
	for i := range tables.NumSignalTables {
		t := tables.Tables[i]
		srcCols, err := b.columnsOf(ctx, src, t.Store)
		if err != nil {
			return nil, err
		}
		cols := variantColumns(srcCols, v)
		for _, c := range splitColumns {
			if !slices.ContainsFunc(cols, func(p pgColumn) bool { return p.name == c }) {
				continue
			}
			if v.split > 0 {
				cols = append(cols, pgColumn{name: c + tables.LongSuffix, typ: "text[]", len: -1, align: "i"})
			}
			if v.content {
				for _, k := range contentKeys {
					cols = append(cols, pgColumn{name: contentColumn(k), typ: "text", len: -1, align: "i"})
				}
			}
		}
		defs := make([]string, len(cols))
		names := make([]string, len(cols))
		for i, c := range cols {
			defs[i] = q(c.name) + " " + c.typ
			if c.notNull {
				defs[i] += " NOT NULL"
			}
			names[i] = c.name
		}
		tq := schema.Qualified(name, t.Store)
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
			if c.typ == "jsonb" && v.storage != "" {
				ddl = append(ddl, "ALTER TABLE "+tq+" ALTER COLUMN "+q(c.name)+" SET STORAGE "+v.storage)
			}
		}
		ddl = append(ddl,
			fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')%s",
				schema.Qualified(name, t.Name+"_p"), tq, lo.Format(time.RFC3339), hi.Format(time.RFC3339), with),
			"CREATE TABLE "+schema.Qualified(name, t.Name+"_default")+" PARTITION OF "+tq+" DEFAULT"+with)
		var ctxs map[string][][]byte
		if v.legacy {
			ctxs = dict
		}
		in, err := rewriteRows(ds, i, names, ctxs, v)
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, in)
	}
	// The query indexes, as the exporter made them in src, less the dropped ones.
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
	if (v.legacy || v.serviceIndexes) && !slices.Contains(v.dropIndexes, "*") {
		for _, d := range serviceIndexes {
			defs = append(defs, [2]string{d[0], strings.ReplaceAll(d[1], "{{schema}}", q(src))})
		}
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

func appendField(dst, f []byte) []byte {
	if f == nil {
		return binary.BigEndian.AppendUint32(dst, 0xFFFFFFFF)
	}
	return append(binary.BigEndian.AppendUint32(dst, uint32(len(f))), f...)
}

// readContexts reads the dataset's dictionary: each context's eight
// fields by its id.
func readContexts(ds *dataset) (map[string][][]byte, error) {
	out := map[string][][]byte{}
	for h := range halves {
		path := ds.files[h][tables.IdxContexts]
		if path == "" {
			continue
		}
		r, err := openCopyFile(path)
		if err != nil {
			return nil, err
		}
		for {
			f, err := r.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				r.Close()
				return nil, err
			}
			vals := make([][]byte, len(f)-1)
			for i, v := range f[1:] {
				if v != nil {
					vals[i] = slices.Clone(v)
				}
			}
			out[string(f[0])] = vals
		}
		r.Close()
	}
	return out, nil
}

// rewriteRows reads table t's rows from the dataset files and writes them
// with the columns names: a column the exporter's layout has is copied, a
// context column is its context's field when ctxs is given (the legacy
// layout) and NULL otherwise (schema 3 keeps them, NULL, for older rows).
func rewriteRows(ds *dataset, t int, names []string, ctxs map[string][][]byte, v rowcostVariant) (rowcostInput, error) {
	lt := benchLayout.Table(t)
	pos := map[string]int{}
	for i, c := range lt.Columns {
		pos[c] = i
	}
	idPos := pos[tables.ContextID]
	longs := longColumns(lt)
	out := rowcostInput{table: lt.Store, cols: names}
	buf := slices.Clone(copyHeader)
	for h := range halves {
		path := ds.files[h][t]
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
			if err := mergeLongFields(fields, longs); err != nil {
				r.Close()
				return out, fmt.Errorf("%s: %w", lt.Name, err)
			}
			var ctx [][]byte
			if ctxs != nil {
				if ctx = ctxs[string(fields[idPos])]; ctx == nil {
					r.Close()
					return out, fmt.Errorf("%s: a row references a context the dataset lacks", lt.Name)
				}
			}
			for _, c := range splitColumns {
				p, ok := pos[c]
				if !ok {
					continue
				}
				if v.split > 0 {
					var long []byte
					if fields[p], long, err = splitLong(fields[p], v.split); err != nil {
						r.Close()
						return out, fmt.Errorf("%s.%s: %w", lt.Name, c, err)
					}
					pos[c+tables.LongSuffix] = len(fields)
					fields = append(slices.Clip(fields), long)
				}
				if v.content {
					var vals [][]byte
					if fields[p], vals, err = splitKeys(fields[p], contentKeys); err != nil {
						r.Close()
						return out, fmt.Errorf("%s.%s: %w", lt.Name, c, err)
					}
					for j, k := range contentKeys {
						pos[contentColumn(k)] = len(fields)
						fields = append(slices.Clip(fields), vals[j])
					}
				}
			}
			buf = binary.BigEndian.AppendUint16(buf, uint16(len(names)))
			for _, n := range names {
				if p, ok := pos[n]; ok {
					buf = appendField(buf, fields[p])
				} else if k := slices.Index(tables.ContextColumns, n); k >= 0 && ctx != nil {
					buf = appendField(buf, ctx[k])
				} else {
					buf = appendField(buf, nil)
				}
			}
			out.rows++
		}
		r.Close()
	}
	out.data = append(buf, copyTrailer...)
	return out, nil
}

// splitColumns are the attribute maps the split variants take long strings
// out of; each gets a text[] column named with tables.LongSuffix.
var splitColumns = []string{"span_attributes", "log_attributes"}

// longColumns pairs each attribute map's jsonb column of t with its long
// strings' column: positions {jsonb, text[]}.
func longColumns(t *tables.Table) [][2]int {
	var out [][2]int
	for j, c := range t.Columns {
		if k := slices.Index(t.Columns, c+tables.LongSuffix); k >= 0 && t.Kinds[j] == tables.KindJSONB {
			out = append(out, [2]int{j, k})
		}
	}
	return out
}

// mergeLongFields puts a row's long strings back into their attribute
// map's jsonb, the keys in jsonb's order as the encoder writes them, and
// leaves their column NULL: the row as schema 8 stored it.
func mergeLongFields(fields [][]byte, longs [][2]int) error {
	for _, l := range longs {
		doc, long := fields[l[0]], fields[l[1]]
		if long == nil {
			continue
		}
		pairs, ok := pgcopy.TextArrayValues(long)
		if !ok {
			return errors.New("malformed long strings' text[]")
		}
		if len(doc) < 2 || doc[0] != 1 || len(pairs)%2 != 0 {
			return errors.New("long strings without their jsonb")
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(doc[1:], &m); err != nil {
			return err
		}
		for i := 0; i < len(pairs); i += 2 {
			m[pairs[i]] = json.RawMessage(jsonb.AppendString(nil, pairs[i+1]))
		}
		keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
			if len(a) != len(b) {
				return len(a) - len(b)
			}
			return strings.Compare(a, b)
		})
		out := []byte{1, '{'}
		for i, k := range keys {
			if i > 0 {
				out = append(out, ',')
			}
			out = append(jsonb.AppendString(out, k), ':')
			out = append(out, m[k]...)
		}
		fields[l[0]], fields[l[1]] = append(out, '}'), nil
	}
	return nil
}

// mergeLongData is mergeLongFields over every row of a binary COPY file of
// table t.
func mergeLongData(data []byte, t *tables.Table) ([]byte, error) {
	longs := longColumns(t)
	if len(longs) == 0 {
		return data, nil
	}
	body := data[len(copyHeader) : len(data)-len(copyTrailer)]
	out := slices.Clone(copyHeader)
	var rowErr error
	err := pgcopy.EachRow(body, len(t.Columns), func(fields [][]byte) {
		if rowErr != nil {
			return
		}
		fields = slices.Clone(fields)
		if rowErr = mergeLongFields(fields, longs); rowErr != nil {
			return
		}
		out = binary.BigEndian.AppendUint16(out, uint16(len(fields)))
		for _, f := range fields {
			out = appendField(out, f)
		}
	})
	if err = errors.Join(err, rowErr); err != nil {
		return nil, fmt.Errorf("%s: %w", t.Name, err)
	}
	return append(out, copyTrailer...), nil
}

// splitLong takes the top-level string values longer than limit bytes out of
// a binary COPY jsonb field (version byte 1, then JSON text): it returns the
// object without them and a binary text[] of their alternating keys and
// values (nil when there are none), which jsonb_object() turns back into
// the same pairs.
func splitLong(field []byte, limit int) ([]byte, []byte, error) {
	if len(field) < 2 || field[0] != 1 || len(field) <= limit {
		return field, nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(field[1:], &m); err != nil {
		return nil, nil, err
	}
	var pairs []string
	keep := []byte{1, '{'}
	for k, raw := range m {
		if len(raw) > limit && raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, nil, err
			}
			if len(s) > limit {
				pairs = append(pairs, k, s)
				continue
			}
		}
		if len(keep) > 2 {
			keep = append(keep, ',')
		}
		kq, _ := json.Marshal(k)
		keep = append(append(append(keep, kq...), ':'), raw...)
	}
	if pairs == nil {
		return field, nil, nil
	}
	keep = append(keep, '}')
	return keep, textArray(pairs), nil
}

// contentKeys are the GenAI semantic conventions' content attributes: the
// long strings of a GenAI span or event.
var contentKeys = []string{"gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions",
	"gen_ai.tool.definitions", "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"}

// contentColumn is the text column of a content key.
func contentColumn(key string) string { return strings.ReplaceAll(key, ".", "_") }

// splitKeys takes the string values of keys out of a binary COPY jsonb field:
// it returns the object without them and each key's value as a binary COPY
// text field (nil where the key is absent or not a string).
func splitKeys(field []byte, keys []string) ([]byte, [][]byte, error) {
	vals := make([][]byte, len(keys))
	if len(field) < 2 || field[0] != 1 {
		return field, vals, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(field[1:], &m); err != nil {
		return nil, nil, err
	}
	found := false
	keep := []byte{1, '{'}
	for k, raw := range m {
		if j := slices.Index(keys, k); j >= 0 && raw[0] == '"' {
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return nil, nil, err
			}
			vals[j], found = []byte(s), true
			continue
		}
		if len(keep) > 2 {
			keep = append(keep, ',')
		}
		kq, _ := json.Marshal(k)
		keep = append(append(append(keep, kq...), ':'), raw...)
	}
	if !found {
		return field, vals, nil
	}
	return append(keep, '}'), vals, nil
}

// textArray is the binary COPY form of a one-dimensional text[].
func textArray(elems []string) []byte {
	const textOID = 25
	b := binary.BigEndian.AppendUint32(nil, 1) // dimensions
	b = binary.BigEndian.AppendUint32(b, 0)    // no NULLs
	b = binary.BigEndian.AppendUint32(b, textOID)
	b = binary.BigEndian.AppendUint32(b, uint32(len(elems)))
	b = binary.BigEndian.AppendUint32(b, 1) // lower bound
	for _, e := range elems {
		b = binary.BigEndian.AppendUint32(b, uint32(len(e)))
		b = append(b, e...)
	}
	return b
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
	for try := 0; err != nil && try < 30 && ctx.Err() == nil; try++ {
		// A shared server may be out of connections for a moment.
		time.Sleep(time.Second)
		conn, err = pgx.Connect(ctx, b.url)
	}
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
		if in.setup != "" {
			if _, err := conn.Exec(ctx, in.setup); err != nil {
				return nil, err
			}
		}
		into := in.table
		if in.into != "" {
			into = in.into
		}
		for _, data := range in.copies {
			if _, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(data),
				"COPY "+schema.Qualified(schemaName, into)+" ("+strings.Join(cols, ", ")+") FROM STDIN (FORMAT binary)"); err != nil {
				return nil, fmt.Errorf("copy %s: %w", in.table, err)
			}
		}
		after, err := backendCPU(ctx, conn)
		if err != nil {
			return nil, err
		}
		out[in.table] += after - before
	}
	return out, nil
}

// copyChunks cuts a binary COPY stream of rows of fields fields into
// streams of at most n rows each, in order (n <= 0: the stream whole), as
// the exporter's flushes and the ceiling's \copy (streamFiles) send spans.
func copyChunks(data []byte, fields, n int) ([][]byte, error) {
	if n <= 0 {
		return [][]byte{data}, nil
	}
	r, err := newCopyReader(bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	var out [][]byte
	err = cutRows(r, fields, n, func(chunk []byte) error {
		out = append(out, slices.Clone(chunk))
		return nil
	})
	return out, err
}

// partitionHolding names the partition of table that holds every row of
// data (a binary COPY stream of rows of fields columns) by its first
// column, the time; "" when none does.
func (b *bench) partitionHolding(ctx context.Context, schemaName, table string, fields int, data []byte) (string, error) {
	if len(data) < len(pgcopy.Header())+len(pgcopy.Trailer()) {
		return "", nil
	}
	tuples := data[len(pgcopy.Header()) : len(data)-len(pgcopy.Trailer())]
	lo, hi, ok := pgcopy.FirstInt64Range(tuples, fields)
	if !ok {
		return "", nil
	}
	var name string
	err := b.pool.QueryRow(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)') m
		WHERE i.inhparent = $1::regclass AND c.relkind = 'r' AND m[1]::timestamptz <= $2 AND $3 < m[2]::timestamptz`,
		schema.Qualified(schemaName, table), pgEpoch.Add(time.Duration(lo)*time.Microsecond),
		pgEpoch.Add(time.Duration(hi)*time.Microsecond)).Scan(&name)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	return name, err
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
		cpu    []time.Duration // every run's, in run order
	}
	var ps []*prepared
	for i, v := range rowcostVariants() {
		if len(keys) > 0 && !slices.Contains(keys, v.key) {
			continue
		}
		p := &prepared{v: v}
		if v.exporter {
			if p.schema, err = b.newSchema(ctx, "rowcost_exporter_"+strconv.Itoa(i)); err != nil {
				return nil, err
			}
			if v.noCapture {
				if err := disableCapture(ctx, b.pool, p.schema); err != nil {
					return nil, fmt.Errorf("variant %s: %w", v.key, err)
				}
			}
			for _, f := range wholeFiles(ds, 1)[0] {
				data, err := os.ReadFile(f.path)
				if err != nil {
					return nil, err
				}
				t := benchLayout.Table(f.table)
				if !v.long {
					if data, err = mergeLongData(data, t); err != nil {
						return nil, fmt.Errorf("variant %s: %w", v.key, err)
					}
				}
				in := rowcostInput{table: t.Store, cols: t.Columns, data: data}
				if v.workMem != "" {
					in.setup = "SET work_mem = " + pgx.Identifier{v.workMem}.Sanitize()
				}
				if v.partition && f.table == tables.IdxSpans {
					if in.into, err = b.partitionHolding(ctx, p.schema, in.table, len(in.cols), in.data); err != nil || in.into == "" {
						return nil, fmt.Errorf("variant %s: no one partition holds the spans: %v", v.key, err)
					}
				}
				p.inputs = append(p.inputs, in)
			}
		} else {
			p.schema = b.prefix + "_rowcost_" + strconv.Itoa(i)
			if p.inputs, err = b.rowcostSchema(ctx, p.schema, src, ds, v); err != nil {
				return nil, fmt.Errorf("variant %s: %w", v.key, err)
			}
		}
		for k := range p.inputs {
			in := &p.inputs[k]
			in.copies = [][]byte{in.data}
			if in.table == benchLayout.Table(tables.IdxSpans).Store {
				if in.copies, err = copyChunks(in.data, len(in.cols), b.ceilingChunk); err != nil {
					return nil, fmt.Errorf("variant %s: %s: %w", v.key, in.table, err)
				}
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
			p.cpu = append(p.cpu, sum(cpu))
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
	var total int64 // signal rows: the dictionary's are part of their cost
	for t := range tables.NumSignalTables {
		rowsOf[tables.Tables[t].Store] = ds.rows[t]
		total += ds.rows[t]
	}
	var baseCPU []time.Duration
	for _, p := range ps {
		if p.v.key == "before" {
			baseCPU = p.cpu
		}
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
			SpansUs: us(p.best["spans_rows"], rowsOf["spans_rows"]), SpansBytes: float64(sz["spans_rows"]) / float64(rowsOf["spans_rows"]),
			LogsUs: us(p.best["logs_rows"], rowsOf["logs_rows"]), LogsBytes: float64(sz["logs_rows"]) / float64(rowsOf["logs_rows"]),
			PairedVsBefore: pairedMedian(p.cpu, baseCPU),
			SpansCopyRows:  max(b.ceilingChunk, 0),
		})
	}
	return out, nil
}

// pairedMedian is the median over the runs of cpu[i] / before[i], minus
// one; nil without a "before" variant.
func pairedMedian(cpu, before []time.Duration) *float64 {
	var rs []float64
	for i := range min(len(cpu), len(before)) {
		if before[i] > 0 {
			rs = append(rs, float64(cpu[i])/float64(before[i]))
		}
	}
	if len(rs) == 0 {
		return nil
	}
	slices.Sort(rs)
	m := rs[len(rs)/2]
	if len(rs)%2 == 0 {
		m = (rs[len(rs)/2-1] + m) / 2
	}
	m--
	return &m
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
	load := "each table's rows in one COPY"
	if len(rs) > 0 && rs[0].SpansCopyRows > 0 {
		load = fmt.Sprintf("the spans in COPYs of at most %d rows (the exporter's flush size, as the ceiling loads them; `-ceiling-chunk-rows`), the other tables' rows in one COPY each", rs[0].SpansCopyRows)
	}
	s.WriteString("## Row cost\n\nPostgreSQL backend CPU µs per row (least of the runs) and bytes per row on disk (heap + TOAST + indexes + dictionary), all tables; then spans and logs alone. Same rows in every variant, " + load + ". *Paired* is the median over the runs of the variant's CPU against before's in the same run (the runs are interleaved).\n\n")
	s.WriteString("| Variant | µs/row | bytes/row | vs before | paired CPU vs before | spans µs | spans bytes | logs µs | logs bytes |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var base *rowcostResult
	for i := range rs {
		if rs[i].Key == "before" {
			base = &rs[i]
		}
	}
	for _, r := range rs {
		vs := ""
		if base != nil {
			vs = fmt.Sprintf("%+.0f%% / %+.0f%%", 100*(r.CPUUsRow/base.CPUUsRow-1), 100*(r.BytesRow/base.BytesRow-1))
		}
		paired := ""
		if r.PairedVsBefore != nil {
			paired = fmt.Sprintf("%+.0f%%", 100**r.PairedVsBefore)
		}
		fmt.Fprintf(&s, "| %s | %.1f | %.0f | %s | %s | %.1f | %.0f | %.1f | %.0f |\n", r.Name, r.CPUUsRow, r.BytesRow, vs, paired, r.SpansUs, r.SpansBytes, r.LogsUs, r.LogsBytes)
	}
	return s.String()
}
