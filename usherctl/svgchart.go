package main

// The report's charts, drawn as inline SVG by hand: two kinds (lines over
// time, bars per category) with axes, a few ticks and labels need about as
// much code as configuring a chart library, and keep the module free of
// one. Every string that reaches the SVG goes through html.EscapeString:
// outcome reasons come from events and may hold anything.

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	chartWidth, chartHeight = 900, 360
	// charWidth estimates a 13 px sans-serif glyph's width, to leave room
	// for labels without measuring text.
	charWidth = 7.5
	// maxLabelRunes cuts a category label (the report's table shows it
	// whole).
	maxLabelRunes = 40
)

// chartSeries is one line of a line chart.
type chartSeries struct {
	Name   string
	Values []float64
}

// seriesColor is the i-th series' stroke or fill.
func seriesColor(i int) string {
	colors := [...]string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759"}
	return colors[i%len(colors)]
}

// lineChart draws series over the shared x labels (one per point) with a
// legend on top and the value axis starting at zero.
func lineChart(labels []string, series ...chartSeries) template.HTML {
	const left, right, top, bottom = 64.0, 40.0, 40.0, 36.0
	c := newSVG(chartWidth, chartHeight)
	plot := box{x: left, y: top, w: chartWidth - left - right, h: chartHeight - top - bottom}
	values := make([][]float64, len(series))
	for i, sr := range series {
		values[i] = sr.Values
	}
	s := scaleOf(values...)
	c.legend(left, 18, series)
	c.valueAxisY(plot, s)
	n := len(labels)
	// xAt spreads the points over the plot's width; a single point is
	// drawn as a level line across it.
	xAt := func(i int) float64 {
		if n < 2 {
			return plot.x + float64(i)*plot.w
		}
		return plot.x + float64(i)*plot.w/float64(n-1)
	}
	c.line(plot.x, plot.bottom(), plot.right(), plot.bottom(), "#888")
	step := labelStep(n, plot.w/(maxRunes(labels)*charWidth+24))
	for i := 0; i < n; i += step {
		c.line(xAt(i), plot.bottom(), xAt(i), plot.bottom()+4, "#888")
		c.text(xAt(i), plot.bottom()+18, "middle", labels[i])
	}
	for k, sr := range series {
		pts := make([]string, 0, max(len(sr.Values), 2))
		for i, v := range sr.Values {
			pts = append(pts, point(xAt(i), plot.yOf(v, s.top)))
		}
		if len(sr.Values) == 1 {
			pts = append(pts, point(xAt(1), plot.yOf(sr.Values[0], s.top)))
		}
		c.polyline(pts, seriesColor(k))
	}
	return c.close()
}

// barChart draws one bar per label, each with its value. Vertical bars
// slant their labels when they do not fit under the bar; horizontal ones
// (labels on the side, the first on top) suit long labels.
func barChart(labels []string, values []float64, horizontal bool) template.HTML {
	labels = shortLabels(labels)
	if horizontal {
		return horizontalBars(labels, values)
	}
	return verticalBars(labels, values)
}

func verticalBars(labels []string, values []float64) template.HTML {
	const left, right, top = 64.0, 24.0, 24.0
	n := max(len(labels), 1)
	band := (chartWidth - left - right) / float64(n)
	widest := maxRunes(labels) * charWidth
	slant := widest > band-8
	bottom := 36.0
	if slant { // labels at 30°: their height is half their width
		bottom = 24 + widest/2
	}
	c := newSVG(chartWidth, chartHeight)
	plot := box{x: left, y: top, w: chartWidth - left - right, h: chartHeight - top - bottom}
	s := scaleOf(values)
	c.valueAxisY(plot, s)
	c.line(plot.x, plot.bottom(), plot.right(), plot.bottom(), "#888")
	for i, label := range labels {
		mid := plot.x + (float64(i)+0.5)*band
		y := plot.yOf(values[i], s.top)
		c.rect(mid-band*0.3, y, band*0.6, plot.bottom()-y, seriesColor(0))
		c.text(mid, y-5, "middle", number(values[i]))
		if slant {
			c.rotatedText(mid-4, plot.bottom()+14, 30, label)
		} else {
			c.text(mid, plot.bottom()+18, "middle", label)
		}
	}
	return c.close()
}

func horizontalBars(labels []string, values []float64) template.HTML {
	const rowHeight, top, bottom, right = 28.0, 8.0, 32.0, 64.0
	left := math.Min(math.Max(maxRunes(labels)*charWidth+16, 64), 320)
	height := top + rowHeight*float64(max(len(labels), 1)) + bottom
	c := newSVG(chartWidth, height)
	plot := box{x: left, y: top, w: chartWidth - left - right, h: height - top - bottom}
	s := scaleOf(values)
	c.valueAxisX(plot, s)
	c.line(plot.x, plot.y, plot.x, plot.bottom(), "#888")
	for i, label := range labels {
		mid := plot.y + (float64(i)+0.5)*rowHeight
		w := plot.w * values[i] / s.top
		c.rect(plot.x, mid-rowHeight*0.32, w, rowHeight*0.64, seriesColor(0))
		c.text(plot.x+w+5, mid+4, "start", number(values[i]))
		c.text(plot.x-8, mid+4, "end", label)
	}
	return c.close()
}

// box is a chart's plot area.
type box struct{ x, y, w, h float64 }

func (b box) right() float64  { return b.x + b.w }
func (b box) bottom() float64 { return b.y + b.h }

// yOf is value v's height in the box on an axis from 0 to top.
func (b box) yOf(v, top float64) float64 { return b.bottom() - b.h*v/top }

// scale is a value axis from 0 to top in ticks of step: 1, 2 or 5 times a
// power of ten, about five of them.
type scale struct{ step, top float64 }

// scaleOf is the axis for values: whole numbers (counts) get whole ticks.
func scaleOf(values ...[]float64) scale {
	m, whole := 0.0, true
	for _, vs := range values {
		for _, v := range vs {
			m = math.Max(m, v)
			whole = whole && v == math.Trunc(v)
		}
	}
	s := newScale(m)
	if whole && s.step < 1 {
		s = scale{step: 1, top: math.Ceil(m)}
	}
	return s
}

func newScale(maxValue float64) scale {
	if !(maxValue > 0) || math.IsInf(maxValue, 1) {
		return scale{step: 1, top: 1}
	}
	raw := maxValue / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	return scale{step: step, top: math.Ceil(maxValue/step-1e-9) * step}
}

// ticks are the axis' values from 0 to top.
func (s scale) ticks() []float64 {
	n := int(math.Round(s.top / s.step))
	out := make([]float64, n+1)
	for i := range out {
		out[i] = float64(i) * s.step
	}
	return out
}

// label writes a tick's value with as many decimals as the step needs,
// thousands as k and millions as M.
func (s scale) label(v float64) string {
	unit, suffix := 1.0, ""
	switch {
	case s.top >= 1e7:
		unit, suffix = 1e6, "M"
	case s.top >= 1e4:
		unit, suffix = 1e3, "k"
	}
	if v == 0 {
		return "0"
	}
	decimals := max(0, int(math.Ceil(-math.Log10(s.step/unit)-1e-9)))
	return strconv.FormatFloat(v/unit, 'f', decimals, 64) + suffix
}

// labelStep is every how many points an x label goes so that at most fit
// of them are written, a round number where it can be.
func labelStep(n int, fit float64) int {
	want := int(math.Ceil(float64(n) / math.Max(fit, 1)))
	for _, s := range []int{1, 2, 5, 10, 15, 20, 30, 60, 120, 180, 300, 600} {
		if s >= want {
			return s
		}
	}
	return want
}

func maxRunes(ss []string) float64 {
	m := 0
	for _, s := range ss {
		m = max(m, utf8.RuneCountInString(s))
	}
	return float64(m)
}

// shortLabels cuts labels longer than maxLabelRunes.
func shortLabels(labels []string) []string {
	out := make([]string, len(labels))
	for i, l := range labels {
		if r := []rune(l); len(r) > maxLabelRunes {
			l = string(r[:maxLabelRunes-1]) + "…"
		}
		out[i] = l
	}
	return out
}

// number writes a bar's value: counts as integers, others as they are.
func number(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func point(x, y float64) string { return coord(x) + "," + coord(y) }

func coord(v float64) string { return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64) }

// svg writes one chart's elements. It has no xmlns: inline SVG in HTML
// gets its namespace from the parser, and the report names no URL.
type svg struct{ b strings.Builder }

func newSVG(w, h float64) *svg {
	c := &svg{}
	fmt.Fprintf(&c.b, `<svg viewBox="0 0 %s %s" width="%s" height="%s" font-family="system-ui, sans-serif" font-size="13">`,
		coord(w), coord(h), coord(w), coord(h))
	return c
}

func (c *svg) close() template.HTML {
	c.b.WriteString("</svg>")
	return template.HTML(c.b.String()) // #nosec: every text and attribute went through html.EscapeString
}

func (c *svg) line(x1, y1, x2, y2 float64, stroke string) {
	fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s"/>`, coord(x1), coord(y1), coord(x2), coord(y2), stroke)
}

func (c *svg) rect(x, y, w, h float64, fill string) {
	fmt.Fprintf(&c.b, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`, coord(x), coord(y), coord(math.Max(w, 0)), coord(math.Max(h, 0)), fill)
}

func (c *svg) polyline(points []string, stroke string) {
	fmt.Fprintf(&c.b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="1.5" stroke-linejoin="round"/>`, strings.Join(points, " "), stroke)
}

// text writes s at (x, y), its baseline; anchor is start, middle or end.
func (c *svg) text(x, y float64, anchor, s string) {
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" text-anchor="%s" fill="#333">%s</text>`, coord(x), coord(y), anchor, html.EscapeString(s))
}

// rotatedText writes s from (x, y) turned clockwise by deg degrees.
func (c *svg) rotatedText(x, y, deg float64, s string) {
	fmt.Fprintf(&c.b, `<text x="%s" y="%s" transform="rotate(%s %s %s)" fill="#333">%s</text>`,
		coord(x), coord(y), coord(deg), coord(x), coord(y), html.EscapeString(s))
}

// legend writes each series' colour and name in a row from (x, y).
func (c *svg) legend(x, y float64, series []chartSeries) {
	for k, s := range series {
		fmt.Fprintf(&c.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" stroke="%s" stroke-width="3"/>`,
			coord(x), coord(y-4), coord(x+18), coord(y-4), seriesColor(k))
		c.text(x+24, y, "start", s.Name)
		x += 24 + float64(utf8.RuneCountInString(s.Name))*charWidth + 24
	}
}

// valueAxisY writes the scale's ticks up the plot's left side, each with
// a grid line across.
func (c *svg) valueAxisY(plot box, s scale) {
	for _, v := range s.ticks() {
		y := plot.yOf(v, s.top)
		c.line(plot.x, y, plot.right(), y, "#e4e4e4")
		c.text(plot.x-8, y+4, "end", s.label(v))
	}
}

// valueAxisX writes the scale's ticks along the plot's bottom, each with
// a grid line up.
func (c *svg) valueAxisX(plot box, s scale) {
	for _, v := range s.ticks() {
		x := plot.x + plot.w*v/s.top
		c.line(x, plot.y, x, plot.bottom(), "#e4e4e4")
		c.text(x, plot.bottom()+18, "middle", s.label(v))
	}
}
