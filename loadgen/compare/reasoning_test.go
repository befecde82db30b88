package compare

import (
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// withReasoning gives every repeat of d a reasoning side whose answer
// TTFT p99 is answer(i) for the i-th repeat of a level.
func withReasoning(d *report.Document, answer func(i int) float64) *report.Document {
	for i := range d.Runs {
		r := &d.Runs[i]
		if r.Aggregate {
			continue
		}
		v := answer(r.Repeat)
		r.Summary.Reasoning = &report.ReasoningSummary{Requests: 100, AnswerTTFT: report.Dist{Count: 100, P50: v / 2, P99: v},
			AnswerITL: report.Dist{Count: 9000, P50: 0.01, P99: 0.02}}
	}
	return d
}

// TestCompareReasoning: the answer's TTFT is compared when the reports'
// model reasoned, apart from the TTFT of any token; without reasoning it
// is neither compared nor noted; a report without it is named.
func TestCompareReasoning(t *testing.T) {
	levels := map[float64][]rep{1: {{10, 0.10, 40, 2, 0.05}, {12, 0.12, 40, 2, 0.04}, {14, 0.14, 40, 2, 0.03}}}
	// Same first token; B's answers start 1 s later (A 3.0, 3.1, 3.2 s).
	a := withReasoning(sweep("qwen3", levels, 2.5, false), func(i int) float64 { return 3 + 0.1*float64(i-1) })
	b := withReasoning(sweep("qwen3", levels, 2.5, false), func(i int) float64 { return 4 + 0.1*float64(i-1) })
	res, err := Compare([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	l := res.Pairs[0].Levels[0]
	if c := find(t, l, "ttft_seconds.p99"); c.Verdict != VerdictNoise || c.Difference != 0 {
		t.Errorf("TTFT (any token): %+v, want the same", c)
	}
	c := find(t, l, "reasoning.answer_ttft_seconds.p99")
	if c.Verdict != VerdictDifferent || c.Winner != "a.json" || !approx(c.A.Mean, 3.1) || !approx(c.B.Mean, 4.1) {
		t.Errorf("answer TTFT p99: %+v, want a.json better (3.1 s against 4.1 s)", c)
	}

	// Without reasoning: not compared, no note.
	res, err = Compare([]Input{{Name: "a.json", Doc: sweep("m", levels, 2.5, false)}, {Name: "b.json", Doc: sweep("m", levels, 2.5, false)}})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range res.Pairs[0].Levels[0].Metrics {
		if strings.HasPrefix(m.Key, "reasoning.") {
			t.Errorf("compared %s without reasoning", m.Key)
		}
	}
	for _, n := range res.Notes {
		if strings.Contains(n, "answer") {
			t.Errorf("note about the answer without reasoning: %s", n)
		}
	}

	// One side reasoned: the other is named.
	res, err = Compare([]Input{{Name: "a.json", Doc: a}, {Name: "plain.json", Doc: sweep("m", levels, 2.5, false)}})
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(res.Notes, "\n"); !strings.Contains(notes, "TTFT (answer) p99 not compared at some or all levels: missing in plain.json") {
		t.Errorf("notes %q do not name the report without reasoning", notes)
	}
}
