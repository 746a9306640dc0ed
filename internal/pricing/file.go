package pricing

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Price is one row of the catalog. Prices are decimal strings per million
// tokens, kept as written so that PostgreSQL's numeric holds them exactly.
type Price struct {
	Line       int    // where it is in the file
	Provider   string // "" matches every provider
	Model      string // a model name (it and its versions), or a LIKE pattern when Pattern
	Pattern    bool
	Input      string
	Output     string
	CacheRead  string // "" falls back to Input
	CacheWrite string // "" falls back to Input
	Reasoning  string // "" falls back to Output
	Currency   string
	ValidFrom  time.Time // zero: since always
	ValidTo    time.Time // zero: for ever
}

var decimalRe = regexp.MustCompile(`^[0-9]+(\.[0-9]+)?$`)

// ParseFile reads a price file; see Parse.
func ParseFile(path string) ([]Price, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read price file: %w", err)
	}
	prices, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("price file %s: %w", path, err)
	}
	return prices, nil
}

// Parse reads a price file: a YAML document with a `prices` list, each
// entry with model, input and output (per million tokens) and optionally
// provider, cache_read, cache_write, reasoning, currency (default USD),
// valid_from and valid_to (RFC 3339 or YYYY-MM-DD, UTC). A model name
// prices that model and its versions (gpt-4o-mini prices
// gpt-4o-mini-2024-07-18: see docs/ai-spend.md); a * in model makes it a
// pattern. Every problem is reported with its line.
func Parse(b []byte) ([]Price, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("not YAML: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, errors.New("line 1: empty file: it needs a prices list")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: the file must be a mapping with a prices list", root.Line)
	}
	var list *yaml.Node
	var errs error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch k.Value {
		case "prices":
			list = v
		default:
			errs = errors.Join(errs, fmt.Errorf("line %d: unknown key %q (want prices)", k.Line, k.Value))
		}
	}
	if list == nil {
		return nil, errors.Join(errs, fmt.Errorf("line %d: no prices list", root.Line))
	}
	if list.Kind != yaml.SequenceNode {
		return nil, errors.Join(errs, fmt.Errorf("line %d: prices must be a list", list.Line))
	}
	var out []Price
	for _, n := range list.Content {
		p, err := parsePrice(n)
		if err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		for _, q := range out {
			if overlaps(p, q) {
				errs = errors.Join(errs, fmt.Errorf("line %d: %s overlaps the price at line %d for the same model and provider: end one where the other starts", p.Line, p.name(), q.Line))
			}
		}
		out = append(out, p)
	}
	if errs != nil {
		return nil, errs
	}
	return out, nil
}

func (p Price) name() string {
	if p.Provider == "" {
		return p.Model
	}
	return p.Provider + "/" + p.Model
}

func overlaps(a, b Price) bool {
	if a.Provider != b.Provider || a.Model != b.Model || a.Pattern != b.Pattern {
		return false
	}
	// [from, to) ranges, a zero from or to being open: they overlap when
	// each starts before the other ends.
	startsBefore := func(from, to time.Time) bool { return from.IsZero() || to.IsZero() || from.Before(to) }
	return startsBefore(a.ValidFrom, b.ValidTo) && startsBefore(b.ValidFrom, a.ValidTo)
}

func parsePrice(n *yaml.Node) (Price, error) {
	p := Price{Line: n.Line, Currency: "USD"}
	if n.Kind != yaml.MappingNode {
		return p, fmt.Errorf("line %d: a price must be a mapping (model, input, output...)", n.Line)
	}
	var errs error
	bad := func(k *yaml.Node, format string, a ...any) {
		errs = errors.Join(errs, fmt.Errorf("line %d: %s: %s", k.Line, k.Value, fmt.Sprintf(format, a...)))
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if seen[k.Value] {
			bad(k, "given twice")
			continue
		}
		seen[k.Value] = true
		if v.Kind != yaml.ScalarNode {
			bad(k, "must be a single value")
			continue
		}
		val := strings.TrimSpace(v.Value)
		if v.Tag == "!!null" {
			val = ""
		}
		number := func(dst *string, required bool) {
			switch {
			case val == "" && required:
				bad(k, "required")
			case val == "":
			case !decimalRe.MatchString(val):
				bad(k, "%q is not a price per million tokens (a decimal number like 2.50, not negative)", val)
			default:
				*dst = val
			}
		}
		when := func(dst *time.Time) {
			if val == "" {
				return
			}
			t, err := parseTime(val)
			if err != nil {
				bad(k, "%q is not a time: use RFC 3339 (2026-11-30T12:00:00Z) or a date (2026-11-30)", val)
				return
			}
			*dst = t
		}
		switch k.Value {
		case "provider":
			p.Provider = val
		case "model":
			p.Model = val
		case "input":
			number(&p.Input, true)
		case "output":
			number(&p.Output, true)
		case "cache_read":
			number(&p.CacheRead, false)
		case "cache_write":
			number(&p.CacheWrite, false)
		case "reasoning":
			number(&p.Reasoning, false)
		case "currency":
			if !regexp.MustCompile(`^[A-Z]{3}$`).MatchString(val) {
				bad(k, "%q is not a currency code like USD", val)
			}
			p.Currency = val
		case "valid_from":
			when(&p.ValidFrom)
		case "valid_to":
			when(&p.ValidTo)
		default:
			bad(k, "unknown key (want provider, model, input, output, cache_read, cache_write, reasoning, currency, valid_from, valid_to)")
		}
	}
	for _, req := range []string{"model", "input", "output"} {
		if !seen[req] {
			errs = errors.Join(errs, fmt.Errorf("line %d: %s is required", n.Line, req))
		}
	}
	if seen["model"] && p.Model == "" {
		errs = errors.Join(errs, fmt.Errorf("line %d: model is empty", n.Line))
	}
	if !p.ValidFrom.IsZero() && !p.ValidTo.IsZero() && !p.ValidTo.After(p.ValidFrom) {
		errs = errors.Join(errs, fmt.Errorf("line %d: valid_to %s is not after valid_from %s", n.Line,
			p.ValidTo.Format(time.RFC3339), p.ValidFrom.Format(time.RFC3339)))
	}
	if strings.Contains(p.Model, "*") {
		p.Pattern = true
		p.Model = likePattern(p.Model)
	}
	return p, errs
}

func parseTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	return time.Parse(time.DateOnly, s)
}

// likePattern turns a glob (* for any run of characters) into a LIKE
// pattern, escaping LIKE's own wildcards.
func likePattern(glob string) string {
	r := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`, `*`, `%`)
	return r.Replace(glob)
}
