package compare

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestCompareTokens: compare lists each report's lengths per level, asked
// for against the server's counts, in its text and JSON, and warns about
// a report whose server counted more than 5 % off.
func TestCompareTokens(t *testing.T) {
	a := sweep("m", map[float64][]rep{1: {{10, 0.1, 40, 2, 0.05}}}, 2, true)
	b := sweep("m", map[float64][]rep{1: {{11, 0.1, 40, 2, 0.05}}}, 2, true)
	a.Runs[0].Summary.InputTokens = report.Dist{Count: 3, Mean: 257, P50: 256, P99: 262}
	a.Runs[0].Summary.InputTokensRequested = &report.Dist{Count: 3, Mean: 256, P50: 256, P99: 256}
	b.Runs[0].Summary.InputTokens = report.Dist{Count: 3, Mean: 118, P50: 117, P99: 120}
	b.Runs[0].Summary.InputTokensRequested = &report.Dist{Count: 3, Mean: 32, P50: 32, P99: 32}
	res, err := Compare([]Input{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Reports[0].Tokens) != 1 || res.Reports[1].Tokens[0].InputRequested.P50 != 32 || res.Reports[1].Tokens[0].Input.P50 != 117 {
		t.Fatalf("tokens %+v %+v", res.Reports[0].Tokens, res.Reports[1].Tokens)
	}
	warned := 0
	for _, w := range res.Warnings {
		if strings.Contains(w, "input tokens: the server counted") {
			warned++
			if !strings.HasPrefix(w, "b.json ") {
				t.Errorf("warning %q names the wrong report", w)
			}
		}
	}
	if warned != 1 {
		t.Errorf("warnings %q, want one about b.json's input tokens", res.Warnings)
	}
	var buf bytes.Buffer
	if err := res.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	for _, want := range []string{"tokens per request, mean/p50/p99 (asked for, and as the server counted them):", "256.0/256/256", "257.0/256/262", "32.0/32/32", "118.0/117/120"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	js, _ := json.Marshal(res)
	if !strings.Contains(string(js), `"input_tokens_requested":{"count":3,"mean":32`) {
		t.Errorf("JSON lacks the lengths asked for: %.400s", js)
	}
}
