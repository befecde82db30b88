package report

// The types below describe the workloads the peers have (docs/loadgen.md,
// "Trace replay" and "Multi-turn conversations") and the server's own
// metrics over time (ServerMetrics.Timeline). Like Run.GPU and Metadata.Manifest
// they are optional pointers, absent from reports that do not use them.

// TraceSettings describe a trace replay (Settings.Trace): requests sent at
// the trace's arrival times with its lengths.
type TraceSettings struct {
	// File is the trace file's base name, Format its format ("mooncake",
	// "azure" or "burstgpt").
	File   string `json:"file"`
	Format string `json:"format"`
	// Speedup divides the trace's arrival offsets (2: twice as fast).
	Speedup float64 `json:"speedup"`
	// MaxRequests caps the requests taken from the trace (0: all).
	MaxRequests int `json:"max_requests,omitempty"`
	// Requests is how many requests the trace held after the cap, Skipped
	// how many rows were left out (zero input or output tokens).
	Requests int `json:"requests"`
	Skipped  int `json:"skipped,omitempty"`
	// ArrivalTimes is false when the trace gave only lengths: a
	// closed-loop run replays its lengths and ignores its times.
	ArrivalTimes bool `json:"arrival_times"`
}

// MultiTurnSettings describe multi-turn conversations
// (Settings.MultiTurn): every turn resends the conversation so far.
type MultiTurnSettings struct {
	// Turns is the number of turns per conversation.
	Turns int `json:"turns"`
	// ThinkTimeSeconds is the pause between the end of a turn's answer and
	// the next turn.
	ThinkTimeSeconds float64 `json:"think_time_seconds"`
}

// TurnSummary splits a multi-turn run's time to first token by turn
// (Run.Turns): the first turn of a conversation prefills its whole prompt,
// later turns resend the history, which a server's prefix cache can serve.
// Latencies are measured as in Summary (from the intended send time).
type TurnSummary struct {
	// Conversations counts the conversations with at least one measured
	// turn.
	Conversations int `json:"conversations"`
	// FirstTurnTTFT and LaterTurnsTTFT are the TTFT distributions of the
	// completed first turns and of the completed later turns.
	FirstTurnTTFT  Dist `json:"first_turn_ttft_seconds"`
	LaterTurnsTTFT Dist `json:"later_turns_ttft_seconds"`
	// FirstTurnInputTokens and LaterTurnsInputTokens are their prompt
	// lengths.
	FirstTurnInputTokens  Dist `json:"first_turn_input_tokens"`
	LaterTurnsInputTokens Dist `json:"later_turns_input_tokens"`
	// ByTurn holds the TTFT distribution of every turn, ByTurn[0] the
	// first.
	ByTurn []Dist `json:"by_turn_ttft_seconds,omitempty"`
}

// ServerSample is one scrape of the server's /metrics
// (ServerMetrics.Timeline): when it was taken, in seconds from the start
// of the run, and the normalised series' values then (a series the scrape
// did not have is absent). Counters are their cumulative values.
type ServerSample struct {
	OffsetSeconds float64            `json:"offset_seconds"`
	Values        map[string]float64 `json:"values"`
}
