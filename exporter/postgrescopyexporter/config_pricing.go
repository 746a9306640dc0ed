package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/pricing"
)

// PricingConfig is the price file of the AI spend tables (model_prices,
// gen_ai_calls, ai_spend: see docs/schema.md, AI spend).
type PricingConfig struct {
	// file is a YAML price file (see examples/prices.example.yaml), loaded
	// into model_prices at start and again whenever its content changes. A
	// malformed file fails the start with its line and reason; a later
	// malformed edit is logged and the previous prices stay. Default empty.
	File string `mapstructure:"file"`
	// reload_interval is how often the file is checked for changes. Default 10s.
	ReloadInterval time.Duration `mapstructure:"reload_interval"`
}

// CostAttributionConfig is what the AI spend rollup groups cost by, besides
// provider and model.
type CostAttributionConfig struct {
	// dimensions, each a name and the attribute keys that fill it, the first
	// present deciding: {name: team, from: ["span:team", "resource:team"]}.
	// Default none. Applied with create_schema: true.
	Dimensions []DimensionConfig `mapstructure:"dimensions"`
	// late_window is how far back each maintenance run recomputes the
	// rollup, so that spans arriving late are counted; ai_spend reads these
	// hours from the calls, so a late span counts there at once. Default 6h.
	LateWindow time.Duration `mapstructure:"late_window"`
}

// DimensionConfig is one cost attribution dimension.
type DimensionConfig struct {
	Name string   `mapstructure:"name"`
	From []string `mapstructure:"from"`
}

func defaultPricingConfig() PricingConfig { return PricingConfig{ReloadInterval: 10 * time.Second} }

func defaultCostAttributionConfig() CostAttributionConfig {
	return CostAttributionConfig{LateWindow: 6 * time.Hour}
}

// Validate parses the price file, so that a malformed one stops the
// Collector before it starts.
func (p *PricingConfig) Validate() error {
	if p.File == "" {
		return nil
	}
	var errs error
	if _, err := pricing.ParseFile(p.File); err != nil {
		errs = errors.Join(errs, fmt.Errorf("file: %w", err))
	}
	if p.ReloadInterval < time.Second {
		errs = errors.Join(errs, fmt.Errorf("reload_interval %s is under 1s", p.ReloadInterval))
	}
	return errs
}

// Validate checks the dimensions and the late window.
func (c *CostAttributionConfig) Validate() error {
	var errs error
	if c.LateWindow < time.Hour {
		errs = errors.Join(errs, fmt.Errorf("late_window %s is under 1h: the open hour is always read live, late spans need more", c.LateWindow))
	}
	if _, err := c.dimensions(); err != nil {
		errs = errors.Join(errs, err)
	}
	return errs
}

func (c *CostAttributionConfig) dimensions() ([]pricing.Dimension, error) {
	var out []pricing.Dimension
	var errs error
	seen := map[string]bool{}
	for i, d := range c.Dimensions {
		where := fmt.Sprintf("dimensions[%d]", i)
		switch {
		case d.Name == "":
			errs = errors.Join(errs, fmt.Errorf("%s: name is required", where))
		case seen[d.Name]:
			errs = errors.Join(errs, fmt.Errorf("%s: name %q is given twice", where, d.Name))
		}
		seen[d.Name] = true
		if len(d.From) == 0 {
			errs = errors.Join(errs, fmt.Errorf("%s: from needs at least one key", where))
		}
		dim := pricing.Dimension{Name: d.Name}
		for _, f := range d.From {
			scope, key, ok := strings.Cut(f, ":")
			if !ok || key == "" || (scope != "span" && scope != "resource") {
				errs = errors.Join(errs, fmt.Errorf(`%s: key %q must be "span:<key>" or "resource:<key>"`, where, f))
				continue
			}
			dim.From = append(dim.From, pricing.Source{Scope: scope, Key: key})
		}
		out = append(out, dim)
	}
	return out, errs
}
