package campaign

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Latency metrics an objective may bound, and their statistics.
var (
	latencyMetrics = []string{"ttft", "itl", "tpot", "e2e"}
	latencyStats   = []string{"p50", "p90", "p95", "p99", "mean", "max"}
)

// ParseObjective parses one objective: METRIC:STAT<=DURATION for a
// latency (ttft, itl, tpot, e2e; p50, p90, p95, p99, mean, max; a Go
// duration such as 500ms or 1.5s), goodput>=RATIO (the share of requests
// that were good, 0–1 or a percentage such as 95%) or errors<=RATIO (the
// share that failed). flag names the option in the error (package option).
func ParseObjective(flag option.Name, s string) (report.SearchObjective, error) {
	o := report.SearchObjective{Text: strings.TrimSpace(s)}
	bad := func(format string, args ...any) (report.SearchObjective, error) {
		return o, option.Errorf("%s %q: %s", flag, s, fmt.Sprintf(format, args...))
	}
	text := strings.ReplaceAll(o.Text, " ", "")
	var lhs, rhs string
	switch {
	case strings.Contains(text, "<="):
		lhs, rhs, _ = strings.Cut(text, "<=")
		o.Op = "<="
	case strings.Contains(text, ">="):
		lhs, rhs, _ = strings.Cut(text, ">=")
		o.Op = ">="
	default:
		return bad("want METRIC:STAT<=DURATION (e.g. ttft:p99<=500ms), goodput>=RATIO or errors<=RATIO")
	}
	metric, stat, hasStat := strings.Cut(lhs, ":")
	o.Metric = metric
	switch metric {
	case "goodput", "errors":
		if hasStat {
			return bad("%s takes no statistic (write %s%sRATIO)", metric, metric, map[string]string{"goodput": ">=", "errors": "<="}[metric])
		}
		if want := map[string]string{"goodput": ">=", "errors": "<="}[metric]; o.Op != want {
			return bad("%s is bounded with %s", metric, want)
		}
		r, err := parseRatio(rhs)
		if err != nil {
			return bad("%v", err)
		}
		o.Threshold = r
		return o, nil
	}
	if !contains(latencyMetrics, metric) {
		return bad("unknown metric %q (want %s, goodput or errors)", metric, strings.Join(latencyMetrics, ", "))
	}
	if !hasStat {
		return bad("%s needs a statistic: %s:STAT with STAT one of %s", metric, metric, strings.Join(latencyStats, ", "))
	}
	if !contains(latencyStats, stat) {
		return bad("unknown statistic %q (want %s)", stat, strings.Join(latencyStats, ", "))
	}
	if o.Op != "<=" {
		return bad("a latency is bounded from above: use <=")
	}
	d, err := time.ParseDuration(rhs)
	if err != nil || d <= 0 {
		return bad("%q is not a positive duration (e.g. 500ms, 1.5s)", rhs)
	}
	o.Stat, o.Threshold = stat, d.Seconds()
	return o, nil
}

func parseRatio(s string) (float64, error) {
	pct := strings.HasSuffix(s, "%")
	v, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a ratio (0-1, or a percentage such as 95%%)", s)
	}
	if pct {
		v /= 100
	}
	if !(v >= 0 && v <= 1) {
		return 0, fmt.Errorf("%q is not a ratio between 0 and 1 (or 0%% and 100%%)", s)
	}
	return v, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Check measures objective o in summary s: the value, whether it was
// measured (a latency needs at least one sample), and whether it meets o.
// A value not measured misses the objective.
func Check(o report.SearchObjective, s *report.Summary) report.SearchCheck {
	var c report.SearchCheck
	n := s.RequestsCompleted + s.RequestsFailed
	switch o.Metric {
	case "goodput":
		if n == 0 {
			return c
		}
		c.Value, c.Measured = float64(s.GoodRequests)/float64(n), true
	case "errors":
		if n == 0 {
			return c
		}
		c.Value, c.Measured = float64(s.RequestsFailed)/float64(n), true
	default:
		d := map[string]*report.Dist{"ttft": &s.TTFT, "itl": &s.ITL, "tpot": &s.TPOT, "e2e": &s.E2E}[o.Metric]
		if d == nil || d.Count == 0 {
			return c
		}
		c.Value = map[string]float64{"p50": d.P50, "p90": d.P90, "p95": d.P95, "p99": d.P99, "mean": d.Mean, "max": d.Max}[o.Stat]
		c.Measured = !math.IsNaN(c.Value)
	}
	if !c.Measured {
		return c
	}
	if o.Op == ">=" {
		c.Passed = c.Value >= o.Threshold
	} else {
		c.Passed = c.Value <= o.Threshold
	}
	return c
}

// CheckRun checks every objective in run r: its checks and whether it met
// them all.
func CheckRun(objs []report.SearchObjective, r *report.Run) ([]report.SearchCheck, bool) {
	checks := make([]report.SearchCheck, len(objs))
	ok := true
	for i, o := range objs {
		checks[i] = Check(o, &r.Summary)
		ok = ok && checks[i].Passed
	}
	return checks, ok
}
