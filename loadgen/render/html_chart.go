package render

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Chart geometry, in SVG user units.
const (
	chartW       = 640.0
	chartH       = 300.0
	marginLeft   = 72.0
	marginRight  = 16.0
	marginTop    = 16.0
	marginBottom = 48.0
	plotW        = chartW - marginLeft - marginRight
	plotH        = chartH - marginTop - marginBottom
)

// palette is colour-blind friendly (Okabe–Ito).
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

// chart is an SVG chart, drawn by the page template. Every mark carries a
// tooltip; text is escaped by html/template.
type chart struct {
	Name, Title, Caption string
	YLabel, XLabel       string
	Rects                []rect
	Lines                []line
	Circles              []circle
	Polylines            []polyline
	Texts                []text
	Legend               []legendItem
	NoData               string // set when there is nothing to draw
}

type rect struct {
	X, Y, W, H float64
	Fill, Tip  string
}

type line struct {
	X1, Y1, X2, Y2 float64
	Class          string // "grid", "axis", "err"
	Stroke         string
}

type circle struct {
	X, Y, R   float64
	Fill, Tip string
}

type polyline struct {
	Points string
	Stroke string
}

type text struct {
	X, Y   float64
	Anchor string // start, middle, end
	Class  string
	Rotate bool
	S      string
}

type legendItem struct {
	Color, Label string
}

// scale maps [0, max] onto the plot's height with "nice" ticks.
type scale struct {
	max   float64
	ticks []float64
}

func newScale(maxV float64) scale {
	if !(maxV > 0) || math.IsInf(maxV, 0) {
		maxV = 1
	}
	step := niceStep(maxV / 5)
	top := math.Ceil(maxV/step-1e-9) * step
	var ticks []float64
	for v := 0.0; v <= top+step/2; v += step {
		ticks = append(ticks, v)
	}
	return scale{max: top, ticks: ticks}
}

// newCountScale is newScale with whole-number ticks, for counts.
func newCountScale(maxV float64) scale {
	if maxV >= 5 {
		return newScale(maxV) // steps of at least 1
	}
	top := 1.0
	if maxV > 1 {
		top = math.Ceil(maxV)
	}
	var ticks []float64
	for v := 0.0; v <= top; v++ {
		ticks = append(ticks, v)
	}
	return scale{max: top, ticks: ticks}
}

// niceStep rounds x up to 1, 2 or 5 × 10^k.
func niceStep(x float64) float64 {
	exp := math.Floor(math.Log10(x))
	base := math.Pow(10, exp)
	for _, m := range []float64{1, 2, 5, 10} {
		if m*base >= x*(1-1e-9) {
			return m * base
		}
	}
	return 10 * base
}

func (s scale) y(v float64) float64 {
	if v < 0 {
		v = 0
	}
	return marginTop + plotH - v/s.max*plotH
}

// axes draws the grid, the y ticks (formatted by f) and the axis labels.
func (c *chart) axes(s scale, f func(float64) string) {
	for _, t := range s.ticks {
		y := s.y(t)
		c.Lines = append(c.Lines, line{X1: marginLeft, Y1: y, X2: marginLeft + plotW, Y2: y, Class: "grid"})
		c.Texts = append(c.Texts, text{X: marginLeft - 6, Y: y + 4, Anchor: "end", Class: "tick", S: f(t)})
	}
	c.Lines = append(c.Lines,
		line{X1: marginLeft, Y1: marginTop, X2: marginLeft, Y2: marginTop + plotH, Class: "axis"},
		line{X1: marginLeft, Y1: marginTop + plotH, X2: marginLeft + plotW, Y2: marginTop + plotH, Class: "axis"})
}

// xLabels places one category label under each slot.
func (c *chart) xLabels(labels []string) {
	slot := plotW / float64(len(labels))
	rotate := len(labels) > 6 || maxLen(labels)*7 > int(slot)
	for i, l := range labels {
		x := marginLeft + slot*(float64(i)+0.5)
		c.Texts = append(c.Texts, text{X: x, Y: marginTop + plotH + 16, Anchor: map[bool]string{true: "end", false: "middle"}[rotate], Class: "tick", Rotate: rotate, S: l})
	}
}

func maxLen(v []string) int {
	m := 0
	for _, s := range v {
		m = max(m, len(s))
	}
	return m
}

// series is one named set of values, one per category.
type series struct {
	Name   string
	Values []float64
	// Low and High, when set, are error bars (e.g. a 95 % CI).
	Low, High []float64
}

// barChart draws grouped bars: one group per label, one bar per series.
func barChart(name, title, yLabel string, labels []string, ss []series, f func(float64) string) chart {
	c := chart{Name: name, Title: title, YLabel: yLabel}
	maxV := 0.0
	for _, s := range ss {
		for i, v := range s.Values {
			maxV = max(maxV, v)
			if s.High != nil {
				maxV = max(maxV, s.High[i])
			}
		}
	}
	if len(labels) == 0 || maxV <= 0 {
		c.NoData = "no data"
		if len(labels) > 0 {
			c.NoData = "all values are zero"
		}
	}
	sc := newScale(maxV)
	c.axes(sc, f)
	if len(labels) == 0 {
		return c
	}
	slot := plotW / float64(len(labels))
	barW := slot * 0.8 / float64(len(ss))
	for si, s := range ss {
		color := palette[si%len(palette)]
		c.Legend = append(c.Legend, legendItem{Color: color, Label: s.Name})
		for i, v := range s.Values {
			x := marginLeft + slot*float64(i) + slot*0.1 + barW*float64(si)
			y := sc.y(v)
			c.Rects = append(c.Rects, rect{X: x, Y: y, W: math.Max(barW-1, 1), H: marginTop + plotH - y, Fill: color,
				Tip: fmt.Sprintf("%s, %s: %s", labels[i], s.Name, f(v))})
		}
	}
	c.xLabels(labels)
	return c
}

// stackedChart draws one stacked bar of counts per label (whole-number
// ticks).
func stackedChart(name, title, yLabel string, labels []string, ss []series, f func(float64) string) chart {
	c := chart{Name: name, Title: title, YLabel: yLabel}
	totals := make([]float64, len(labels))
	for _, s := range ss {
		for i, v := range s.Values {
			totals[i] += v
		}
	}
	maxV := 0.0
	for _, t := range totals {
		maxV = max(maxV, t)
	}
	sc := newCountScale(maxV)
	c.axes(sc, f)
	if len(labels) == 0 {
		c.NoData = "no data"
		return c
	}
	if maxV == 0 {
		c.NoData = "no errors"
	}
	slot := plotW / float64(len(labels))
	base := make([]float64, len(labels))
	for si, s := range ss {
		color := palette[si%len(palette)]
		used := false
		for i, v := range s.Values {
			if v <= 0 {
				continue
			}
			used = true
			y0, y1 := sc.y(base[i]), sc.y(base[i]+v)
			c.Rects = append(c.Rects, rect{X: marginLeft + slot*float64(i) + slot*0.2, Y: y1, W: slot * 0.6, H: y0 - y1, Fill: color,
				Tip: fmt.Sprintf("%s, %s: %s", labels[i], s.Name, f(v))})
			base[i] += v
		}
		if used {
			c.Legend = append(c.Legend, legendItem{Color: color, Label: s.Name})
		}
	}
	c.xLabels(labels)
	return c
}

// lineChart draws one line per series over the categories, with points and
// optional error bars.
func lineChart(name, title, yLabel, xLabel string, labels []string, ss []series, f func(float64) string) chart {
	c := chart{Name: name, Title: title, YLabel: yLabel, XLabel: xLabel}
	maxV := 0.0
	for _, s := range ss {
		for i, v := range s.Values {
			maxV = max(maxV, v)
			if s.High != nil {
				maxV = max(maxV, s.High[i])
			}
		}
	}
	if len(labels) == 0 {
		c.NoData = "no data"
	}
	sc := newScale(maxV)
	c.axes(sc, f)
	if len(labels) == 0 {
		return c
	}
	slot := plotW / float64(len(labels))
	for si, s := range ss {
		color := palette[si%len(palette)]
		c.Legend = append(c.Legend, legendItem{Color: color, Label: s.Name})
		var pts []string
		for i, v := range s.Values {
			x := marginLeft + slot*(float64(i)+0.5)
			y := sc.y(v)
			pts = append(pts, strconv.FormatFloat(x, 'f', 1, 64)+","+strconv.FormatFloat(y, 'f', 1, 64))
			tip := fmt.Sprintf("%s, %s: %s", labels[i], s.Name, f(v))
			if s.Low != nil && s.High != nil && s.High[i] > s.Low[i] {
				yl, yh := sc.y(s.Low[i]), sc.y(s.High[i])
				c.Lines = append(c.Lines,
					line{X1: x, Y1: yl, X2: x, Y2: yh, Class: "err", Stroke: color},
					line{X1: x - 4, Y1: yl, X2: x + 4, Y2: yl, Class: "err", Stroke: color},
					line{X1: x - 4, Y1: yh, X2: x + 4, Y2: yh, Class: "err", Stroke: color})
				tip += fmt.Sprintf(" (95%% CI %s – %s)", f(s.Low[i]), f(s.High[i]))
			}
			c.Circles = append(c.Circles, circle{X: x, Y: y, R: 3.5, Fill: color, Tip: tip})
		}
		if len(pts) > 1 {
			c.Polylines = append(c.Polylines, polyline{Points: strings.Join(pts, " "), Stroke: color})
		}
	}
	c.xLabels(labels)
	return c
}

// Marks is the number of data marks drawn (bars and points).
func (c chart) Marks() int { return len(c.Rects) + len(c.Circles) }

func fmtCount(v float64) string { return strconv.FormatFloat(v, 'f', 0, 64) }
