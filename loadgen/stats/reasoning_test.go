package stats

import (
	"math"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

const ms = time.Millisecond

// reasoningRecords: request 0 reasons for 3 tokens (10, 20, 30 ms after
// its send at 0) and answers 3 (50, 60, 80 ms), ending at 80 ms; request
// 1, sent at 100 ms, answers at once (no reasoning: 2 tokens at 110 and
// 130 ms); request 2 reasons and runs out of tokens before its answer;
// request 3 failed.
func reasoningRecords() []report.Record {
	return []report.Record{
		{Index: 0, Intended: 0, Sent: 0, FirstToken: 10 * ms, FirstAnswerToken: 50 * ms, End: 80 * ms, OutputTokens: 6, ReasoningTokens: 3,
			ChunkOffsets: []time.Duration{10 * ms, 20 * ms, 30 * ms, 50 * ms, 60 * ms, 80 * ms}, ChunkTokens: []int32{1, 1, 1, 1, 1, 1},
			ChunkReasoningTokens: []int32{1, 1, 1, 0, 0, 0}},
		{Index: 1, Intended: 100 * ms, Sent: 100 * ms, FirstToken: 110 * ms, FirstAnswerToken: 110 * ms, End: 130 * ms, OutputTokens: 2,
			ChunkOffsets: []time.Duration{10 * ms, 30 * ms}, ChunkTokens: []int32{1, 1}},
		{Index: 2, Intended: 200 * ms, Sent: 200 * ms, FirstToken: 205 * ms, End: 215 * ms, OutputTokens: 2, ReasoningTokens: 2,
			ChunkOffsets: []time.Duration{5 * ms, 15 * ms}, ChunkTokens: []int32{1, 1}, ChunkReasoningTokens: []int32{1, 1}},
		{Index: 3, Intended: 300 * ms, Sent: 300 * ms, End: 310 * ms, ErrorClass: report.ErrHTTP5xx},
	}
}

func TestReasoningSummary(t *testing.T) {
	s := Summarize(reasoningRecords(), SummaryConfig{})
	r := s.Reasoning
	if r == nil {
		t.Fatal("no reasoning side")
	}
	near := func(what string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	if r.Requests != 2 || r.NoAnswer != 1 || r.ReasoningTokensTotal != 5 || r.AnswerTokensTotal != 5 {
		t.Errorf("requests %d, without answer %d, tokens %d + %d, want 2, 1, 5 + 5", r.Requests, r.NoAnswer, r.ReasoningTokensTotal, r.AnswerTokensTotal)
	}
	// TTFT counts the first token of any kind; the answer's TTFT the first
	// answer token: 50 ms and 10 ms (request 2 has none).
	near("TTFT max", s.TTFT.Max, 0.010)
	if r.AnswerTTFT.Count != 2 {
		t.Errorf("answer TTFT count %d, want 2", r.AnswerTTFT.Count)
	}
	near("answer TTFT max", r.AnswerTTFT.Max, 0.050)
	near("answer TTFT p50", r.AnswerTTFT.P50, 0.030)
	// Answer TPOT: (80 − 50)/2 = 15 ms and (30 − 10)/1 = 20 ms; all-token
	// TPOT: (80 − 10)/5 = 14 ms, 20 ms and (15 − 5)/1 = 10 ms.
	near("answer TPOT mean", r.AnswerTPOT.Mean, 0.0175)
	near("TPOT mean", s.TPOT.Mean, (0.014+0.020+0.010)/3)
	// Answer ITL: 10, 20 (request 0) and 20 ms (request 1).
	if r.AnswerITL.Count != 3 {
		t.Errorf("answer ITL count %d, want 3", r.AnswerITL.Count)
	}
	near("answer ITL mean", r.AnswerITL.Mean, 0.050/3)
	near("reasoning tokens mean", r.ReasoningTokens.Mean, 5.0/3)
	near("answer tokens max", r.AnswerTokens.Max, 3)

	// Without reasoning there is no reasoning side.
	if s := Summarize(reasoningRecords()[1:2], SummaryConfig{}); s.Reasoning != nil {
		t.Errorf("reasoning side without reasoning: %+v", s.Reasoning)
	}
}

// TestAggregateReasoning: repeats' reasoning sides combine like the other
// figures: counts summed, distributions averaged over the repeats that
// have them, the answer's figures in Stats.
func TestAggregateReasoning(t *testing.T) {
	one := Summarize(reasoningRecords(), SummaryConfig{})
	two := Summarize(reasoningRecords()[:2], SummaryConfig{})
	plain := Summarize(reasoningRecords()[1:2], SummaryConfig{})
	reps := []report.Run{{Name: "c=1 repeat=1", Summary: one}, {Name: "c=1 repeat=2", Summary: two}, {Name: "c=1 repeat=3", Summary: plain}}
	agg := Aggregate(reps)
	r := agg.Summary.Reasoning
	if r == nil || r.Requests != 3 || r.NoAnswer != 1 || r.ReasoningTokensTotal != 8 {
		t.Fatalf("aggregate reasoning %+v", r)
	}
	if want := (one.Reasoning.AnswerTTFT.P50 + two.Reasoning.AnswerTTFT.P50) / 2; math.Abs(r.AnswerTTFT.P50-want) > 1e-12 {
		t.Errorf("answer TTFT p50 %v, want the mean of the two repeats' %v", r.AnswerTTFT.P50, want)
	}
	st, ok := agg.Summary.Stats["reasoning.answer_ttft_seconds.p99"]
	if !ok || st.N != 2 {
		t.Errorf("stats of the answer TTFT p99: %+v (present %v), want n = 2", st, ok)
	}
}
