package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Presets of promote_preset.
const (
	presetGenAI = "genai"
	presetNone  = "none"
)

// PromoteConfig is one promoted attribute: a typed column filled from the
// first of its attribute keys present on a row, converted to the column's
// type, or NULL when the value does not fit (a row is never refused for it).
type PromoteConfig struct {
	// column is the column's name: a plain identifier of at most 63 bytes,
	// not a built-in column's. Required.
	Column string `mapstructure:"column"`
	// type is text, bigint, double precision, boolean or timestamptz.
	// Required.
	Type string `mapstructure:"type"`
	// from lists the attribute keys to read, tried in order, each prefixed
	// with whose attributes hold it: "span:gen_ai.request.model",
	// "log:user.id", "resource:service.namespace". Span keys need the traces
	// signal, log keys the logs signal. At least one.
	From []string `mapstructure:"from"`
	// signals chooses the tables that get the column: traces (spans), logs
	// (logs), or both. Default [traces].
	Signals []string `mapstructure:"signals"`
	// remove drops the key that filled the column from its JSONB column
	// (span_attributes, log_attributes or resource_attributes), so that the
	// value is stored once. A value that did not fit is kept. Default false.
	Remove bool `mapstructure:"remove"`
}

var scopes = map[string]tables.Scope{"span": tables.ScopeSpan, "log": tables.ScopeLog, "resource": tables.ScopeResource}

// promoted parses the section into rows' terms, collecting every problem.
func (p *PromoteConfig) promoted() (tables.Promoted, error) {
	out := tables.Promoted{Column: p.Column, Remove: p.Remove}
	var errs error
	if !schema.ValidIdentifier(p.Column) {
		errs = errors.Join(errs, fmt.Errorf("column %q is not a valid identifier: use letters, digits and _, not starting with a digit, at most 63 bytes", p.Column))
	}
	kind, ok := tables.KindOfType(p.Type)
	if !ok {
		errs = errors.Join(errs, fmt.Errorf("type %q is not one of text, bigint, double precision, boolean, timestamptz", p.Type))
	}
	out.Kind = kind
	signals := p.Signals
	if len(signals) == 0 {
		signals = []string{"traces"}
	}
	for _, s := range signals {
		switch s {
		case "traces":
			out.Traces = true
		case "logs":
			out.Logs = true
		default:
			errs = errors.Join(errs, fmt.Errorf("signal %q is not traces or logs", s))
		}
	}
	if len(p.From) == 0 {
		errs = errors.Join(errs, errors.New(`"from" needs at least one key, e.g. "span:gen_ai.request.model"`))
	}
	for _, f := range p.From {
		scope, key, _ := strings.Cut(f, ":")
		sc, ok := scopes[scope]
		switch {
		case !ok || key == "":
			errs = errors.Join(errs, fmt.Errorf(`from %q is not "span:<key>", "log:<key>" or "resource:<key>"`, f))
			continue
		case sc == tables.ScopeSpan && !out.Traces:
			errs = errors.Join(errs, fmt.Errorf(`from %q reads spans, but "signals" lacks traces`, f))
		case sc == tables.ScopeLog && !out.Logs:
			errs = errors.Join(errs, fmt.Errorf(`from %q reads logs, but "signals" lacks logs`, f))
		}
		out.From = append(out.From, tables.Source{Scope: sc, Key: key})
	}
	return out, errs
}

// promotedColumns is the preset's columns, then the promote section's; a
// promote entry named like a preset column replaces it.
func (cfg *Config) promotedColumns() ([]tables.Promoted, error) {
	var out []tables.Promoted
	var errs error
	switch cfg.PromotePreset {
	case presetGenAI:
		out = tables.GenAI()
	case presetNone:
	default:
		errs = fmt.Errorf(`"promote_preset" must be %q or %q, got %q`, presetGenAI, presetNone, cfg.PromotePreset)
	}
	preset := len(out)
	replaced := make([]bool, preset)
	for i := range cfg.Promote {
		p, err := cfg.Promote[i].promoted()
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf(`"promote[%d]" (%s): %w`, i, cfg.Promote[i].Column, err))
			continue
		}
		j := slices.IndexFunc(out[:preset], func(q tables.Promoted) bool { return q.Column == p.Column })
		if j >= 0 && !replaced[j] {
			out[j], replaced[j] = p, true
			continue
		}
		out = append(out, p) // a second entry of one name: NewLayout refuses it
	}
	return out, errs
}

// layout builds the tables this configuration writes.
func (cfg *Config) layout() (*tables.Layout, error) {
	cols, err := cfg.promotedColumns()
	if err != nil {
		return nil, err
	}
	l, err := tables.NewLayout(cols)
	if err != nil {
		return nil, fmt.Errorf(`"promote": %w`, err)
	}
	if cfg.Distribution == distributionCitus {
		// The distribution column: written on Citus only.
		l = l.WithShardKey()
	}
	return l, nil
}
