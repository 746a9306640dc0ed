package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"unicode"

	"go.opentelemetry.io/collector/confmap"
	"gopkg.in/yaml.v3"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"
	"github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension"
)

var root = filepath.Join("..", "..")

// pages are the user documentation: README.md, CHANGELOG.md and docs/*.md.
func pages(t *testing.T) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := []string{filepath.Join(root, "README.md"), filepath.Join(root, "CHANGELOG.md")}
	out = append(out, docs...)
	for _, p := range out {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s: %v", rel(p), err)
		}
	}
	return out
}

func rel(p string) string {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return p
	}
	return r
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// block is a fenced code block of a page.
type block struct {
	lang, text string
	line       int
}

// split returns a page's prose (fenced blocks blanked, so that a link in an
// example is not checked as a link) and its fenced blocks.
func split(s string) (prose string, blocks []block) {
	var b strings.Builder
	var cur *block
	var body strings.Builder
	for i, line := range strings.SplitAfter(s, "\n") {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") {
			if cur == nil {
				cur = &block{lang: strings.TrimPrefix(trim, "```"), line: i + 1}
				body.Reset()
			} else {
				cur.text = body.String()
				blocks = append(blocks, *cur)
				cur = nil
			}
			b.WriteString("\n")
			continue
		}
		if cur != nil {
			body.WriteString(line)
			b.WriteString("\n")
			continue
		}
		b.WriteString(line)
	}
	return b.String(), blocks
}

// inlineCode matches code spans, blanked before links are looked for.
var inlineCode = regexp.MustCompile("`[^`\n]*`")

// link matches [text](target) and ![alt](target); the text may hold code.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

var heading = regexp.MustCompile(`(?m)^#{1,6} +(.+?) *#*$`)

// anchors returns the anchors GitHub makes of a page's headings: lower case,
// punctuation dropped (letters, digits, spaces, '-' and '_' kept), spaces to
// '-', a repeated anchor numbered -1, -2...
func anchors(page string) map[string]bool {
	prose, _ := split(page)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(prose, -1) {
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

// Every relative link of the docs names a file or directory of the tree, and
// every anchor a heading of the page it points into.
func TestLinksAndAnchorsResolve(t *testing.T) {
	for _, p := range pages(t) {
		page := read(t, p)
		prose, _ := split(page)
		prose = inlineCode.ReplaceAllStringFunc(prose, func(s string) string {
			// A code span as a link's text ([`x`](y)) keeps the link.
			return strings.Repeat("x", len(s))
		})
		for _, m := range link.FindAllStringSubmatch(prose, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := p
			if path != "" {
				file = filepath.Join(filepath.Dir(p), filepath.FromSlash(path))
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link %q: %s does not exist", rel(p), target, rel(file))
					continue
				}
			}
			if anchor == "" {
				continue
			}
			if !strings.HasSuffix(file, ".md") {
				t.Errorf("%s: link %q: an anchor into a file that is not Markdown", rel(p), target)
				continue
			}
			if !anchors(read(t, file))[anchor] {
				t.Errorf("%s: link %q: %s has no heading with anchor #%s", rel(p), target, rel(file), anchor)
			}
		}
	}
}

var queryFile = regexp.MustCompile(`queries/[A-Za-z0-9_.-]+\.sql`)

// Every queries/ file the docs name exists.
func TestNamedQueriesExist(t *testing.T) {
	for _, p := range pages(t) {
		for _, q := range queryFile.FindAllString(read(t, p), -1) {
			if _, err := os.Stat(filepath.Join(root, q)); err != nil {
				t.Errorf("%s names %s, which does not exist", rel(p), q)
			}
		}
	}
}

// documentedKeys returns the first column's key of every table row of
// docs/configuration.md, with the number of rows naming it.
func documentedKeys(t *testing.T) map[string]int {
	t.Helper()
	prose, _ := split(read(t, filepath.Join(root, "docs", "configuration.md")))
	keys := map[string]int{}
	for _, line := range strings.Split(prose, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cell, _, _ := strings.Cut(strings.TrimPrefix(line, "| "), " |")
		keys[strings.Trim(cell, "`")]++
	}
	return keys
}

// docs/configuration.md names every key of the exporter's Config once, and no
// key the Config does not have. The keys come from the Config's mapstructure
// tags by reflection, so a field added without its documentation fails here.
func TestConfigurationNamesEveryKeyOnce(t *testing.T) {
	have := configKeys()
	doc := documentedKeys(t)
	for _, k := range have {
		switch doc[k] {
		case 0:
			t.Errorf("docs/configuration.md does not document %q", k)
		case 1:
		default:
			t.Errorf("docs/configuration.md documents %q %d times", k, doc[k])
		}
	}
	var extra []string
	for k := range doc {
		if !slices.Contains(have, k) {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	for _, k := range extra {
		t.Errorf("docs/configuration.md documents %q, which the configuration does not have", k)
	}
}

// The walk itself finds what it must: nested sections, squashed and
// optional ones, lists of sections. Without this, a walk that found nothing
// would pass the test above against an empty page.
func TestConfigKeysWalkTheSections(t *testing.T) {
	keys := configKeys()
	for _, k := range []string{"endpoint", "timeout", "sending_queue::batch::min_size", "retry_on_failure::max_elapsed_time",
		"redis::sentinel::master_name", "partitioning::retention", "promote[]::from", "cost_attribution::dimensions[]::name", "tls"} {
		if !slices.Contains(keys, k) {
			t.Errorf("the walk of the Config misses %q", k)
		}
	}
	for _, k := range keys {
		if strings.HasPrefix(k, "tls::") {
			t.Errorf("the walk descends into the Collector's TLS settings: %q", k)
		}
	}
}

var envRef = regexp.MustCompile(`\$\{env:([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

// resolveEnv stands in for the Collector's env provider: a reference with a
// default takes it. One without is left for placeholders, which knows where
// it stands.
func resolveEnv(s string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		if sub := envRef.FindStringSubmatch(m); strings.Contains(m, ":-") {
			return sub[2]
		}
		return m
	})
}

// placeholders replaces the env references left in a parsed config by a
// value of the kind its key takes: a PostgreSQL URL for the exporter's
// endpoint, host:port for Redis's, a word for the rest (passwords).
func placeholders(v any, path string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			v[k] = placeholders(e, path+"::"+k)
		}
	case []any:
		for i, e := range v {
			v[i] = placeholders(e, path)
		}
	case string:
		if !envRef.MatchString(v) {
			return v
		}
		switch {
		case strings.HasSuffix(path, "::redis::endpoint"):
			return "127.0.0.1:6379"
		case strings.HasSuffix(path, "::endpoint"):
			return "postgres://placeholder@127.0.0.1:5432/postgres"
		}
		return envRef.ReplaceAllString(v, "placeholder")
	}
	return v
}

// topKeys are the exporter's own top-level keys, to recognize a fragment.
func topKeys() map[string]bool {
	out := map[string]bool{}
	for _, k := range configKeys() {
		top, _, _ := strings.Cut(k, "::")
		out[strings.TrimSuffix(top, "[]")] = true
	}
	return out
}

// collectorConfigs returns every ```yaml block of the docs and config.yaml.
func collectorConfigs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{"config.yaml": read(t, filepath.Join(root, "config.yaml"))}
	for _, p := range pages(t) {
		_, blocks := split(read(t, p))
		for _, b := range blocks {
			if b.lang == "yaml" || b.lang == "yml" {
				out[fmt.Sprintf("%s:%d", rel(p), b.line)] = b.text
			}
		}
	}
	return out
}

// Every YAML example of the docs parses, is a collector config rather than
// a fragment of the exporter's section, and each postgrescopy exporter in it
// loads and validates through the built factory, as the Collector loads it.
// A config with a service section references only components it defines.
func TestConfigExamplesLoad(t *testing.T) {
	factory := postgrescopyexporter.NewFactory()
	storageFactory := jaegerremotestorageextension.NewFactory()
	own := topKeys()
	validated, storageValidated := 0, 0
	for where, text := range collectorConfigs(t) {
		var raw map[string]any
		if err := yaml.Unmarshal([]byte(resolveEnv(text)), &raw); err != nil {
			t.Errorf("%s: not YAML: %v", where, err)
			continue
		}
		placeholders(raw, "")
		exporters, isCollector := raw["exporters"].(map[string]any)
		if !isCollector {
			for k := range raw {
				if own[k] {
					t.Errorf("%s: a fragment of the exporter's section (%q): show it under exporters: postgrescopy:", where, k)
					break
				}
			}
			continue
		}
		for id, section := range exporters {
			if id != "postgrescopy" && !strings.HasPrefix(id, "postgrescopy/") {
				continue
			}
			m, _ := section.(map[string]any)
			if m == nil {
				m = map[string]any{}
			}
			withPriceFile(m)
			cfg := factory.CreateDefaultConfig()
			if err := confmap.NewFromStringMap(m).Unmarshal(cfg); err != nil {
				t.Errorf("%s: exporters::%s does not load: %v", where, id, err)
				continue
			}
			if err := confmap.Validate(cfg); err != nil {
				t.Errorf("%s: exporters::%s is invalid: %v", where, id, err)
				continue
			}
			validated++
		}
		extensions, _ := raw["extensions"].(map[string]any)
		for id, section := range extensions {
			if id != "jaeger_remote_storage" && !strings.HasPrefix(id, "jaeger_remote_storage/") {
				continue
			}
			m, _ := section.(map[string]any)
			cfg := storageFactory.CreateDefaultConfig()
			if err := confmap.NewFromStringMap(m).Unmarshal(cfg); err != nil {
				t.Errorf("%s: extensions::%s does not load: %v", where, id, err)
				continue
			}
			if err := confmap.Validate(cfg); err != nil {
				t.Errorf("%s: extensions::%s is invalid: %v", where, id, err)
				continue
			}
			storageValidated++
		}
		if service, ok := raw["service"].(map[string]any); ok {
			checkService(t, where, raw, service)
		}
	}
	if storageValidated < 1 {
		t.Errorf("validated %d jaeger_remote_storage sections; the README shows one", storageValidated)
	}
	if validated < 5 {
		t.Errorf("validated %d postgrescopy sections; the README alone shows four collector configs", validated)
	}
}

// withPriceFile points a price file the example names, but this machine does
// not have, at the example price file: validation parses the file.
func withPriceFile(m map[string]any) {
	p, _ := m["pricing"].(map[string]any)
	if f, ok := p["file"].(string); ok {
		if _, err := os.Stat(f); err != nil {
			p["file"] = filepath.Join(root, "examples", "prices.example.yaml")
		}
	}
}

func checkService(t *testing.T, where string, raw, service map[string]any) {
	t.Helper()
	defined := func(kind, id string) bool {
		m, _ := raw[kind].(map[string]any)
		_, ok := m[id]
		return ok
	}
	if exts, ok := service["extensions"].([]any); ok {
		for _, e := range exts {
			if !defined("extensions", fmt.Sprint(e)) {
				t.Errorf("%s: service::extensions names %v, which extensions does not define", where, e)
			}
		}
	}
	pipelines, _ := service["pipelines"].(map[string]any)
	if len(pipelines) == 0 {
		t.Errorf("%s: service has no pipelines", where)
	}
	for name, p := range pipelines {
		pm, _ := p.(map[string]any)
		for _, kind := range []string{"receivers", "processors", "exporters"} {
			ids, _ := pm[kind].([]any)
			if kind != "processors" && len(ids) == 0 {
				t.Errorf("%s: pipeline %s has no %s", where, name, kind)
			}
			for _, id := range ids {
				if !defined(kind, fmt.Sprint(id)) {
					t.Errorf("%s: pipeline %s names %s %v, which %s does not define", where, name, kind, id, kind)
				}
			}
		}
	}
}
