// The import graph test: see doc.go.
package layers_test

import (
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/postgrescopy/postgrescopy/"

// allowed lists, for each product package, the module's packages it may
// import. A package missing here fails the test: its place must be decided.
var allowed = map[string][]string{
	"internal/pgcopy":          {},
	"internal/jsonb":           {"internal/pgcopy"},
	"internal/tables":          {},
	"internal/entry":           {"internal/tables", "internal/pgcopy"},
	"internal/rows":            {"internal/tables", "internal/pgcopy", "internal/jsonb"},
	"internal/coord":           {},
	"internal/schema":          {"internal/tables"},
	"internal/pgwrite":         {"internal/rows", "internal/entry", "internal/tables", "internal/schema", "internal/pgcopy"},
	"internal/flush":           {"internal/coord", "internal/pgwrite", "internal/rows", "internal/entry", "internal/tables"},
	"internal/sharedcomponent": {},
	"internal/pricing":         {},
	"internal/request":         {"internal/rows"},
	"internal/traceread":       {"internal/schema"},
	"internal/jaegerstorage":   {"internal/traceread"},
	"internal/pgsink":          {"internal/pgwrite", "internal/schema", "internal/pricing", "internal/rows", "internal/entry", "internal/tables"},
	"exporter/postgrescopyexporter": {"exporter/postgrescopyexporter/internal/metadata", "internal/coord", "internal/entry",
		"internal/flush", "internal/pgsink", "internal/pgwrite", "internal/pricing", "internal/request", "internal/rows", "internal/schema", "internal/sharedcomponent", "internal/tables"},
	"exporter/postgrescopyexporter/internal/metadata":          {},
	"extension/jaegerremotestorageextension":                   {"extension/jaegerremotestorageextension/internal/metadata", "internal/jaegerstorage", "internal/traceread", "internal/schema"},
	"extension/jaegerremotestorageextension/internal/metadata": {},
	"receiver/loadgenreceiver":                                 {"receiver/loadgenreceiver/internal/metadata", "internal/sharedcomponent"},
	"receiver/loadgenreceiver/internal/metadata":               {},
}

// notIn lists, for a package, import path prefixes that must not be among
// its dependencies at all (transitively).
var notIn = map[string][]string{
	"internal/tables":  {"go.opentelemetry.io/collector/pdata", "github.com/jackc/", "github.com/redis/"},
	"internal/entry":   {"go.opentelemetry.io/collector/pdata", "github.com/jackc/", "github.com/redis/"},
	"internal/coord":   {"go.opentelemetry.io/collector/pdata", "github.com/jackc/"},
	"internal/rows":    {"github.com/jackc/", "github.com/redis/"},
	"internal/schema":  {"go.opentelemetry.io/collector/pdata", "github.com/redis/"},
	"internal/pgwrite": {"github.com/redis/"},
	"internal/request": {"github.com/jackc/", "github.com/redis/"},
	"internal/pgsink":  {"github.com/redis/"},
	// The read side knows the tables, not how rows are written.
	"internal/traceread": {"github.com/redis/", module + "internal/rows", module + "internal/pgwrite"},
}

// notImported lists, for a package, import path prefixes it must not import
// directly: the flush workers see Redis and PostgreSQL only through coord and
// pgwrite, behind their interfaces.
var notImported = map[string][]string{
	"internal/flush": {"github.com/jackc/", "github.com/redis/"},
}

// testOnly are packages for tests, the bench and the soak alone.
var testOnly = []string{"internal/testenv/pgtest", "internal/schema/spangen", "internal/testenv/pgbouncer", "internal/testenv/pglocal", "internal/testenv/tcpproxy", "internal/testenv/pgcount", "internal/testenv/redistest", "internal/testenv/redisserver", "internal/testenv/ports", "internal/rows/rowstest", "internal/docscheck"}

// testEnv lists, for each package of internal/testenv, the module's packages
// it may import: ports at the bottom, the servers the bench and the soak
// run too (redisserver, pgbouncer) above it, the testing.T wrappers
// (pgtest, redistest) on top, and no product package anywhere.
var testEnv = map[string][]string{
	"internal/testenv/ports":       {},
	"internal/testenv/pglocal":     {"internal/testenv/ports"},
	"internal/testenv/tcpproxy":    {},
	"internal/testenv/pgcount":     {},
	"internal/testenv/redisserver": {"internal/testenv/ports"},
	"internal/testenv/pgbouncer":   {"internal/testenv/ports"},
	"internal/testenv/pgtest":      {"internal/testenv/pglocal", "internal/testenv/pgbouncer", "internal/testenv/ports"},
	"internal/testenv/redistest":   {"internal/testenv/pgtest", "internal/testenv/redisserver"},
}

type pkg struct {
	imports, deps []string
}

func list(t *testing.T) map[string]pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}|{{join .Imports ","}}|{{join .Deps ","}}`, "./...")
	cmd.Dir = filepath.Join("..", "..")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]pkg{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		parts := strings.Split(line, "|")
		split := func(s string) []string {
			if s == "" {
				return nil
			}
			return strings.Split(s, ",")
		}
		pkgs[strings.TrimPrefix(parts[0], module)] = pkg{imports: split(parts[1]), deps: split(parts[2])}
	}
	return pkgs
}

func TestImportGraph(t *testing.T) {
	pkgs := list(t)
	for name, p := range pkgs {
		if strings.HasPrefix(name, "cmd/") || strings.HasPrefix(name, "scripts/") || strings.HasPrefix(name, "e2e") || slices.Contains(testOnly, name) || name == "internal/layers" {
			continue
		}
		want, ok := allowed[name]
		if !ok {
			t.Errorf("%s is not in the allowed graph: add it where it belongs", name)
			continue
		}
		for _, imp := range p.imports {
			if !strings.HasPrefix(imp, module) {
				for _, bad := range notImported[name] {
					if strings.HasPrefix(imp, bad) {
						t.Errorf("%s imports %s directly", name, imp)
					}
				}
				continue
			}
			own := strings.TrimPrefix(imp, module)
			if !slices.Contains(want, own) {
				t.Errorf("%s imports %s, which is not a later stage of it", name, own)
			}
		}
		for _, dep := range p.deps {
			for _, bad := range notIn[name] {
				if strings.HasPrefix(dep, bad) {
					t.Errorf("%s depends on %s", name, dep)
				}
			}
			for _, test := range testOnly {
				if dep == module+test {
					t.Errorf("%s depends on the test-only %s", name, test)
				}
			}
		}
	}
	for name := range allowed {
		if _, ok := pkgs[name]; !ok {
			t.Errorf("%s is in the allowed graph but not in the module", name)
		}
	}
}

func TestTestEnvGraph(t *testing.T) {
	pkgs := list(t)
	for name, p := range pkgs {
		if !strings.HasPrefix(name, "internal/testenv/") {
			continue
		}
		want, ok := testEnv[name]
		if !ok {
			t.Errorf("%s is not in the testenv graph: add it where it belongs", name)
			continue
		}
		for _, imp := range p.imports {
			if own, ok := strings.CutPrefix(imp, module); ok && !slices.Contains(want, own) {
				t.Errorf("%s imports %s, which is not below it", name, own)
			}
		}
	}
}
