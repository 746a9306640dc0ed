// Command benchchart draws the README's throughput chart from a committed
// bench report: rows/s of the ceiling, the plain COPY strategy and
// postgrescopy (direct and with Redis) at each scale of the report, each bar
// labelled with its ratio to the ceiling. It writes SVG, so the chart is
// text in the repository and regenerating it from the same report gives the
// same bytes (the test checks the committed chart against its report).
//
//	go run ./cmd/benchchart -in bench/results/20261207-081425.json -out docs/images/throughput.svg
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"html"
	"os"
	"strings"
)

// The report's fields the chart reads (cmd/bench writes them).
type report struct {
	Machine struct {
		CPUModel          string `json:"cpu_model"`
		Cores             int    `json:"cores"`
		RAM               string `json:"ram"`
		PostgreSQLVersion string `json:"postgresql_version"`
		Date              string `json:"date"`
	} `json:"machine"`
	Workload struct {
		Scale []int `json:"scale_users"`
	} `json:"workload"`
	Ceiling    []result `json:"ceiling"`
	Strategies []result `json:"strategies"`
}

type result struct {
	Name     string  `json:"name"`
	Key      string  `json:"key"`
	Kind     string  `json:"kind"`
	Users    int     `json:"users"`
	RowsPerS float64 `json:"rows_per_s"`
	Ratio    float64 `json:"ratio_to_ceiling"`
	Status   string  `json:"status"`
}

// series are the chart's rows: a label and how to find its results.
var series = []struct {
	label string
	match func(result) bool
}{
	{"psql \\copy (ceiling)", func(r result) bool { return r.Kind == "ceiling" && r.Ratio == 1 }},
	{"plain COPY (pgx)", func(r result) bool { return r.Key == "copy-5000-maps" }},
	{"direct, 2 callers", func(r result) bool { return r.Key == "postgrescopy" }},
	{"direct, 16 callers", func(r result) bool { return r.Key == "postgrescopy-16" }},
	{"postgrescopy + Redis", func(r result) bool { return r.Key == "postgrescopy-redis" }},
}

var colors = []string{"#4c78a8", "#f58518", "#54a24b", "#e45756", "#b279a2"}

func main() {
	in := flag.String("in", "bench/results/20261207-081425.json", "the bench report (JSON) to draw")
	out := flag.String("out", "docs/images/throughput.svg", "where to write the SVG")
	flag.Parse()
	data, err := os.ReadFile(*in)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	svg, err := render(data)
	if err != nil {
		fmt.Fprintln(os.Stderr, *in+":", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*out, svg, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// render draws the report as horizontal bars: one group per scale, one bar
// per series.
func render(data []byte) ([]byte, error) {
	var rep report
	if err := json.Unmarshal(data, &rep); err != nil {
		return nil, err
	}
	if len(rep.Workload.Scale) == 0 {
		return nil, fmt.Errorf("the report has no scales: not a strategies report")
	}
	all := append(append([]result(nil), rep.Ceiling...), rep.Strategies...)
	find := func(users, s int) (result, bool) {
		for _, r := range all {
			if r.Users == users && r.Status == "ok" && series[s].match(r) {
				return r, true
			}
		}
		return result{}, false
	}
	maxRate := 1.0
	for _, r := range all {
		for s := range series {
			if r.Status == "ok" && series[s].match(r) && r.RowsPerS > maxRate {
				maxRate = r.RowsPerS
			}
		}
	}
	const (
		width, left, right  = 840, 110, 130
		barH, gap, groupGap = 16, 3, 18
		top                 = 76
	)
	plotW := float64(width - left - right)
	groupH := len(series)*(barH+gap) + groupGap
	height := top + len(rep.Workload.Scale)*groupH + 36

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="12" y="22" font-size="15" font-weight="bold">Rows/s by write strategy, labelled × ceiling (longer is better)</text>`+"\n")
	m := rep.Machine
	fmt.Fprintf(&b, `<text x="12" y="40" fill="#555">%s</text>`+"\n", html.EscapeString(fmt.Sprintf("%s, %d cores, %s; %s; %s", m.CPUModel, m.Cores, m.RAM, firstWords(m.PostgreSQLVersion, 2), m.Date)))
	x := 12
	for s := range series {
		fmt.Fprintf(&b, `<rect x="%d" y="50" width="12" height="12" fill="%s"/><text x="%d" y="60">%s</text>`+"\n", x, colors[s], x+16, html.EscapeString(series[s].label))
		x += 16 + len(series[s].label)*7 + 14 // about 7 px a character at 12 px
	}
	y := top
	for _, users := range rep.Workload.Scale {
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end" font-weight="bold">%d users</text>`+"\n", left-10, y+2*(barH+gap)+4, users)
		for s := range series {
			r, ok := find(users, s)
			if !ok {
				fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#888">not run</text>`+"\n", left+4, y+barH-4)
				y += barH + gap
				continue
			}
			w := r.RowsPerS / maxRate * plotW
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`+"\n", left, y, w, barH, colors[s])
			fmt.Fprintf(&b, `<text x="%.1f" y="%d">%s/s  %.2f×</text>`+"\n", float64(left)+w+4, y+barH-4, thousands(r.RowsPerS), r.Ratio)
			y += barH + gap
		}
		y += groupGap
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#888"/>`+"\n", left, top-4, left, y-groupGap+2)
	fmt.Fprintf(&b, `<text x="12" y="%d" fill="#555">%s</text>`+"\n", height-12, "From the committed bench report; CPU-bound on both sides. go run ./cmd/benchchart redraws it.")
	b.WriteString("</svg>\n")
	return []byte(b.String()), nil
}

// thousands writes a rate as 62.3k.
func thousands(v float64) string {
	return fmt.Sprintf("%.1fk", v/1000)
}

func firstWords(s string, n int) string {
	f := strings.Fields(s)
	if len(f) > n {
		f = f[:n]
	}
	return strings.Join(f, " ")
}
