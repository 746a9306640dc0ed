package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// query is one file of queries/: the analytical SQL the bench runs against
// the data it wrote.
type query struct {
	Name  string // file name without .sql
	Title string // the header's first line
	SQL   string // with `otel.` rewritten to the bench's schema
}

// schemaRef matches the placeholder schema of queries/*.sql: `otel.` before
// one of our tables.
var schemaRef = regexp.MustCompile(`\botel\.(spans|logs|metrics_[a-z_]+|ai_[a-z_]+|gen_ai_calls|model_prices)\b`)

// loadQueries reads dir/*.sql in name order and points them at schemaName.
func loadQueries(dir, schemaName string) ([]query, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.sql"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no *.sql files in %s (run from the repository root or pass -queries)", dir)
	}
	sort.Strings(paths)
	quoted := pgx.Identifier{schemaName}.Sanitize()
	var out []query
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		text := string(b)
		if !schemaRef.MatchString(text) {
			return nil, fmt.Errorf("%s: names no otel.<table>; the bench could not point it at its schema", p)
		}
		title := strings.TrimSuffix(filepath.Base(p), ".sql")
		if first, _, _ := strings.Cut(text, "\n"); strings.HasPrefix(first, "--") {
			title = strings.TrimSpace(strings.TrimPrefix(first, "--"))
		}
		out = append(out, query{
			Name:  strings.TrimSuffix(filepath.Base(p), ".sql"),
			Title: title,
			SQL:   schemaRef.ReplaceAllString(text, quoted+".$1"),
		})
	}
	return out, nil
}
