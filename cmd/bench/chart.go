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
