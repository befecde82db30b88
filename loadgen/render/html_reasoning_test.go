package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// reasoningDoc: two levels of a reasoning model; at c=4 some requests ran
// out of tokens before answering.
func reasoningDoc() *report.Document {
	run := func(level float64, ttft, answer float64, noAnswer int) report.Run {
		return report.Run{Name: report.RunName(report.ModeClosed, level, 0), Level: level,
			Settings: report.Settings{Mode: report.ModeClosed, Concurrency: int(level)},
			Summary: report.Summary{RequestsCompleted: 10, TTFT: report.Dist{Count: 10, P50: ttft, P99: 2 * ttft},
				Reasoning: &report.ReasoningSummary{Requests: 10, NoAnswer: noAnswer,
					ReasoningTokens: report.Dist{Count: 10, Mean: 300}, AnswerTokens: report.Dist{Count: 10, Mean: 100},
					AnswerTTFT: report.Dist{Count: 10 - noAnswer, P50: answer, P99: 2 * answer}, AnswerITL: report.Dist{Count: 900, P50: 0.012, P99: 0.02},
					AnswerTPOT: report.Dist{Count: 10 - noAnswer, P50: 0.013}}}}
	}
	return &report.Document{Metadata: report.Metadata{Model: "qwen3"}, Runs: []report.Run{run(1, 0.05, 3.65, 0), run(4, 0.08, 4.5, 2)}}
}

func TestReasoningSection(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, reasoningDoc()); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	for _, want := range []string{
		`<figcaption>Time to first token (of any kind: reasoning included)`,
		`TTFT is the time to the first generated token of any kind, reasoning included. The reasoning table below times the answer alone.`,
		`<h2>Reasoning and answer</h2>`,
		`<tr><td>concurrency=1</td><td class="n">c=1</td><td class="n">10</td><td class="n">300.0</td><td class="n">100.0</td><td class="n">50 ms</td><td class="n">3.65 s</td>`,
		`2 ran out of tokens before answering`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	// Reasoning against answer, stacked: 2 runs × 2; TTFT any against
	// answer: 2 runs × 4 bars.
	for name, n := range map[string]int{ChartReasoningTokens: 4, ChartAnswerTTFT: 8} {
		if tips := chartTips(page, name); len(tips) != n {
			t.Errorf("chart %s: %d marks %q, want %d", name, len(tips), tips, n)
		}
	}
	if tips := chartTips(page, ChartAnswerTTFT); len(tips) > 1 && !strings.Contains(strings.Join(tips, "|"), "3.65 s") {
		t.Errorf("answer TTFT chart tips %q lack the answer's p50 3.65 s", tips)
	}

	// A run without reasoning: no table, no charts, TTFT still named.
	doc := reasoningDoc()
	for i := range doc.Runs {
		doc.Runs[i].Summary.Reasoning = nil
	}
	buf.Reset()
	if err := Render(&buf, doc); err != nil {
		t.Fatal(err)
	}
	page = buf.String()
	if strings.Contains(page, "Reasoning and answer") || chartTips(page, ChartReasoningTokens) != nil || strings.Contains(page, ChartAnswerTTFT) {
		t.Error("reasoning section or charts without reasoning")
	}
	if !strings.Contains(page, "TTFT is the time to the first generated token of any kind, reasoning included.</p>") {
		t.Error("the page does not say which TTFT it shows")
	}
}
