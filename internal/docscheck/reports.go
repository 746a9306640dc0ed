package docscheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// MaxReadmeLines is the most lines README.md may have: it is the front page,
// and depth lives in docs/.
const MaxReadmeLines = 450

// ResultsDir is where the bench reports are committed, relative to the root.
const ResultsDir = "bench/results"

// CheckReadmeLength fails when root's README.md has more than max lines.
func CheckReadmeLength(root string, max int) error {
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		return err
	}
	if n := lineCount(string(b)); n > max {
		return fmt.Errorf("README.md has %d lines, more than %d: it is the front page; move the depth to a page of docs/", n, max)
	}
	return nil
}

func lineCount(s string) int {
	n := strings.Count(s, "\n")
	if s != "" && !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// citation matches a file of bench/results named in a page, as a link
// (bench/results/x.md, ../bench/results/x.md) or in the text: a name with an
// extension, so that a pattern such as bench/results/latest.* is not one.
var citation = regexp.MustCompile(`bench/results/([A-Za-z0-9_-]+(?:\.[A-Za-z0-9]+)+)`)

// citingPages are README.md and docs/*.md: the pages a report must be cited
// by (CHANGELOG.md records the past and keeps no report alive).
func citingPages(root string) ([]string, error) {
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	return append([]string{filepath.Join(root, "README.md")}, docs...), nil
}

// citations returns, for each bench/results file named by the citing pages,
// the pages (relative to root) that name it.
func citations(root string) (map[string][]string, error) {
	pages, err := citingPages(root)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, p := range pages {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		r, _ := filepath.Rel(root, p)
		for _, m := range citation.FindAllStringSubmatch(string(b), -1) {
			if pages := out[m[1]]; len(pages) == 0 || pages[len(pages)-1] != r {
				out[m[1]] = append(pages, r)
			}
		}
	}
	return out, nil
}

// chart matches the name of a report's chart without its extension:
// <report>-throughput, <report>-latency.
var chart = regexp.MustCompile(`^(.+)-[a-z]+$`)

// UncitedReports returns the files of bench/results that no citing page
// names. A report is its .md; its data (<report>.json) and charts
// (<report>.png, <report>-<chart>.png) are cited with it.
func UncitedReports(root string) ([]string, error) {
	cited, err := citations(root)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(ResultsDir)))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() {
			out = append(out, name+"/")
			continue
		}
		if len(cited[name]) > 0 {
			continue
		}
		stem := strings.TrimSuffix(name, filepath.Ext(name))
		if len(cited[stem+".md"]) > 0 {
			continue
		}
		if m := chart.FindStringSubmatch(stem); m != nil && filepath.Ext(name) == ".png" && len(cited[m[1]+".md"]) > 0 {
			continue
		}
		out = append(out, name)
	}
	return out, nil
}

// MissingReports returns each citation of a bench/results file that does
// not exist, as "page: bench/results/name".
func MissingReports(root string) ([]string, error) {
	cited, err := citations(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for name, pages := range cited {
		if _, err := os.Stat(filepath.Join(root, filepath.FromSlash(ResultsDir), name)); err == nil {
			continue
		} else if !os.IsNotExist(err) {
			return nil, err
		}
		for _, p := range pages {
			out = append(out, p+": "+ResultsDir+"/"+name)
		}
	}
	sort.Strings(out)
	return out, nil
}
