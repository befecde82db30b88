// Package simserver is a simulated OpenAI-compatible inference server. It
// models continuous batching on one GPU (prefill cost per prompt token, a
// decode step whose duration grows with the batch, a maximum batch and a
// KV-cache capacity with FIFO queueing beyond them), or, in fixed mode,
// produces tokens at exactly configured delays. It injects faults (HTTP 500,
// 429 when its queue is full, mid-stream disconnects, stalls) and exposes
// vLLM-style metrics. One scheduler goroutine drives every request; handlers
// wait on per-request signals, so thousands of concurrent streams cost no
// timer per token.
//
// See docs/simserver.md for the model, the defaults and the wire format.
package simserver

import (
	"errors"
	"time"

	"github.com/gpulens/gpulens/loadgen/option"
)

// DefaultModel is the model name served when Config.Model is empty.
const DefaultModel = "gpulens-sim"

// Config holds every knob of the simulated server. Start from DefaultConfig
// (an 8B model on an H100), or set only FixedTTFT/FixedITL for an ideal
// fixed-delay server: zero limits mean unlimited, and Validate fills the
// other defaults.
type Config struct {
	// Model is the only model name served (and listed by /v1/models).
	Model string
	// Seed makes output lengths, token text, jitter and faults repeatable:
	// the n-th request received always gets the same draws.
	Seed uint64

	// PrefillPerToken is the prefill cost of one prompt token, added to the
	// engine step in which a request is admitted (batching mode).
	PrefillPerToken time.Duration
	// DecodeBase and DecodePerSeq give the duration of one decode step for
	// a batch of b running sequences: DecodeBase + DecodePerSeq×b.
	DecodeBase   time.Duration
	DecodePerSeq time.Duration
	// MaxBatch is the most sequences running at once (0: unlimited).
	MaxBatch int
	// KVCapacityTokens is the KV-cache size in tokens (0: unlimited). A
	// request reserves prompt + output tokens while it runs.
	KVCapacityTokens int
	// MaxQueue is the most requests waiting for admission; beyond it new
	// requests get HTTP 429 (0: unlimited).
	MaxQueue int
	// PrefixCacheTokens is the size of the prefix cache in tokens: prompts
	// that start like a recent one prefill only the rest (prefixcache.go).
	// 0: no prefix cache. PrefixBlockTokens is its block size (0:
	// DefaultPrefixBlockTokens).
	PrefixCacheTokens int
	PrefixBlockTokens int
	// Jitter scales every simulated delay by a seeded factor drawn
	// uniformly from [1−Jitter, 1+Jitter]. 0 ≤ Jitter < 1.
	Jitter float64

	// FixedTTFT and FixedITL switch to fixed mode when either is non-zero:
	// a request's first token comes FixedTTFT after admission and each
	// later token FixedITL after the previous one, whatever the batch.
	// MaxBatch, KV capacity and MaxQueue still apply.
	FixedTTFT time.Duration
	FixedITL  time.Duration

	// OutputTokensMean is the mean output length when ignore_eos is not
	// set: lengths are geometric (a constant end-of-sequence probability
	// 1/mean per token), capped by max_tokens.
	OutputTokensMean int
	// MaxOutputTokens caps the output when the request sets no max_tokens.
	MaxOutputTokens int
	// TokensPerChunk is how many tokens each streamed content chunk carries
	// after the first (which always carries one).
	TokensPerChunk int
	// RoleChunk sends vLLM's role-only first chunk (delta {"role":
	// "assistant","content":""}) as soon as the request arrives; otherwise
	// the role rides on the first content chunk.
	RoleChunk bool
	// ReasoningTokens makes the server a reasoning model: every chat
	// answer starts with ReasoningTokens tokens of thinking before the
	// answer it draws (max_tokens caps both together), streamed in
	// delta.reasoning and counted in
	// usage.completion_tokens_details.reasoning_tokens (reasoning.go). A
	// request turns it off with chat_template_kwargs.enable_thinking
	// false. 0: no reasoning.
	ReasoningTokens int
	// ContinuousUsage adds cumulative usage to every chunk, as vLLM does for
	// stream_options.continuous_usage_stats (which a request can also ask
	// for itself).
	ContinuousUsage bool
	// OmitCachedTokens leaves usage.prompt_tokens_details out, as vLLM
	// does unless started with --enable-prompt-tokens-details (by
	// default the simulator reports its prefix cache's cached_tokens, as
	// OpenAI and vLLM with that flag do).
	OmitCachedTokens bool
	// Tokenizer counts prompt tokens: TokenizerSubword (empty: the
	// default), a sub-word tokenizer with a chat template's tokens, or
	// TokenizerWords, one token per word and no template.
	Tokenizer string

	// ErrorRate is the probability that a request fails with HTTP 500.
	ErrorRate float64
	// DisconnectRate is the probability that a stream is cut (connection
	// aborted) after a random token, before its end.
	DisconnectRate float64
	// StallRate is the probability that a request stalls once, before a
	// random output token (the first one included), for StallDuration.
	StallRate     float64
	StallDuration time.Duration
}

// DefaultConfig returns defaults shaped like an 8B model on one H100.
func DefaultConfig() Config {
	c := Config{
		Model:            DefaultModel,
		Tokenizer:        TokenizerSubword,
		Seed:             1,
		PrefillPerToken:  100 * time.Microsecond,
		DecodeBase:       12 * time.Millisecond,
		DecodePerSeq:     150 * time.Microsecond,
		MaxBatch:         256,
		KVCapacityTokens: 500_000,
		Jitter:           0.05,
		OutputTokensMean: 200,
		MaxOutputTokens:  4096,
		TokensPerChunk:   1,
		RoleChunk:        true,
		StallDuration:    time.Second,
	}
	c.PrefixCacheTokens, c.PrefixBlockTokens = 200_000, DefaultPrefixBlockTokens // vLLM caches prefixes by default
	return c
}

// Fixed reports whether the config selects fixed mode.
func (c *Config) Fixed() bool { return c.FixedTTFT != 0 || c.FixedITL != 0 }

// Validate fills defaults for unset fields and reports every bad value,
// naming the field (an option.Error).
func (c *Config) Validate() error {
	if c.Model == "" {
		c.Model = DefaultModel
	}
	if c.OutputTokensMean == 0 {
		c.OutputTokensMean = 200
	}
	if c.MaxOutputTokens == 0 {
		c.MaxOutputTokens = 4096
	}
	if c.TokensPerChunk == 0 {
		c.TokensPerChunk = 1
	}
	if c.PrefixBlockTokens == 0 {
		c.PrefixBlockTokens = DefaultPrefixBlockTokens
	}
	if c.Tokenizer == "" {
		c.Tokenizer = TokenizerSubword
	}
	var errs []error
	if c.Tokenizer != TokenizerSubword && c.Tokenizer != TokenizerWords {
		errs = append(errs, option.Errorf("%s %q: must be %s or %s", option.Name("Tokenizer"), c.Tokenizer, TokenizerSubword, TokenizerWords))
	}
	nonNeg := func(name option.Name, d time.Duration) {
		if d < 0 {
			errs = append(errs, option.Errorf("%s must not be negative, got %s", name, d))
		}
	}
	nonNeg("PrefillPerToken", c.PrefillPerToken)
	nonNeg("DecodeBase", c.DecodeBase)
	nonNeg("DecodePerSeq", c.DecodePerSeq)
	nonNeg("FixedTTFT", c.FixedTTFT)
	nonNeg("FixedITL", c.FixedITL)
	nonNeg("StallDuration", c.StallDuration)
	count := func(name option.Name, v int) {
		if v < 0 {
			errs = append(errs, option.Errorf("%s must not be negative, got %d", name, v))
		}
	}
	count("MaxBatch", c.MaxBatch)
	count("KVCapacityTokens", c.KVCapacityTokens)
	count("MaxQueue", c.MaxQueue)
	count("PrefixCacheTokens", c.PrefixCacheTokens)
	count("PrefixBlockTokens", c.PrefixBlockTokens)
	count("ReasoningTokens", c.ReasoningTokens)
	atLeast1 := func(name option.Name, v int) {
		if v < 1 {
			errs = append(errs, option.Errorf("%s must be at least 1, got %d", name, v))
		}
	}
	atLeast1("OutputTokensMean", c.OutputTokensMean)
	atLeast1("MaxOutputTokens", c.MaxOutputTokens)
	atLeast1("TokensPerChunk", c.TokensPerChunk)
	if c.Jitter < 0 || c.Jitter >= 1 {
		errs = append(errs, option.Errorf("%s must be in [0, 1), got %g", option.Name("Jitter"), c.Jitter))
	}
	prob := func(name option.Name, p float64) {
		if !(p >= 0 && p <= 1) {
			errs = append(errs, option.Errorf("%s must be a probability in [0, 1], got %g", name, p))
		}
	}
	prob("ErrorRate", c.ErrorRate)
	prob("DisconnectRate", c.DisconnectRate)
	prob("StallRate", c.StallRate)
	if !c.Fixed() && c.DecodeBase == 0 && c.DecodePerSeq == 0 {
		errs = append(errs, option.Errorf("%s and %s are both zero: set one, or use fixed mode (%s/%s)",
			option.Name("DecodeBase"), option.Name("DecodePerSeq"), option.Name("FixedTTFT"), option.Name("FixedITL")))
	}
	return errors.Join(errs...)
}
