package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// A variant's exporter settings merge into the exporter section key by key:
// {"redis":{"workers":1}} must keep the run's Redis endpoint and key_prefix
// (replacing the whole section, as -exporter-config once did, would send
// the run to the default Redis key prefix, or write directly).
func TestVariantExporterSettingsMerge(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "otelcol")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	vs, err := parseVariants(`{"w1":{"exporter":{"redis":{"workers":1},"timeout":"5s"}},"old":{"collector":"` + bin + `","env":{"GOGC":"400"}}}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 || vs[0].key != "postgrescopy-redis@old" || vs[1].key != "postgrescopy-redis@w1" ||
		!vs[0].redis || vs[0].collector != bin || vs[1].collector != "" || len(vs[0].env) != 1 || vs[0].env[0] != "GOGC=400" {
		t.Fatalf("variants: %+v", vs)
	}
	b := &bench{url: "postgres://x", redisAddr: "127.0.0.1:1", events: 1900, loadgenConcurrency: 2,
		exporterExtra: map[string]any{"redis": map[string]any{"max_rows": 5000}}}
	b.variantExporter = vs[1].exporter
	cfg := b.collectorConfig("s", 10, 1, "pfx")
	raw, _ := json.Marshal(cfg["exporters"].(map[string]any)["postgrescopy"])
	var exp struct {
		Timeout string         `json:"timeout"`
		Redis   map[string]any `json:"redis"`
	}
	if err := json.Unmarshal(raw, &exp); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"endpoint": "127.0.0.1:1", "key_prefix": "pfx", "workers": 1.0, "max_rows": 5000.0}
	for k, v := range want {
		if exp.Redis[k] != v {
			t.Errorf("redis.%s = %v, want %v (section %v)", k, exp.Redis[k], v, exp.Redis)
		}
	}
	if exp.Timeout != "5s" {
		t.Errorf("timeout = %q", exp.Timeout)
	}
	// The next run's config is not changed by the merge.
	b.variantExporter = nil
	raw, _ = json.Marshal(b.collectorConfig("s", 10, 1, "pfx")["exporters"].(map[string]any)["postgrescopy"])
	exp.Redis = nil
	_ = json.Unmarshal(raw, &exp)
	if _, ok := exp.Redis["workers"]; ok {
		t.Errorf("a variant's setting leaked into the next run: %v", exp.Redis)
	}
	// A direct variant runs without Redis.
	vs, err = parseVariants(`{"old":{"collector":"` + bin + `","direct":true}}`)
	if err != nil || len(vs) != 1 || vs[0].key != "postgrescopy@old" || vs[0].redis || vs[0].name != "postgrescopy direct [old]" {
		t.Fatalf("direct variant: %+v, %v", vs, err)
	}
	// A variant's loadgen settings merge into the receiver's section.
	vs, err = parseVariants(`{"c2":{"direct":true,"loadgen":{"concurrency":2}}}`)
	if err != nil || len(vs) != 1 || vs[0].key != "postgrescopy@c2" {
		t.Fatalf("loadgen variant: %+v, %v", vs, err)
	}
	b.loadgenConcurrency = 64
	b.variantLoadgen = vs[0].loadgen
	if lg := b.collectorConfig("s", 10, 1, "")["receivers"].(map[string]any)["loadgen"].(map[string]any); lg["concurrency"] != 2.0 || lg["users"] != 10 {
		t.Errorf("loadgen section with the variant: %v", lg)
	}
	b.variantLoadgen = nil
	if lg := b.collectorConfig("s", 10, 1, "")["receivers"].(map[string]any)["loadgen"].(map[string]any); lg["concurrency"] != 64 {
		t.Errorf("loadgen section after the variant: %v", lg)
	}
	for _, bad := range []string{`{"x":{}}`, `{"a b":{"exporter":{"x":1}}}`, `{"x":{"collector":"/nonexistent/otelcol"}}`, `{"x":{"exporters":{}}}`} {
		if _, err := parseVariants(bad); err == nil {
			t.Errorf("parseVariants(%s) accepted", bad)
		}
	}
}

// TestAppStrategiesStoreWhatCopyStores: the INSERT and CopyFrom strategies
// (an application holding its telemetry as Go values, each attribute map
// whole) store the rows a \copy of the dataset stores, as the views read
// them, with no long strings' column of their own.
func TestAppStrategiesStoreWhatCopyStores(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("needs psql")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	viaCopy, viaApp := preparedSchema(ctx, t, pool), preparedSchema(ctx, t, pool)
	b := &bench{url: pgtest.URL(), pool: pool, psql: psql, progress: newProgress(1)}
	ds, err := buildDataset(t.TempDir(), 2, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.loadDataset(ctx, viaCopy, ds); err != nil {
		t.Fatal(err)
	}
	var long int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(viaCopy, "spans_rows")+" WHERE span_attributes_long IS NOT NULL").Scan(&long); err != nil || long == 0 {
		t.Fatalf("the dataset has no spans with long strings apart (%d, %v)", long, err)
	}
	for _, s := range strategies() {
		if s.app == nil || s.app.viaPgbouncer || s.app.batch == 1 {
			continue
		}
		t.Run(s.key, func(t *testing.T) {
			if _, _, err := b.runApp(ctx, *s.app, ds, viaApp); err != nil {
				t.Fatal(err)
			}
			for _, v := range []string{"spans", "logs", "metrics_gauge"} {
				if !sameRows(ctx, t, pool, viaCopy, viaApp, v) {
					t.Fatalf("%s: %s reads differently from the \\copy's", s.key, v)
				}
			}
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(viaApp, "spans_rows")+" WHERE span_attributes_long IS NOT NULL").Scan(&long); err != nil || long != 0 {
				t.Fatalf("%s stored %d spans with long strings apart (%v): an application writes its map whole", s.key, long, err)
			}
		})
	}
}

// TestIntoPartitionsCuts: the ceiling's \copy of a file whose spans fall in
// two partitions goes into each, in a file a partition holding its rows, as
// the exporter's writer splits a batch, and the rows between them through
// spans_rows; together they hold the file's rows, and loaded they land
// where their files say.
func TestIntoPartitionsCuts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	psql, err := exec.LookPath("psql")
	if err != nil {
		t.Skip("needs psql")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	if err == nil {
		err = schema.AddColumns(ctx, conn.Conn(), name, schema.PromotedColumns(benchLayout))
	}
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{url: pgtest.URL(), pool: pool, psql: psql, progress: newProgress(1)}
	ds, err := buildDataset(t.TempDir(), 2, 300, 1)
	if err != nil {
		t.Fatal(err)
	}
	f := copyFile{table: tables.IdxSpans, path: ds.files[0][tables.IdxSpans]}
	whole, err := os.ReadFile(f.path)
	if err != nil {
		t.Fatal(err)
	}
	fields := len(benchLayout.Table(tables.IdxSpans).Columns)
	lo, hi, ok := pgcopy.FirstInt64Range(whole[len(copyHeader):len(whole)-len(copyTrailer)], fields)
	if !ok || hi-lo < 4 {
		t.Fatalf("the spans' start times: %d to %d, %v", lo, hi, ok)
	}
	// Two partitions with a gap between them that the default one holds:
	// the first quarter of the spans' range, and from its middle on.
	at := func(us int64) string {
		return pgEpoch.Add(time.Duration(us) * time.Microsecond).UTC().Format("2006-01-02 15:04:05.999999Z07:00")
	}
	q1, q2 := lo+(hi-lo)/4, lo+(hi-lo)/2
	for _, p := range []struct{ name, from, to string }{{"spans_a", at(lo - 1), at(q1)}, {"spans_b", at(q2), at(hi + 1)}} {
		if _, err := pool.Exec(ctx, fmt.Sprintf("CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')",
			schema.Qualified(name, p.name), schema.Qualified(name, "spans_rows"), p.from, p.to)); err != nil {
			t.Fatal(err)
		}
	}
	groups, err := b.intoPartitions(ctx, name, [][]copyFile{{f}})
	if err != nil {
		t.Fatal(err)
	}
	pieces := groups[0]
	if len(pieces) != 3 || pieces[0].into != "spans_a" || pieces[1].into != "" || pieces[2].into != "spans_b" {
		t.Fatalf("the spans were not cut by partition: %+v", pieces)
	}
	var got []byte
	want := map[string]int{}
	for _, p := range pieces {
		data, err := os.ReadFile(p.path)
		if err != nil {
			t.Fatal(err)
		}
		body := data[len(copyHeader) : len(data)-len(copyTrailer)]
		n, err := pgcopy.CheckTuples(body, fields)
		if err != nil {
			t.Fatal(err)
		}
		want[p.into] += n
		got = append(got, body...)
	}
	if len(got) != len(whole)-len(copyHeader)-len(copyTrailer) {
		t.Fatalf("the pieces hold %d bytes of the file's %d", len(got), len(whole))
	}
	if err := b.psqlCopy(ctx, name, pieces); err != nil {
		t.Fatal(err)
	}
	want["spans_default"] = want[""]
	delete(want, "")
	for part, n := range want {
		var in int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(name, part)).Scan(&in); err != nil || in != n {
			t.Fatalf("%s holds %d rows, its file %d (%v)", part, in, n, err)
		}
	}
}
