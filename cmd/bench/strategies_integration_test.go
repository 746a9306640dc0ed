package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/schema"
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
