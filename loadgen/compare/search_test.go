package compare

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// searchInput is a closed-loop search report that bracketed [pass, fail]
// with one run at each end; objective is its one objective.
func searchInput(name string, pass, fail float64, objective string) Input {
	o := report.SearchObjective{Text: objective, Metric: "goodput", Op: ">=", Threshold: 0.9}
	if objective != "goodput>=0.9" {
		o.Threshold = 0.8
	}
	ok := []report.SearchCheck{{Value: 1, Measured: true, Passed: true}}
	miss := []report.SearchCheck{{Value: 0.3, Measured: true}}
	s := &report.Search{Mode: report.ModeClosed, Objectives: []report.SearchObjective{o}, Pass: pass, Fail: fail, Outcome: report.SearchBracketed,
		Confirmed: true, Levels: []report.SearchLevel{
			{Level: pass, Passed: true, Runs: []report.SearchRun{{Passed: true, Checks: ok}, {Passed: true, Confirm: true, Checks: ok}}},
			{Level: fail, Runs: []report.SearchRun{{Checks: miss}, {Confirm: true, Checks: miss}}},
		}}
	run := func(l float64) report.Run {
		return report.Run{Name: report.RunName(report.ModeClosed, l, 1), Level: l, Repeat: 1, Settings: report.Settings{Mode: report.ModeClosed, Concurrency: int(l)},
			Summary: report.Summary{RequestsCompleted: 10, RequestThroughput: l}}
	}
	return Input{Name: name, Doc: &report.Document{Metadata: report.Metadata{Command: "search", Search: s}, Runs: []report.Run{run(pass), run(fail)}}}
}

func TestCompareSearches(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		a, b       Input
		verdict    string
		text       string
		levelPairs int
	}{
		{"B higher", searchInput("a.json", 6, 7, "goodput>=0.9"), searchInput("b.json", 9, 10, "goodput>=0.9"), SearchBHigher,
			"A (a.json): c=6 passes, c=7 fails; B (b.json): c=9 passes, c=10 fails: B carries more load under the SLO", 0},
		{"A higher, touching", searchInput("a.json", 7, 8, "goodput>=0.9"), searchInput("b.json", 6, 7, "goodput>=0.9"), SearchAHigher,
			"A carries more load under the SLO", 1},
		{"same", searchInput("a.json", 6, 7, "goodput>=0.9"), searchInput("b.json", 6, 7, "goodput>=0.9"), SearchSame, "the same bracket", 1},
		{"overlap", searchInput("a.json", 6, 9, "goodput>=0.9"), searchInput("b.json", 7, 10, "goodput>=0.9"), SearchOverlap,
			"the brackets overlap", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Compare([]Input{tc.a, tc.b})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Searches) != 1 {
				t.Fatalf("%d search comparisons", len(res.Searches))
			}
			sp := res.Searches[0]
			if sp.Verdict != tc.verdict || !strings.Contains(sp.Text, tc.text) || len(res.Pairs) != tc.levelPairs {
				t.Errorf("verdict %s, text %q, %d level pairs", sp.Verdict, sp.Text, len(res.Pairs))
			}
			if len(sp.Ends) != 4 || sp.Ends[0].End != "pass" || sp.Ends[0].RunsPassed != 2 || sp.Ends[1].End != "fail" ||
				sp.Ends[1].Values[0][1] != "30 % ✗" || sp.Ends[3].Report != "b.json" {
				t.Errorf("ends %+v", sp.Ends)
			}
			var b bytes.Buffer
			if err := res.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(b.String(), "search: "+sp.Text) || !strings.Contains(b.String(), "goodput>=0.9: 100 %, 100 %") {
				t.Errorf("text:\n%s", b.String())
			}
		})
	}
	res, err := Compare([]Input{searchInput("a.json", 6, 7, "goodput>=0.9"), searchInput("b.json", 6, 7, "goodput>=0.8")})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(res.Warnings, "\n"), "a.json and b.json searched for other objectives (goodput>=0.9; goodput>=0.8)") {
		t.Errorf("warnings %q", res.Warnings)
	}
	open := searchInput("b.json", 6, 7, "goodput>=0.9")
	open.Doc.Metadata.Search.Mode = report.ModeOpen
	if _, err := Compare([]Input{searchInput("a.json", 6, 7, "goodput>=0.9"), open}); err == nil ||
		err.Error() != "a.json searched closed-loop levels and b.json open-loop ones: not comparable" {
		t.Errorf("modes differ: %v", err)
	}
}
