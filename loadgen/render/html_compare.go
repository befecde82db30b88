package render

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/compare"
	"github.com/gpulens/gpulens/loadgen/report"
)

// The comparison page (gpulens-loadgen compare --html): the reports side
// by side, one chart per metric against the level with each report's mean
// and 95 % confidence interval, and the verdicts per level.

//go:embed compare.html.tmpl
var compareTemplate string

var comparePage = template.Must(template.New("compare").Funcs(template.FuncMap{
	"f1":       func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"stat":     compare.FormatStat,
	"relative": compare.FormatRelative,
	"verdict":  func(c compare.Comparison) string { return c.VerdictText("A", "B") },
	"short": func(s string) string {
		if len(s) > 12 {
			return s[:12] + "…"
		}
		return s
	},
	"usd":    func(v float64) string { return report.USD(v, 3) },
	"tokens": fmtTokens,
	// level: one level, as the search comparison shows it.
	"level": func(mode string, l float64) string { return report.Level(mode == report.ModeOpen, l) },
	"levels": func(mode string, ls []float64) string {
		var s []string
		for _, l := range ls {
			s = append(s, report.Level(mode == report.ModeOpen, l))
		}
		return strings.Join(s, ", ")
	},
	"labels": func(m map[string]string) string {
		var s []string
		for k, v := range m {
			s = append(s, k+"="+v)
		}
		sort.Strings(s)
		return strings.Join(s, ", ")
	},
	"verdictClass": func(c compare.Comparison, p compare.Pair) string {
		switch {
		case c.Verdict == compare.VerdictDifferent && c.Winner == p.A:
			return "win-a"
		case c.Verdict == compare.VerdictDifferent:
			return "win-b"
		case c.Verdict == compare.VerdictNoRepeats:
			return "norep"
		}
		return "noise"
	},
}).Parse(compareTemplate))

// ChartComparePrefix starts the data-chart name of every comparison chart:
// "compare-<pair>-<metric key>", pairs counted from 1.
const ChartComparePrefix = "compare-"

type compareView struct {
	Title  string
	Result *compare.Result
	Pairs  []comparePairView
}

type comparePairView struct {
	compare.Pair
	Index  int
	Charts []chart
	// The pair's verdicts counted (compare.Pair.Tally).
	WinsA, WinsB, Noise, NoRepeats int
}

// WriteCompareFile renders a comparison into an HTML file at path
// (report.Write: a regular file atomically, a device, FIFO or symlink
// in place).
func WriteCompareFile(path string, res *compare.Result) error {
	if err := report.Write(path, func(w io.Writer) error { return RenderCompare(w, res) }); err != nil {
		return fmt.Errorf("writing HTML comparison %s: %w", path, err)
	}
	return nil
}

// RenderCompare writes the HTML page of a comparison.
func RenderCompare(w io.Writer, res *compare.Result) error {
	v := compareView{Result: res, Title: "gpulens comparison"}
	var names []string
	for _, r := range res.Reports {
		names = append(names, r.Name)
	}
	v.Title += ": " + strings.Join(names, " vs ")
	for i, p := range res.Pairs {
		pv := comparePairView{Pair: p, Index: i + 1, Charts: compareCharts(i+1, p)}
		pv.WinsA, pv.WinsB, pv.Noise, pv.NoRepeats = p.Tally()
		v.Pairs = append(v.Pairs, pv)
	}
	if err := comparePage.Execute(w, v); err != nil {
		return fmt.Errorf("rendering HTML comparison: %w", err)
	}
	return nil
}

// compareCharts draws, for every metric compared at some level, A's and
// B's means against the level with their 95 % confidence intervals. A
// chart shows the levels at which its metric was compared (the others are
// named in the result's notes).
func compareCharts(index int, p compare.Pair) []chart {
	var out []chart
	for _, m := range compare.Metrics {
		sa, sb := series{Name: "A: " + p.A}, series{Name: "B: " + p.B}
		var labels []string
		ci := false
		for _, l := range p.Levels {
			c, ok := metricAt(l, m.Key)
			if !ok {
				continue
			}
			labels = append(labels, l.Label)
			for _, x := range []struct {
				s  *series
				st report.Stat
			}{{&sa, c.A}, {&sb, c.B}} {
				lo, hi := x.st.Mean, x.st.Mean
				if x.st.N > 1 {
					lo, hi, ci = math.Max(x.st.CI95Low, 0), x.st.CI95High, true
				}
				x.s.Values, x.s.Low, x.s.High = append(x.s.Values, x.st.Mean), append(x.s.Low, lo), append(x.s.High, hi)
			}
		}
		if len(labels) == 0 {
			continue
		}
		ss := []series{sa, sb}
		if !ci {
			for i := range ss {
				ss[i].Low, ss[i].High = nil, nil
			}
		}
		unit, f := m.Unit, report.Num
		switch m.Unit {
		case "seconds":
			f = report.SecondsTick
		case "USD":
			f = report.USDTick
		case "bytes": // charted in GiB, for round ticks
			unit = "GiB"
			f = func(v float64) string { return report.Sig(v, 3) + " GiB" }
			for i := range ss {
				for _, vs := range [][]float64{ss[i].Values, ss[i].Low, ss[i].High} {
					for j := range vs {
						vs[j] /= 1 << 30
					}
				}
			}
		}
		title := m.Title + " against the level (" + m.Better + " is better)"
		c := lineChart(fmt.Sprintf("%s%d-%s", ChartComparePrefix, index, m.Key), title, unit, "level", labels, ss, f)
		if ci {
			c.Caption = "Points are the means of the repeats; bars their 95 % confidence intervals."
		}
		out = append(out, c)
	}
	return out
}

func metricAt(l compare.Level, key string) (compare.Comparison, bool) {
	for _, c := range l.Metrics {
		if c.Key == key {
			return c, true
		}
	}
	return compare.Comparison{}, false
}
