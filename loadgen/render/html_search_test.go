package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/compare"
	"github.com/gpulens/gpulens/loadgen/report"
)

// searchDoc is a closed-loop search that bracketed [6, 7]: 6 passed its
// two runs and its two confirming runs; 7 missed goodput in its last run.
func searchDoc() *report.Document {
	objs := []report.SearchObjective{{Text: "ttft:p99<=500ms", Metric: "ttft", Stat: "p99", Op: "<=", Threshold: 0.5},
		{Text: "goodput>=0.9", Metric: "goodput", Op: ">=", Threshold: 0.9}}
	ok := []report.SearchCheck{{Value: 0.120, Measured: true, Passed: true}, {Value: 1, Measured: true, Passed: true}}
	miss := []report.SearchCheck{{Value: 0.130, Measured: true, Passed: true}, {Value: 0.25, Measured: true}}
	s := &report.Search{Mode: report.ModeClosed, Objectives: objs, Rule: "every run passes", Start: 6, Max: 64, Growth: 2, Precision: 0.05,
		MaxProbes: 12, Repeats: 2, Pass: 6, Fail: 7, Outcome: report.SearchBracketed, Stop: "bracket c=6–c=7 within the precision (0.05)",
		Confirmed: true, Confirmation: "measured again …",
		Levels: []report.SearchLevel{
			{Level: 6, Passed: true, Runs: []report.SearchRun{{Name: "concurrency=6 repeat=1", Passed: true, Checks: ok},
				{Name: "concurrency=6 repeat=2", Passed: true, Checks: ok}, {Name: "concurrency=6 repeat=3", Passed: true, Confirm: true, Checks: ok}}},
			{Level: 7, Runs: []report.SearchRun{{Name: "concurrency=7 repeat=1", Passed: true, Checks: ok},
				{Name: "concurrency=7 repeat=2", Confirm: true, Checks: miss}}},
		},
		Probes: []report.SearchProbe{{Level: 6, Phase: report.PhaseGrow, Passed: true}, {Level: 12, Phase: report.PhaseGrow}}}
	runs := []report.Run{{Name: "concurrency=6 repeat=1", Level: 6, Repeat: 1, Settings: report.Settings{Mode: report.ModeClosed, Concurrency: 6}},
		{Name: "concurrency=7 repeat=1", Level: 7, Repeat: 1, Settings: report.Settings{Mode: report.ModeClosed, Concurrency: 7}}}
	return &report.Document{Metadata: report.Metadata{Command: "search", Model: "m", Search: s}, Runs: runs}
}

func TestRenderSearch(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := Render(&b, searchDoc()); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`<h2 id="search">Capacity under the SLO</h2>`,
		`<strong>capacity under the SLO: c=6 meets every objective, c=7 does not (confirmed by a second measurement of both ends)</strong>`,
		`<th>ttft:p99&lt;=500ms</th><th>goodput&gt;=0.9</th>`,
		`<tr data-level="6" class="bracket"><td class="n">c=6</td><td>pass ◀ highest passing</td><td class="n">3/3</td>`,
		`<td>120 ms, 120 ms, 120 ms<sup title="confirming run">c</sup></td>`,
		`<tr data-level="7" class="bracket"><td class="n">c=7</td><td><span class="flag">fail</span> ◀ lowest failing</td><td class="n">1/2</td>`,
		`<td>100 %, <span class="flag">25 % ✗</span><sup title="confirming run">c</sup></td>`,
		`Probes in order: grow c=6 pass → grow c=12 fail.`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// A report of run or sweep has no search section.
	doc := searchDoc()
	doc.Metadata.Search = nil
	b.Reset()
	if err := Render(&b, doc); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), `id="search"`) {
		t.Error("a report without a search has a search section")
	}
}

// TestRenderCompareSearches: the comparison page of two searches shows
// the verdict and each bracket end's evidence.
func TestRenderCompareSearches(t *testing.T) {
	t.Parallel()
	res, err := compare.Compare([]compare.Input{{Name: "a.json", Doc: searchDoc()}, {Name: "b.json", Doc: searchDoc()}})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := RenderCompare(&b, res); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, want := range []string{
		`<h2 id="searches">Capacity under the SLO</h2>`,
		`<p class="search-verdict" data-verdict="same_bracket"><strong>A (a.json): c=6 passes, c=7 fails; B (b.json): c=6 passes, c=7 fails: the same bracket</strong></p>`,
		`<tr><td>b.json</td><td>lowest failing</td><td class="n">c=7</td><td class="n">1/2</td><td>ttft:p99&lt;=500ms: 120 ms, 130 ms; goodput&gt;=0.9: 100 %, 25 % ✗</td></tr>`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
}
