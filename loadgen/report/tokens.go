package report

import "fmt"

// TokenDeviationRatio is how far (relative) the server's count of a run's
// input or output tokens may be from the lengths asked for, in mean or
// median, before TokenDeviations warns.
const TokenDeviationRatio = 0.05

// TokenDeviations says where a run's server-counted input or output
// tokens (mean or p50) differ from the lengths asked for by more than
// TokenDeviationRatio: the workload measured is then not the one in the
// settings. None when nothing was asked for or nothing completed.
func TokenDeviations(s *Summary) []string {
	var out []string
	check := func(what string, req *Dist, got Dist) {
		if req == nil || req.Count == 0 || got.Count == 0 {
			return
		}
		for _, m := range []struct {
			name     string
			want, is float64
		}{{"mean", req.Mean, got.Mean}, {"p50", req.P50, got.P50}} {
			if m.want > 0 && abs(m.is-m.want) > TokenDeviationRatio*m.want {
				out = append(out, fmt.Sprintf("%s tokens: the server counted %s %.1f where %.1f was asked for (%+.1f%%)",
					what, m.name, m.is, m.want, (m.is-m.want)/m.want*100))
				return
			}
		}
	}
	check("input", s.InputTokensRequested, s.InputTokens)
	check("output", s.OutputTokensRequested, s.OutputTokens)
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TokenCalibration is the calibration of the synthetic prompts against the
// server's token counts (loadgen/campaign): prompts of known word counts
// (Probes) counted by the server, and the straight line fitted through
// them, tokens = TokensPerWord × words + OverheadTokens (the chat template,
// a BOS token). Its requests are not part of any run.
type TokenCalibration struct {
	// Method is "tokenize" (the server's POST /tokenize, vLLM's) or
	// "usage" (the usage of requests with max_tokens 1).
	Method         string       `json:"method"`
	TokensPerWord  float64      `json:"tokens_per_word"`
	OverheadTokens float64      `json:"overhead_tokens"`
	Probes         []TokenProbe `json:"probes,omitempty"`
	// Error says why the calibration failed; the prompts then have one
	// word per token asked for.
	Error string `json:"error,omitempty"`
	// TimedOut: the server did not answer within the calibration's time
	// limit (the first run's own bound unless set); the campaign then
	// started no run.
	TimedOut bool `json:"timed_out,omitempty"`
	// Calibrated is what was fitted: "" the synthetic prompts (Probes are
	// their words and the server's counts, the line fitted through them
	// TokensPerWord and OverheadTokens) or CalibratedDatasetReplies (a
	// dataset's replies, which set the output lengths: Probes are the
	// replies counted, TokensPerWord their tokens over their words).
	Calibrated string `json:"calibrated,omitempty"`
	// SystemPromptWords is the generated system prompt's length in words
	// after the calibration sized it to the tokens asked for (the probes
	// had one word per token; OverheadTokens is moved by the difference).
	SystemPromptWords int `json:"system_prompt_words,omitempty"`
}

// CalibratedDatasetReplies is TokenCalibration.Calibrated of a dataset's
// replies counted in the server's tokens.
const CalibratedDatasetReplies = "dataset_replies"

// TokenProbe is one calibration prompt: its words and the server's count.
type TokenProbe struct {
	Words  int `json:"words"`
	Tokens int `json:"tokens"`
}

// TokenRow is one run's prompt and output lengths: asked for (nil when
// nothing was asked, e.g. a dataset's prompts) and counted by the server.
type TokenRow struct {
	Run             string `json:"run"`
	InputRequested  *Dist  `json:"input_tokens_requested,omitempty"`
	Input           Dist   `json:"input_tokens"`
	OutputRequested *Dist  `json:"output_tokens_requested,omitempty"`
	Output          Dist   `json:"output_tokens"`
}

// Tokens is r's TokenRow.
func Tokens(r *Run) TokenRow {
	s := &r.Summary
	return TokenRow{Run: r.Name, InputRequested: s.InputTokensRequested, Input: s.InputTokens, OutputRequested: s.OutputTokensRequested, Output: s.OutputTokens}
}

// HasTokenRequests reports whether a run of d asked for lengths (the
// reports then show asked against server-counted tokens).
func HasTokenRequests(d *Document) bool {
	for i := range d.Runs {
		if d.Runs[i].Summary.InputTokensRequested != nil || d.Runs[i].Summary.OutputTokensRequested != nil {
			return true
		}
	}
	return false
}

// FormatTokens writes a length distribution as "mean/p50/p99", "-" when
// absent.
func FormatTokens(d *Dist) string {
	if d == nil || d.Count == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f/%.0f/%.0f", d.Mean, d.P50, d.P99)
}
