package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
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
	for _, bad := range []string{`{"x":{}}`, `{"a b":{"exporter":{"x":1}}}`, `{"x":{"collector":"/nonexistent/otelcol"}}`, `{"x":{"exporters":{}}}`} {
		if _, err := parseVariants(bad); err == nil {
			t.Errorf("parseVariants(%s) accepted", bad)
		}
	}
}
