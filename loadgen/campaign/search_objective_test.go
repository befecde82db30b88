package campaign

import (
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestParseObjective(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want report.SearchObjective
	}{
		{"ttft:p99<=500ms", report.SearchObjective{Text: "ttft:p99<=500ms", Metric: "ttft", Stat: "p99", Op: "<=", Threshold: 0.5}},
		{" itl:mean <= 1.5s ", report.SearchObjective{Text: "itl:mean <= 1.5s", Metric: "itl", Stat: "mean", Op: "<=", Threshold: 1.5}},
		{"goodput>=0.95", report.SearchObjective{Text: "goodput>=0.95", Metric: "goodput", Op: ">=", Threshold: 0.95}},
		{"goodput>=90%", report.SearchObjective{Text: "goodput>=90%", Metric: "goodput", Op: ">=", Threshold: 0.9}},
		{"errors<=0.01", report.SearchObjective{Text: "errors<=0.01", Metric: "errors", Op: "<=", Threshold: 0.01}},
	} {
		got, err := ParseObjective("--slo", tc.in)
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"ttft=500ms":      `--slo "ttft=500ms": want METRIC:STAT<=DURATION (e.g. ttft:p99<=500ms), goodput>=RATIO or errors<=RATIO`,
		"ttft<=500ms":     `--slo "ttft<=500ms": ttft needs a statistic: ttft:STAT with STAT one of p50, p90, p95, p99, mean, max`,
		"ttft:p42<=500ms": `--slo "ttft:p42<=500ms": unknown statistic "p42" (want p50, p90, p95, p99, mean, max)`,
		"rtt:p99<=5ms":    `--slo "rtt:p99<=5ms": unknown metric "rtt" (want ttft, itl, tpot, e2e, goodput or errors)`,
		"ttft:p99>=500ms": `--slo "ttft:p99>=500ms": a latency is bounded from above: use <=`,
		"ttft:p99<=-5ms":  `--slo "ttft:p99<=-5ms": "-5ms" is not a positive duration (e.g. 500ms, 1.5s)`,
		"goodput<=0.9":    `--slo "goodput<=0.9": goodput is bounded with >=`,
		"goodput>=1.5":    `--slo "goodput>=1.5": "1.5" is not a ratio between 0 and 1 (or 0% and 100%)`,
		"errors:p99<=0.1": `--slo "errors:p99<=0.1": errors takes no statistic (write errors<=RATIO)`,
		"goodput>=lots":   `--slo "goodput>=lots": "lots" is not a ratio (0-1, or a percentage such as 95%)`,
	} {
		if _, err := ParseObjective("--slo", in); err == nil || err.Error() != want {
			t.Errorf("%q: err %v\nwant %s", in, err, want)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	s := report.Summary{RequestsCompleted: 8, RequestsFailed: 2, GoodRequests: 7,
		TTFT: report.Dist{Count: 8, P99: 0.4, Mean: 0.2}}
	for _, tc := range []struct {
		obj      string
		value    float64
		measured bool
		passed   bool
	}{
		{"ttft:p99<=500ms", 0.4, true, true},
		{"ttft:p99<=400ms", 0.4, true, true}, // the bound is inclusive
		{"ttft:p99<=399ms", 0.4, true, false},
		{"ttft:mean<=100ms", 0.2, true, false},
		{"itl:p99<=1s", 0, false, false}, // no ITL sample: missed
		{"goodput>=0.7", 0.7, true, true},
		{"goodput>=0.71", 0.7, true, false},
		{"errors<=0.2", 0.2, true, true},
		{"errors<=0.1", 0.2, true, false},
	} {
		o, err := ParseObjective("--slo", tc.obj)
		if err != nil {
			t.Fatal(err)
		}
		c := Check(o, &s)
		if c.Value != tc.value || c.Measured != tc.measured || c.Passed != tc.passed {
			t.Errorf("%s: %+v", tc.obj, c)
		}
	}
	if c := Check(report.SearchObjective{Metric: "goodput", Op: ">=", Threshold: 0}, &report.Summary{}); c.Measured || c.Passed {
		t.Errorf("a run without requests: %+v", c)
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	ok := func() SearchConfig {
		return SearchConfig{Mode: report.ModeClosed, Objectives: []report.SearchObjective{{Metric: "errors", Op: "<="}}, Start: 1, Max: 8,
			Growth: 2, Precision: 0.05, MaxProbes: 10, Repeats: 1}
	}
	for want, mod := range map[string]func(*SearchConfig){
		"Start must be a whole number of users in closed loop, got 1.5": func(c *SearchConfig) { c.Start = 1.5 },
		"Max (0.5) must be at least Start (1)":                          func(c *SearchConfig) { c.Max = 0.5 },
		"Growth must be above 1, got 1":                                 func(c *SearchConfig) { c.Growth = 1 },
		"Precision must be in (0, 1], got 0":                            func(c *SearchConfig) { c.Precision = 0 },
		"Objectives: no objective given":                                func(c *SearchConfig) { c.Objectives = nil },
		"Repeats must be at least 1, got 0":                             func(c *SearchConfig) { c.Repeats = 0 },
		"MaxProbes must be at least 1, got 0":                           func(c *SearchConfig) { c.MaxProbes = 0 },
	} {
		c := ok()
		mod(&c)
		if err := c.Validate(); err == nil || err.Error() != want {
			t.Errorf("err %v, want %s", err, want)
		}
	}
	c := ok()
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
