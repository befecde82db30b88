package stats

import (
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestTurns(t *testing.T) {
	ms := time.Millisecond
	rec := func(conv, turn int, intended, first time.Duration, prompt int, class string) report.Record {
		return report.Record{Conversation: conv, Turn: turn, Intended: intended, FirstToken: first, End: first + ms, PromptTokens: prompt, ErrorClass: class}
	}
	recs := []report.Record{
		rec(0, 1, 0, 100*ms, 500, ""),          // TTFT 0.1
		rec(0, 2, 1000*ms, 1020*ms, 1000, ""),  // 0.02
		rec(0, 3, 2000*ms, 2040*ms, 1500, ""),  // 0.04
		rec(1, 1, 10*ms, 310*ms, 500, ""),      // 0.3
		rec(1, 2, 900*ms, 0, 1000, "http_5xx"), // failed: counted in no TTFT
		rec(2, 1, 0, 0, 500, report.ErrInterrupted),
		{Index: 9, Intended: 0, FirstToken: 5 * ms}, // not in a conversation
	}
	s := Turns(recs)
	if s == nil {
		t.Fatal("no summary")
	}
	near := func(name string, got, want float64) {
		t.Helper()
		if d := got - want; d > 1e-12 || d < -1e-12 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// Conversations 0 and 1 (2 was only interrupted).
	if s.Conversations != 2 || s.FirstTurnTTFT.Count != 2 || s.LaterTurnsTTFT.Count != 2 || len(s.ByTurn) != 3 {
		t.Fatalf("summary %+v", s)
	}
	near("first turn TTFT mean", s.FirstTurnTTFT.Mean, 0.2)
	near("first turn TTFT max", s.FirstTurnTTFT.Max, 0.3)
	near("later turns TTFT mean", s.LaterTurnsTTFT.Mean, 0.03)
	near("later turns TTFT p50", s.LaterTurnsTTFT.P50, 0.03)
	near("first turn prompt mean", s.FirstTurnInputTokens.Mean, 500)
	near("later turns prompt mean", s.LaterTurnsInputTokens.Mean, 1250)
	near("turn 2 TTFT", s.ByTurn[1].Mean, 0.02)
	near("turn 3 TTFT", s.ByTurn[2].Mean, 0.04)
	if s.ByTurn[1].Count != 1 {
		t.Errorf("turn 2 has %d TTFTs, want 1 (the failed one has none)", s.ByTurn[1].Count)
	}
	if Turns([]report.Record{{Index: 1}}) != nil {
		t.Error("records outside conversations must give no summary")
	}
}
