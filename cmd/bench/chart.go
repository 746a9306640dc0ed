package main

import (
	"bytes"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Chart colours: one per scale, then greys for the frame.
var (
	scaleColors = []color.RGBA{
		{0x4c, 0x78, 0xa8, 0xff}, {0xf5, 0x85, 0x18, 0xff}, {0x54, 0xa2, 0x4b, 0xff},
		{0xb2, 0x79, 0xa2, 0xff}, {0xe4, 0x57, 0x56, 0xff}, {0x72, 0xb7, 0xb2, 0xff},
	}
	ink   = color.RGBA{0x22, 0x22, 0x22, 0xff}
	muted = color.RGBA{0x77, 0x77, 0x77, 0xff}
	grid  = color.RGBA{0xe2, 0xe2, 0xe2, 0xff}
	paper = color.RGBA{0xff, 0xff, 0xff, 0xff}
)

// niceStep picks a grid step of 1, 2 or 5 × 10^k giving about n lines up to max.
func niceStep(max float64, n int) float64 {
	raw := max / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func shortNum(v float64) string {
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', 1, 64) + "M"
	case v >= 1e4:
		return strconv.FormatFloat(v/1e3, 'f', 0, 64) + "k"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', 1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}

// chart draws rows/s of every ceiling run and strategy as horizontal bars,
// one group per strategy and one bar per scale, each labelled with its rate
// and its ratio to the ceiling.
func (rep *report) chart() ([]byte, error) {
	all := append(append([]result(nil), rep.Ceiling...), rep.Strategies...)
	var names []string
	for _, r := range all {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	scales := rep.Workload.Scale
	maxRate := 1.0
	for _, r := range all {
		maxRate = math.Max(maxRate, r.RowsPerS)
	}

	const (
		px     = 2 // font dot size
		lineH  = 7*px + 8
		barH   = 18
		barGap = 4
		groupG = 14
		left   = 400
		right  = 200
		width  = 1400
	)
	// The machine line wraps at its "; " so it stays legible at the label size.
	var header []string
	for _, part := range strings.Split(rep.Machine.line(), "; ") {
		if n := len(header); n > 0 && textWidth(header[n-1]+"; "+part, px) < width-32 {
			header[n-1] += "; " + part
			continue
		}
		header = append(header, part)
	}
	top := 12 + 7*3 + 12 + len(header)*lineH + lineH + 24
	plotW := width - left - right
	groupH := len(scales)*(barH+barGap) + groupG
	height := top + max(1, len(names))*groupH + 56
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(paper), image.Point{}, draw.Src)
	fill := func(x0, y0, x1, y1 int, c color.Color) {
		draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(c), image.Point{}, draw.Src)
	}

	drawText(img, 16, 12, "postgrescopy bench: rows/s by write strategy (longer is better)", 3, ink)
	for i, l := range header {
		drawText(img, 16, 12+7*3+12+i*lineH, l, px, muted)
	}
	// Legend: one swatch per scale.
	x := 16
	ly := 12 + 7*3 + 12 + len(header)*lineH + 6
	for i, u := range scales {
		fill(x, ly, x+14, ly+14, scaleColors[i%len(scaleColors)])
		label := strconv.Itoa(u) + " users (" + shortNum(float64(u*rep.Workload.EventsPerUser)) + " rows)"
		if u == 1 {
			label = "1 user (" + shortNum(float64(rep.Workload.EventsPerUser)) + " rows)"
		}
		drawText(img, x+20, ly, label, px, ink)
		x += 20 + textWidth(label, px) + 24
	}
	drawText(img, x+8, ly, "label: rows/s and x ceiling", px, muted)

	// Grid and axis labels.
	step := niceStep(maxRate, 6)
	plotBottom := top + len(names)*groupH
	for v := 0.0; v <= maxRate*1.0001; v += step {
		gx := left + int(v/maxRate*float64(plotW))
		fill(gx, top-6, gx+1, plotBottom, grid)
		s := shortNum(v)
		drawText(img, gx-textWidth(s, px)/2, plotBottom+8, s, px, muted)
	}
	axis := "rows per second"
	drawText(img, left+plotW/2-textWidth(axis, px)/2, plotBottom+8+lineH, axis, px, muted)

	for gi, name := range names {
		gy := top + gi*groupH
		label := name
		for textWidth(label, px) > left-24 && len(label) > 4 {
			label = label[:len(label)-4] + "..."
		}
		drawText(img, left-12-textWidth(label, px), gy+(len(scales)*(barH+barGap)-7*px)/2, label, px, ink)
		for si, u := range scales {
			y := gy + si*(barH+barGap)
			i := slices.IndexFunc(all, func(r result) bool { return r.Name == name && r.Users == u })
			if i < 0 {
				continue
			}
			r := all[i]
			if r.Status != "ok" {
				drawText(img, left+6, y+(barH-7*px)/2, r.Status, px, muted)
				continue
			}
			w := max(1, int(r.RowsPerS/maxRate*float64(plotW)))
			fill(left, y, left+w, y+barH, scaleColors[si%len(scaleColors)])
			val := shortNum(r.RowsPerS) + "/s  " + strconv.FormatFloat(r.RatioToCeiling, 'f', 2, 64) + "x"
			drawText(img, left+w+6, y+(barH-7*px)/2, val, px, ink)
		}
	}
	fill(left, top-6, left+1, plotBottom, ink)

	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// lineSeries is one line of a line chart.
type lineSeries struct {
	name string
	x, y []float64
}

// lineChart draws series against a shared x axis, the y axis linear from 0
// or, with logY, logarithmic over the data's decades.
func lineChart(title string, header []string, xLabel, yLabel string, series []lineSeries, logY bool) ([]byte, error) {
	const (
		px     = 2
		lineH  = 7*px + 8
		left   = 120
		right  = 420
		width  = 1400
		plotH  = 560
		margin = 16
	)
	top := 12 + 7*3 + 12 + len(header)*lineH + 16
	height := top + plotH + 3*lineH + 16
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(paper), image.Point{}, draw.Src)
	fill := func(x0, y0, x1, y1 int, c color.Color) {
		draw.Draw(img, image.Rect(x0, y0, x1, y1), image.NewUniform(c), image.Point{}, draw.Src)
	}
	drawText(img, margin, 12, title, 3, ink)
	for i, l := range header {
		drawText(img, margin, 12+7*3+12+i*lineH, l, px, muted)
	}
	maxX, minY, maxY := 1.0, math.Inf(1), 0.0
	for _, s := range series {
		for i := range s.x {
			maxX = math.Max(maxX, s.x[i])
			if s.y[i] > 0 {
				minY = math.Min(minY, s.y[i])
				maxY = math.Max(maxY, s.y[i])
			}
		}
	}
	if maxY == 0 {
		maxY, minY = 1, 1
	}
	plotW := width - left - right
	bottom := top + plotH
	var ypos func(v float64) int
	if logY {
		lo := math.Pow(10, math.Floor(math.Log10(minY)))
		hi := math.Pow(10, math.Ceil(math.Log10(maxY)))
		if hi <= lo {
			hi = lo * 10
		}
		ypos = func(v float64) int {
			v = math.Max(v, lo)
			return bottom - int((math.Log10(v)-math.Log10(lo))/(math.Log10(hi)-math.Log10(lo))*plotH)
		}
		for d := lo; d <= hi*1.0001; d *= 10 {
			gy := ypos(d)
			fill(left, gy, left+plotW, gy+1, grid)
			s := shortNum(d)
			if d < 1 {
				s = strconv.FormatFloat(d, 'g', 3, 64)
			}
			drawText(img, left-10-textWidth(s, px), gy-7, s, px, muted)
		}
	} else {
		step := niceStep(maxY, 6)
		top := math.Ceil(maxY/step) * step
		ypos = func(v float64) int { return bottom - int(v/top*plotH) }
		for v := 0.0; v <= top*1.0001; v += step {
			gy := ypos(v)
			fill(left, gy, left+plotW, gy+1, grid)
			s := shortNum(v)
			drawText(img, left-10-textWidth(s, px), gy-7, s, px, muted)
		}
	}
	xstep := niceStep(maxX, 8)
	xtop := math.Ceil(maxX/xstep) * xstep
	xpos := func(v float64) int { return left + int(v/xtop*float64(plotW)) }
	for v := 0.0; v <= xtop*1.0001; v += xstep {
		gx := xpos(v)
		fill(gx, top, gx+1, bottom, grid)
		s := shortNum(v)
		drawText(img, gx-textWidth(s, px)/2, bottom+8, s, px, muted)
	}
	drawText(img, left+plotW/2-textWidth(xLabel, px)/2, bottom+8+lineH, xLabel, px, muted)
	drawText(img, margin, top-lineH, yLabel, px, muted)
	fill(left, top, left+1, bottom, ink)
	fill(left, bottom, left+plotW, bottom+1, ink)

	line := func(x0, y0, x1, y1 int, c color.Color) {
		n := max(abs(x1-x0), abs(y1-y0), 1)
		for i := 0; i <= n; i++ {
			x := x0 + (x1-x0)*i/n
			y := y0 + (y1-y0)*i/n
			fill(x-1, y-1, x+2, y+2, c)
		}
	}
	for si, s := range series {
		c := scaleColors[si%len(scaleColors)]
		if si >= len(scaleColors) {
			// Past the palette: darker shades of it.
			c = color.RGBA{c.R / 2, c.G / 2, c.B / 2, 0xff}
		}
		px0, py0 := -1, -1
		for i := range s.x {
			if s.y[i] <= 0 && logY {
				continue
			}
			x, y := xpos(s.x[i]), ypos(s.y[i])
			fill(x-3, y-3, x+4, y+4, c)
			if px0 >= 0 {
				line(px0, py0, x, y, c)
			}
			px0, py0 = x, y
		}
		ly := top + si*lineH
		fill(left+plotW+24, ly, left+plotW+38, ly+14, c)
		label := s.name
		for textWidth(label, px) > right-60 && len(label) > 4 {
			label = label[:len(label)-4] + "..."
		}
		drawText(img, left+plotW+44, ly, label, px, ink)
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// charts draws the sustained run: rows/s against the rows in the tables,
// and each query's p95 against the same.
func (r *sustainedResult) charts(machineLine string) (throughput, latency []byte, err error) {
	header := []string{machineLine}
	tp := lineSeries{name: "postgrescopy + Redis, rows/s"}
	for _, m := range r.Minutes {
		if m.Partial {
			continue
		}
		tp.x = append(tp.x, float64(m.TotalRows))
		tp.y = append(tp.y, m.RowsPerS)
	}
	series := []lineSeries{tp}
	if c := r.Ceiling; c != nil && c.Status == "ok" && len(tp.x) > 0 {
		series = append(series, lineSeries{name: "psql \\copy, 2 streams, at the end", x: []float64{tp.x[len(tp.x)-1]}, y: []float64{c.RowsPerS}})
	}
	if throughput, err = lineChart("Sustained ingest: rows/s per minute against rows in the tables", header,
		"rows in the tables", "rows/s", series, false); err != nil {
		return nil, nil, err
	}
	var qs []lineSeries
	for _, m := range r.Samples {
		for qi, q := range m.Queries {
			for len(qs) <= qi {
				qs = append(qs, lineSeries{})
			}
			qs[qi].name = q.Title
			if q.Runs > 0 {
				qs[qi].x = append(qs[qi].x, float64(m.AtRows))
				qs[qi].y = append(qs[qi].y, q.P95Ms)
			}
		}
	}
	latency, err = lineChart("Query p95 (ms, log scale) against rows in the tables, while ingest runs", header,
		"rows in the tables", "p95 ms", qs, true)
	return throughput, latency, err
}
