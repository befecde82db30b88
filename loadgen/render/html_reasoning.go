package render

import (
	"github.com/gpulens/gpulens/loadgen/report"
)

// Charts of a reasoning model's runs (runs with a reasoning side,
// report.ReasoningSummary), present only when some run reasoned: the
// output split into reasoning and answer tokens, and the time to the
// first token of any kind against the time to the first answer token.
const (
	ChartReasoningTokens = "reasoning-vs-answer-tokens"
	ChartAnswerTTFT      = "ttft-any-vs-answer"
)

// reasoningRow is one run of the reasoning table.
type reasoningRow struct {
	Name  string
	Label string
	S     *report.Summary
	R     *report.ReasoningSummary
}

// reasoningRows are the rows of the reasoning table: every run that has
// a reasoning side; none when no run reasoned.
func reasoningRows(runs []report.Run, labels []string) []reasoningRow {
	var out []reasoningRow
	for i := range runs {
		if r := runs[i].Summary.Reasoning; r != nil {
			out = append(out, reasoningRow{Name: runs[i].Name, Label: labels[i], S: &runs[i].Summary, R: r})
		}
	}
	return out
}

// reasoningCharts returns the charts above, for the runs the per-run
// charts show (primary), or none when no run reasoned.
func reasoningCharts(doc *report.Document, labels []string) []chart {
	runs, rl := primary(doc.Runs, labels)
	var ls []string
	tok := []series{{Name: "reasoning tokens"}, {Name: "answer tokens"}}
	ttft := []series{{Name: "any token p50"}, {Name: "answer p50"}, {Name: "any token p99"}, {Name: "answer p99"}}
	for i := range runs {
		s := &runs[i].Summary
		r := s.Reasoning
		if r == nil {
			continue
		}
		ls = append(ls, rl[i])
		tok[0].Values = append(tok[0].Values, r.ReasoningTokens.Mean)
		tok[1].Values = append(tok[1].Values, r.AnswerTokens.Mean)
		for j, v := range []float64{s.TTFT.P50, r.AnswerTTFT.P50, s.TTFT.P99, r.AnswerTTFT.P99} {
			ttft[j].Values = append(ttft[j].Values, v)
		}
	}
	if len(ls) == 0 {
		return nil
	}
	tc := stackedChart(ChartReasoningTokens, "Output per request: reasoning against answer (mean tokens)", "tokens", ls, tok, report.Num)
	tc.Caption = "Both count as output tokens (throughput, cost); only the answer's are what the user reads."
	ac := barChart(ChartAnswerTTFT, "Time to first token of any kind against time to the first answer token", "seconds", ls, ttft, report.SecondsTick)
	ac.Caption = "The first token of any kind is usually reasoning; the answer starts after the model stops thinking."
	return []chart{tc, ac}
}
