package render

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func textReasoningDoc() *report.Document {
	return &report.Document{Runs: []report.Run{
		{Name: "c=1", Summary: report.Summary{RequestsCompleted: 4, TTFT: report.Dist{Count: 4, P50: 0.05},
			Reasoning: &report.ReasoningSummary{Requests: 3, NoAnswer: 1, ReasoningTokens: report.Dist{Count: 4, Mean: 250}, AnswerTokens: report.Dist{Count: 4, Mean: 80},
				AnswerTTFT: report.Dist{Count: 3, P50: 3.2, P99: 4.1}, AnswerITL: report.Dist{Count: 200, P50: 0.0125}, AnswerTPOT: report.Dist{Count: 3, P50: 0.013}}}},
		{Name: "c=2", Summary: report.Summary{RequestsCompleted: 4, TTFT: report.Dist{Count: 4, P50: 0.06}}},
	}}
}

func TestTableReasoning(t *testing.T) {
	var buf bytes.Buffer
	WriteTable(&buf, textReasoningDoc())
	out := buf.String()
	for _, want := range []string{"TTFT p50 ms (any)", "TTFT p50 ms (answer)", " 250.0 ", " 80.0 ", " 50.0 ", " 3200.0 ", " 4100.0 ", " 12.50 ", " 13.00 ",
		"TTFT above counts the first token of any kind, reasoning included"} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// One row: the run without reasoning has none.
	if strings.Count(out, "c=2") != 1 {
		t.Errorf("c=2 in the reasoning table:\n%s", out)
	}
	buf.Reset()
	doc := textReasoningDoc()
	doc.Runs = doc.Runs[1:]
	WriteTable(&buf, doc)
	if strings.Contains(buf.String(), "answer") {
		t.Errorf("reasoning table without reasoning:\n%s", buf.String())
	}
}

func TestCSVReasoning(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteCSV(&buf, textReasoningDoc()); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, k := range rows[0] {
		col[k] = i
	}
	for key, want := range map[string][2]string{
		"reasoning.answer_ttft_seconds.p50": {"3.2", ""},
		"reasoning.answer_tpot_seconds.p50": {"0.013", ""},
		"reasoning.reasoning_tokens.mean":   {"250", ""},
		"reasoning.answer_tokens.mean":      {"80", ""},
		"ttft_seconds.p50":                  {"0.05", "0.06"},
	} {
		i, ok := col[key]
		if !ok {
			t.Errorf("no column %s", key)
			continue
		}
		if got := [2]string{rows[1][i], rows[2][i]}; got != want {
			t.Errorf("%s = %q, want %q", key, got, want)
		}
	}
}
