package render

import (
	"bytes"
	"encoding/csv"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestTokensShown: the console shows asked against server-counted tokens
// per run (mean/p50/p99) and the calibration, and warns where they differ
// by more than 5 %; the CSV has the same figures; nothing is shown for a
// report that asked for no lengths.
func TestTokensShown(t *testing.T) {
	ok := report.Run{Name: "rate=1", Summary: report.Summary{
		InputTokens: report.Dist{Count: 4, Mean: 255.5, P50: 256, P99: 259}, InputTokensRequested: &report.Dist{Count: 4, Mean: 256, P50: 256, P99: 256},
		OutputTokens: report.Dist{Count: 4, Mean: 128, P50: 128, P99: 128}, OutputTokensRequested: &report.Dist{Count: 4, Mean: 128, P50: 128, P99: 128}}}
	off := report.Run{Name: "rate=2", Summary: report.Summary{
		InputTokens: report.Dist{Count: 4, Mean: 116.5, P50: 117, P99: 120}, InputTokensRequested: &report.Dist{Count: 4, Mean: 32, P50: 32, P99: 32},
		OutputTokens: report.Dist{Count: 4, Mean: 100, P50: 128, P99: 128}, OutputTokensRequested: &report.Dist{Count: 4, Mean: 128, P50: 128, P99: 128}}}
	d := &report.Document{Metadata: report.Metadata{TokenCalibration: &report.TokenCalibration{Method: "usage", TokensPerWord: 1.25, OverheadTokens: 17}},
		Runs: []report.Run{ok, off}}
	var b bytes.Buffer
	WriteTable(&b, d)
	out := b.String()
	for _, want := range []string{
		"input asked   input server   output asked  output server",
		"256.0/256/256  255.5/256/259  128.0/128/128  128.0/128/128",
		"32.0/32/32  116.5/117/120",
		"prompts calibrated by usage: 1.250 tokens per word + 17.0 tokens per request",
		"WARNING: rate=2: input tokens: the server counted mean 116.5 where 32.0 was asked for (+264.1%)",
		"WARNING: rate=2: output tokens: the server counted mean 100.0 where 128.0 was asked for (-21.9%)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WARNING: rate=1") {
		t.Errorf("a run within 5 %% warned:\n%s", out)
	}
	b.Reset()
	if err := WriteCSV(&b, d); err != nil {
		t.Fatal(err)
	}
	rows, _ := csv.NewReader(&b).ReadAll()
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	for name, want := range map[string]string{"input_tokens.p50": "117", "input_tokens_requested.p50": "32", "input_tokens.mean": "116.5",
		"input_tokens_requested.p99": "32", "output_tokens.mean": "100", "output_tokens_requested.mean": "128", "input_tokens.p99": "120"} {
		if got := rows[2][col[name]]; got != want {
			t.Errorf("CSV %s = %q, want %q", name, got, want)
		}
	}
	b.Reset()
	WriteTable(&b, &report.Document{Runs: []report.Run{{Name: "dataset", Summary: report.Summary{InputTokens: report.Dist{Count: 1, P50: 9}}}}})
	if strings.Contains(b.String(), "input asked") {
		t.Errorf("a token table without lengths asked for:\n%s", b.String())
	}
}
