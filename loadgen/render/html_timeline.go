package render

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/report"
)

// Charts of the workloads the peers have, present only when the report
// has their data: the server's own metrics over time (runs with
// server_metrics.timeline) and the TTFT of first against later turns
// (multi-turn runs, and the aggregates of their repeats).
const (
	ChartServerCacheTimeline    = "server-cache-timeline"
	ChartServerRequestsTimeline = "server-requests-timeline"
	ChartTurnsTTFT              = "ttft-first-vs-later-turns"
)

// maxTimelinePoints bounds the points drawn per run and series (a long
// run's scrapes are thinned evenly).
const maxTimelinePoints = 300

// workloadCharts returns the optional charts above, in that order.
func workloadCharts(doc *report.Document, labels []string) []chart {
	var out []chart
	var segs []segment
	for i, r := range doc.Runs {
		if r.Aggregate || r.ServerMetrics == nil || len(r.ServerMetrics.Timeline) == 0 {
			continue
		}
		segs = append(segs, newSegment(labels[i], r.ServerMetrics.Timeline))
	}
	if len(segs) > 0 {
		out = append(out,
			timelineChart(ChartServerCacheTimeline, "Server: KV-cache usage and prefix-cache hits over time", "ratio", segs,
				[]string{"kv_cache_usage_ratio", "prefix_cache_hit_ratio"}, []string{"KV-cache usage", "prefix-cache hit ratio"},
				report.Percent, 1),
			timelineChart(ChartServerRequestsTimeline, "Server: requests running and waiting over time", "requests", segs,
				[]string{"requests_running", "requests_waiting"}, []string{"running", "waiting"}, report.Num, 0))
	}
	var tl []string
	ss := []series{{Name: "first turn p50"}, {Name: "later turns p50"}, {Name: "first turn p99"}, {Name: "later turns p99"}}
	for i, r := range doc.Runs {
		if r.Turns == nil { // an aggregate's: the mean of its repeats' (stats.AggregateTurns)
			continue
		}
		tl = append(tl, labels[i])
		for j, v := range []float64{r.Turns.FirstTurnTTFT.P50, r.Turns.LaterTurnsTTFT.P50, r.Turns.FirstTurnTTFT.P99, r.Turns.LaterTurnsTTFT.P99} {
			ss[j].Values = append(ss[j].Values, v)
		}
	}
	if len(tl) > 0 {
		c := barChart(ChartTurnsTTFT, "TTFT: first turn against later turns (which resend the conversation)", "seconds", tl, ss, report.SecondsTick)
		c.Caption = "Later turns' prompts hold the whole conversation so far: a server whose prefix cache keeps it answers them about as fast as first turns."
		out = append(out, c)
	}
	return out
}

// workloadSettingsRows describe a trace replay and multi-turn
// conversations in the settings table.
func workloadSettingsRows(s report.Settings) []kv {
	var out []kv
	if t := s.Trace; t.File != "" {
		v := fmt.Sprintf("%s (%s), %d requests", t.File, t.Format, t.Requests)
		if t.Skipped > 0 {
			v += fmt.Sprintf(", %d skipped (zero tokens)", t.Skipped)
		}
		if t.ArrivalTimes {
			v += ", at its arrival times"
			if t.Speedup != 1 {
				v += " ÷ " + strconv.FormatFloat(t.Speedup, 'g', -1, 64)
			}
		} else {
			v += ", lengths only"
		}
		out = append(out, kv{"Trace", v})
	}
	if m := s.MultiTurn; m.Turns > 0 {
		out = append(out, kv{"Turns per conversation", strconv.Itoa(m.Turns)}, kv{"Think time (s)", strconv.FormatFloat(m.ThinkTimeSeconds, 'g', -1, 64)})
	}
	return out
}

// segment is one run's stretch of the timeline.
type segment struct {
	label   string
	samples []report.ServerSample
	span    float64 // seconds
}

func newSegment(label string, tl []report.ServerSample) segment {
	s := segment{label: label}
	step := (len(tl) + maxTimelinePoints - 1) / maxTimelinePoints
	for i := 0; i < len(tl); i += step {
		s.samples = append(s.samples, tl[i])
	}
	if last := tl[len(tl)-1]; s.samples[len(s.samples)-1].OffsetSeconds != last.OffsetSeconds {
		s.samples = append(s.samples, last) // keep the end of the run
	}
	for _, x := range s.samples {
		s.span = math.Max(s.span, x.OffsetSeconds)
	}
	return s
}

// timelineChart draws the named series of the runs' scrapes against time,
// the runs laid end to end (separated by a vertical line, labelled under
// the axis). fixedMax > 0 fixes the top of the y axis (ratios); 0 scales
// to the data with whole-number ticks.
func timelineChart(name, title, yLabel string, segs []segment, keys, names []string, f func(float64) string, fixedMax float64) chart {
	c := chart{Name: name, Title: title, YLabel: yLabel, XLabel: "time, runs end to end (seconds)"}
	total, maxV, seen := 0.0, 0.0, false
	for _, s := range segs {
		total += s.span
		for _, x := range s.samples {
			for _, k := range keys {
				if v, ok := x.Values[k]; ok {
					maxV, seen = math.Max(maxV, v), true
				}
			}
		}
	}
	sc := newCountScale(maxV)
	if fixedMax > 0 {
		sc = newScale(fixedMax)
	}
	c.axes(sc, f)
	if !seen {
		c.NoData = "the server did not report these metrics"
		return c
	}
	if total <= 0 {
		total = 1
	}
	xOf := func(t float64) float64 { return marginLeft + t/total*plotW }
	for si, k := range keys {
		color := palette[si%len(palette)]
		used := false
		x0 := 0.0
		for _, s := range segs {
			var pts []string
			flush := func() { // a line through the points so far
				if len(pts) > 1 {
					c.Polylines = append(c.Polylines, polyline{Points: strings.Join(pts, " "), Stroke: color})
				}
				pts = pts[:0]
			}
			for _, x := range s.samples {
				v, ok := x.Values[k]
				if !ok {
					flush() // a gap: no line across it
					continue
				}
				used = true
				t := math.Max(x.OffsetSeconds, 0)
				px, py := xOf(x0+t), sc.y(v)
				pts = append(pts, strconv.FormatFloat(px, 'f', 1, 64)+","+strconv.FormatFloat(py, 'f', 1, 64))
				c.Circles = append(c.Circles, circle{X: px, Y: py, R: 2, Fill: color,
					Tip: fmt.Sprintf("%s, %s s: %s %s", s.label, report.Sig(t, 3), names[si], f(v))})
			}
			flush()
			x0 += s.span
		}
		if used {
			c.Legend = append(c.Legend, legendItem{Color: color, Label: names[si]})
		}
	}
	// Run boundaries and labels.
	x0 := 0.0
	rotate := len(segs) > 6
	for i, s := range segs {
		if i > 0 {
			c.Lines = append(c.Lines, line{X1: xOf(x0), Y1: marginTop, X2: xOf(x0), Y2: marginTop + plotH, Class: "grid"})
		}
		c.Texts = append(c.Texts, text{X: xOf(x0 + s.span/2), Y: marginTop + plotH + 16, Anchor: map[bool]string{true: "end", false: "middle"}[rotate],
			Class: "tick", Rotate: rotate, S: s.label})
		x0 += s.span
	}
	return c
}
