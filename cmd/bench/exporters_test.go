package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestExporterConfigs: the otlp runs send to the receiving collector without
// TLS, the compression variant only changes compression, and every signal's
// pipeline goes from the loadgen receiver to that one exporter.
func TestExporterConfigs(t *testing.T) {
	b := &bench{url: "postgres://x", redisAddr: "127.0.0.1:1", events: 1900, loadgenConcurrency: 2, seed: 7}
	for _, k := range exporterKinds {
		if k.otlp == nil && !k.nop {
			continue
		}
		raw, err := json.Marshal(b.exporterConfig(k, 10, "127.0.0.1:4999"))
		if err != nil {
			t.Fatal(err)
		}
		var cfg struct {
			Receivers map[string]map[string]any `json:"receivers"`
			Exporters map[string]map[string]any `json:"exporters"`
			Service   struct {
				Pipelines map[string]struct {
					Receivers []string `json:"receivers"`
					Exporters []string `json:"exporters"`
				} `json:"pipelines"`
			} `json:"service"`
		}
		if err := json.Unmarshal(raw, &cfg); err != nil {
			t.Fatal(err)
		}
		want := "nop"
		if k.otlp != nil {
			want = "otlp"
			e := cfg.Exporters["otlp"]
			if e["endpoint"] != "127.0.0.1:4999" || e["tls"].(map[string]any)["insecure"] != true {
				t.Errorf("%s: otlp section %v", k.key, e)
			}
			if c, ok := e["compression"]; (k.key == "otlp-none") != ok || (ok && c != "none") {
				t.Errorf("%s: compression %v", k.key, c)
			}
		}
		if len(cfg.Exporters) != 1 || cfg.Exporters[want] == nil {
			t.Errorf("%s: exporters %v", k.key, cfg.Exporters)
		}
		if cfg.Receivers["loadgen"]["users"] != 10.0 || cfg.Receivers["loadgen"]["seed"] != 7.0 {
			t.Errorf("%s: loadgen %v", k.key, cfg.Receivers["loadgen"])
		}
		if len(cfg.Service.Pipelines) != 3 {
			t.Errorf("%s: pipelines %v", k.key, cfg.Service.Pipelines)
		}
		for sig, p := range cfg.Service.Pipelines {
			if len(p.Receivers) != 1 || p.Receivers[0] != "loadgen" || len(p.Exporters) != 1 || p.Exporters[0] != want {
				t.Errorf("%s: pipeline %s %+v", k.key, sig, p)
			}
		}
	}
}

// TestExporterCostSubtractsNop: each run's exporter cost is its collector
// CPU less the nop run's; a failed run gets none, and the table says so.
func TestExporterCostSubtractsNop(t *testing.T) {
	rs := []exporterResult{
		{Key: "postgrescopy-redis", Name: "postgrescopy + Redis", Users: 10, Items: 19000, Status: "ok", CollectorUsPerItem: 9.5, PeakRSSMiB: 80},
		{Key: "otlp", Name: "otlp", Users: 10, Items: 19000, Status: "failed", Note: "boom"},
		{Key: "nop", Name: "nop", Users: 10, Items: 19000, Status: "ok", CollectorUsPerItem: 6.0, PeakRSSMiB: 50},
	}
	subtractNop(rs)
	if rs[0].ExporterUsPerItem != 3.5 || rs[1].ExporterUsPerItem != 0 || rs[2].ExporterUsPerItem != 0 {
		t.Fatalf("exporter costs: %+v", rs)
	}
	md := exportersMarkdown(rs)
	for _, want := range []string{"| postgrescopy + Redis | 10 | 19,000 |", "| 9.5 | 3.5 |", "**failed**: boom", "0 (the baseline)"} {
		if !strings.Contains(md, want) {
			t.Errorf("the table lacks %q:\n%s", want, md)
		}
	}
}
