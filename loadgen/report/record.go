package report

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"time"
)

// Record is everything measured about one request: what the client
// fills in, what the runner collects, what Summarize (loadgen/stats)
// summarises, what a report embeds (Run.Requests) and the per-request file
// holds one JSON object per line of (WriteRecords, ReadRecords), and what
// a merge reads back and summarises again. It is the only per-request type.
//
// Times are offsets from the start of the run (the instant the schedule's
// offsets count from), integer nanoseconds in JSON, so that records
// round-trip exactly. A zero FirstByte or FirstToken means it never came.
// ChunkOffsets are offsets from Sent, one per chunk that carried generated
// text (answer or reasoning), and ChunkTokens the output tokens each
// carried; ChunkReasoningTokens (only when reasoning text was streamed) the
// part of those that were reasoning.
type Record struct {
	// Run, Level and Repeat name the run; set in the per-request file only.
	Run    string  `json:"run,omitempty"`
	Level  float64 `json:"level,omitempty"`
	Repeat int     `json:"repeat,omitempty"`

	Index      int           `json:"index"`
	Intended   time.Duration `json:"intended_ns"` // when the schedule wanted it sent
	Sent       time.Duration `json:"sent_ns"`
	FirstByte  time.Duration `json:"first_byte_ns,omitempty"`
	FirstToken time.Duration `json:"first_token_ns,omitempty"`
	// FirstAnswerToken is when the first answer token (content, or text
	// for completions) arrived; FirstToken the first token of any kind,
	// reasoning included (see FirstAnswer for records written before
	// reasoning was told apart).
	FirstAnswerToken time.Duration `json:"first_answer_token_ns,omitempty"`
	// End is when the answer ended, or when the request was given up
	// (timed out, cancelled).
	End    time.Duration `json:"end_ns"`
	Status int           `json:"status,omitempty"`
	// ErrorClass is empty on success, one of ErrorClasses on failure, or
	// ErrInterrupted.
	ErrorClass string `json:"error_class,omitempty"`
	// Error says what went wrong; the configured API key never appears in
	// it.
	Error string `json:"error,omitempty"`
	// Model is the model the server said it used.
	Model string `json:"model,omitempty"`
	// Conversation and Turn place a request of a multi-turn run
	// (loadgen/runner, Config.Turns): Turn counts from 1 (0: not part of
	// a conversation), Conversation from 0.
	Conversation int `json:"conversation,omitempty"`
	Turn         int `json:"turn,omitempty"`

	PromptTokens int `json:"prompt_tokens"`
	// OutputTokens are all the generated tokens, reasoning included (as
	// usage.completion_tokens counts them); ReasoningTokens the part that
	// was reasoning: the server's count (usage.completion_tokens_details.
	// reasoning_tokens, or SGLang's usage.reasoning_tokens) when it gave
	// one, else the reasoning chunks' share. AnswerTokens is the rest.
	OutputTokens    int `json:"output_tokens"`
	ReasoningTokens int `json:"reasoning_tokens,omitempty"`
	// RequestedInputTokens is the prompt length asked for in the server's
	// tokens (--input-tokens, a trace's, a conversation's history; absent
	// for a dataset's prompt), RequestedOutputTokens the max_tokens sent:
	// what Summary's requested distributions compare PromptTokens and
	// OutputTokens with.
	RequestedInputTokens  int  `json:"requested_input_tokens,omitempty"`
	RequestedOutputTokens int  `json:"requested_output_tokens,omitempty"`
	TokensEstimated       bool `json:"tokens_estimated,omitempty"`
	UsageMismatch         bool `json:"usage_mismatch,omitempty"`
	// KernelTimestamps: the token times are the kernel's receive times of
	// the bytes, not when the load generator's reads returned.
	KernelTimestamps bool `json:"kernel_timestamps,omitempty"`

	ChunkOffsets []time.Duration `json:"chunk_offsets_ns,omitempty"`
	ChunkTokens  []int32         `json:"chunk_tokens,omitempty"`
	// ChunkReasoningTokens, parallel to ChunkTokens, are the reasoning
	// tokens of each chunk (the rest were answer tokens); nil when no
	// reasoning text was streamed.
	ChunkReasoningTokens []int32 `json:"chunk_reasoning_tokens,omitempty"`

	// PrefixGroup is the shared prefix the prompt started with, counted
	// from 1 (0: none; a shared-prefix workload), PrefixTokens its length
	// asked for in the server's tokens. Images is how many images the
	// request carried.
	PrefixGroup  int `json:"prefix_group,omitempty"`
	PrefixTokens int `json:"prefix_tokens,omitempty"`
	Images       int `json:"images,omitempty"`
	// CachedTokens is the server's usage.prompt_tokens_details.cached_tokens
	// (the prompt tokens its prefix cache served), nil when it did not say.
	CachedTokens *int `json:"cached_tokens,omitempty"`

	// Answer is what the server said, kept only when responses are saved
	// (Answer): written to the saved-responses file (WriteResponses),
	// never to the report or the per-request file. Its fields read
	// through the record (r.Response) when it is set.
	*Answer `json:"-"`

	// Sim holds the gpulens simulator's own timestamps of the request, when
	// it sent them (accuracy benchmarks). Never written.
	Sim *SimTimestamps `json:"-"`
}

// SimTimestamps are the server-side timestamps the gpulens simulator adds to
// its final usage chunk (gpulens_sim).
type SimTimestamps struct {
	ArrivalUnixNano    int64   `json:"arrival_unix_nano"`
	FirstTokenUnixNano int64   `json:"first_token_unix_nano"`
	TokenUnixNanos     []int64 `json:"token_unix_nanos"`
	// ChunkUnixNanos are when the server wrote each content chunk.
	ChunkUnixNanos []int64 `json:"chunk_unix_nanos,omitempty"`
}

// Error classes used as keys of Summary.Errors.
const (
	ErrTimeout      = "timeout"
	ErrConnect      = "connect"
	ErrHTTP429      = "http_429"
	ErrHTTP4xx      = "http_4xx"
	ErrHTTP5xx      = "http_5xx"
	ErrStreamBroken = "stream_broken"
	ErrParse        = "parse"
	// ErrCancelledAtEnd: the request was still in flight when the run's
	// duration and its grace period (Settings.GracePeriodSeconds) had
	// passed, and was cancelled.
	ErrCancelledAtEnd = "cancelled_at_end"
)

// ErrorClasses lists every error class in a stable order.
var ErrorClasses = []string{ErrTimeout, ErrConnect, ErrHTTP429, ErrHTTP4xx, ErrHTTP5xx, ErrStreamBroken, ErrCancelledAtEnd, ErrParse}

// ErrInterrupted is the error class of a request that was in flight when
// the run was interrupted (Ctrl-C, SIGTERM). It is not a failure class:
// such requests are counted in Summary.RequestsInterrupted, neither
// completed nor failed.
const ErrInterrupted = "interrupted"

// OK reports whether the request completed successfully.
func (r *Record) OK() bool { return r.ErrorClass == "" }

// Interrupted reports whether the request was in flight when the run was
// interrupted (ErrInterrupted).
func (r *Record) Interrupted() bool { return r.ErrorClass == ErrInterrupted }

// Reasoned reports whether the answer had reasoning tokens, streamed or
// counted by the server.
func (r *Record) Reasoned() bool { return r.ReasoningTokens > 0 || r.ChunkReasoningTokens != nil }

// FirstAnswer is when the first answer token arrived (0: none came). A
// record written before reasoning was told apart has no
// first_answer_token_ns and no reasoning: its first token was the answer's.
func (r *Record) FirstAnswer() time.Duration {
	if r.FirstAnswerToken != 0 || r.Reasoned() {
		return r.FirstAnswerToken
	}
	return r.FirstToken
}

// AnswerTokens are the output tokens that were not reasoning.
func (r *Record) AnswerTokens() int { return max(r.OutputTokens-r.ReasoningTokens, 0) }

// InterTokenLatencies yields the token-level inter-token latencies of r in
// seconds (docs/loadgen-metrics.md), over every generated token, reasoning
// included. Content chunks delivered by the same read (equal offsets) form
// one group: the client saw their tokens at once, so a group of K tokens
// arriving Δ after the previous group yields K values Δ/K, never K−1
// zeros. The tokens of the first group are covered by TTFT.
func (r *Record) InterTokenLatencies() iter.Seq[float64] {
	return r.interTokenLatencies(func(i int) int64 {
		if i < len(r.ChunkTokens) {
			return int64(r.ChunkTokens[i])
		}
		return 1
	})
}

// AnswerInterTokenLatencies is InterTokenLatencies over the answer tokens
// only: the chunks' tokens less their reasoning tokens, the first answer
// group covered by the time to the first answer token. Without reasoning
// it is InterTokenLatencies.
func (r *Record) AnswerInterTokenLatencies() iter.Seq[float64] {
	return r.interTokenLatencies(func(i int) int64 {
		k := int64(1)
		if i < len(r.ChunkTokens) {
			k = int64(r.ChunkTokens[i])
		}
		if i < len(r.ChunkReasoningTokens) {
			k -= int64(r.ChunkReasoningTokens[i])
		}
		return k
	})
}

// interTokenLatencies yields the latencies between the groups of chunks,
// counting tokens(i) tokens in chunk i (chunks of none are left out).
func (r *Record) interTokenLatencies(tokens func(int) int64) iter.Seq[float64] {
	return func(yield func(float64) bool) {
		var (
			prevT, curT time.Duration
			curK        int64
			havePrev    bool
		)
		finish := func() bool {
			if havePrev {
				g := float64(curT-prevT) / 1e9 / float64(curK)
				for j := int64(0); j < curK; j++ {
					if !yield(g) {
						return false
					}
				}
			}
			prevT, havePrev = curT, true
			return true
		}
		for i, off := range r.ChunkOffsets {
			k := tokens(i)
			if k <= 0 {
				continue
			}
			if curK > 0 && off == curT {
				curK += k
				continue
			}
			if curK > 0 && !finish() {
				return
			}
			curT, curK = off, k
		}
		if curK > 0 {
			finish()
		}
	}
}

// WriteRecords writes one record per line as JSON (the per-request file).
func WriteRecords(w io.Writer, recs []Record) error {
	enc := json.NewEncoder(w)
	for i := range recs {
		if err := enc.Encode(&recs[i]); err != nil {
			return err
		}
	}
	return nil
}

// ReadRecords reads what WriteRecords wrote.
func ReadRecords(r io.Reader) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(sc.Bytes()) == 0 {
			continue
		}
		var rec Record
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return recs, fmt.Errorf("record on line %d: %w", line, err)
		}
		recs = append(recs, rec)
	}
	return recs, sc.Err()
}
