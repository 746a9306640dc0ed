package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/postgrescopy/postgrescopy/internal/pricing"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// TestSustainedPriceFile: the sustained part's price file parses with the
// exporter's own parser and prices, at the loadgen's list prices, every
// model under both its names and every call the generator makes.
func TestSustainedPriceFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "prices.yaml")
	n, err := writePriceFile(path)
	if err != nil {
		t.Fatal(err)
	}
	prices, err := pricing.ParseFile(path)
	if err != nil {
		t.Fatalf("the exporter refuses the price file: %v", err)
	}
	if len(prices) != n || n == 0 {
		t.Fatalf("%d rows parsed, %d written", len(prices), n)
	}
	models := loadgenreceiver.Models()
	for _, miss := range unpricedModels(prices, models) {
		t.Error(miss)
	}

	// The calls as generated, whatever Models() says: the token cost
	// query's calls (with input tokens) by provider and response model,
	// else request model, as gen_ai_calls reads them.
	gen, err := loadgenreceiver.NewGenerator(loadgenConfig(60, 200, 7, 1))
	if err != nil {
		t.Fatal(err)
	}
	byName := priceIndex(prices)
	seen := map[[2]string]bool{}
	calls := 0
	for {
		td, ok := gen.NextTraces()
		if !ok {
			break
		}
		for _, rs := range td.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, sp := range ss.Spans().All() {
					a := sp.Attributes()
					if _, ok := a.Get("gen_ai.usage.input_tokens"); !ok {
						continue
					}
					calls++
					provider, _ := a.Get("gen_ai.provider.name")
					model, ok := a.Get("gen_ai.response.model")
					if !ok {
						model, _ = a.Get("gen_ai.request.model")
					}
					k := [2]string{provider.Str(), model.Str()}
					if _, ok := byName[k]; !ok && !seen[k] {
						t.Errorf("generated calls of %s/%s have no price", k[0], k[1])
					}
					seen[k] = true
				}
			}
		}
	}
	if calls == 0 {
		t.Fatal("the generator made no calls with tokens")
	}

	// The check finds a model left out of the file.
	partial, _ := priceFile(models[1:])
	prices, err = pricing.Parse(partial)
	if err != nil {
		t.Fatal(err)
	}
	if got := unpricedModels(prices, models); len(got) == 0 {
		t.Errorf("a file without %s/%s passes the check", models[0].Provider, models[0].Request)
	}
}

// priceIndex is prices' exact rows by provider and model.
func priceIndex(prices []pricing.Price) map[[2]string]pricing.Price {
	out := map[[2]string]pricing.Price{}
	for _, p := range prices {
		if !p.Pattern {
			out[[2]string{p.Provider, p.Model}] = p
		}
	}
	return out
}

// unpricedModels says which of models' request and response names have no
// exact price at their list prices in prices.
func unpricedModels(prices []pricing.Price, models []loadgenreceiver.ModelPrice) []string {
	byName := priceIndex(prices)
	var out []string
	for _, m := range models {
		for _, name := range []string{m.Request, m.Response} {
			p, ok := byName[[2]string{m.Provider, name}]
			if !ok {
				out = append(out, m.Provider+"/"+name+": no price")
				continue
			}
			in, _ := strconv.ParseFloat(p.Input, 64)
			outp, _ := strconv.ParseFloat(p.Output, 64)
			if in != m.Input || outp != m.Output || p.Currency != "USD" {
				out = append(out, m.Provider+"/"+name+": priced "+p.Input+"/"+p.Output+" "+p.Currency+", the loadgen's list price is "+decimal(m.Input)+"/"+decimal(m.Output)+" USD")
			}
		}
	}
	return out
}

// TestSustainedPriceReport: the report says how many price rows the
// catalog held, and that it was empty when -sustained-prices was off.
func TestSustainedPriceReport(t *testing.T) {
	on := (&sustainedResult{Status: "ok", Prices: true, PriceRows: 21}).markdown()
	if !strings.Contains(on, "**Price catalog:** 21 price rows") {
		t.Errorf("a priced run's report lacks its price rows:\n%s", on)
	}
	off := (&sustainedResult{Status: "ok"}).markdown()
	if !strings.Contains(off, "**Price catalog:** empty (0 price rows") {
		t.Errorf("an unpriced run's report does not say so:\n%s", off)
	}
}
