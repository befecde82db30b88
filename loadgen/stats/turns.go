package stats

import "github.com/gpulens/gpulens/loadgen/report"

// Turns splits the records of a multi-turn run by turn (report.TurnSummary):
// the TTFT and prompt length of the completed first turns against the
// later ones, and the TTFT of every turn. It returns nil when no record
// belongs to a conversation (Record.Turn 0). TTFT is measured from the
// intended send time, as in Summarize.
func Turns(records []report.Record) *report.TurnSummary {
	var (
		firstTTFT, laterTTFT, firstIn, laterIn []float64
		byTurn                                 [][]float64
		convs                                  = map[int]bool{}
	)
	for i := range records {
		r := &records[i]
		if r.Turn < 1 || r.Interrupted() {
			continue
		}
		convs[r.Conversation] = true
		if !r.OK() || r.FirstToken == 0 {
			continue
		}
		ttft := (r.FirstToken - r.Intended).Seconds()
		for len(byTurn) < r.Turn {
			byTurn = append(byTurn, nil)
		}
		byTurn[r.Turn-1] = append(byTurn[r.Turn-1], ttft)
		if r.Turn == 1 {
			firstTTFT = append(firstTTFT, ttft)
			firstIn = append(firstIn, float64(r.PromptTokens))
		} else {
			laterTTFT = append(laterTTFT, ttft)
			laterIn = append(laterIn, float64(r.PromptTokens))
		}
	}
	if len(convs) == 0 {
		return nil
	}
	s := &report.TurnSummary{Conversations: len(convs), FirstTurnTTFT: Dist(firstTTFT), LaterTurnsTTFT: Dist(laterTTFT),
		FirstTurnInputTokens: Dist(firstIn), LaterTurnsInputTokens: Dist(laterIn)}
	for _, v := range byTurn {
		s.ByTurn = append(s.ByTurn, Dist(v))
	}
	return s
}
