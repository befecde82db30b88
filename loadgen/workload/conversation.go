package workload

import (
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
)

// Multi-turn conversations (Config.Turns > 1): request index i is turn
// i mod Turns of conversation i / Turns (Split), and its prompt is the
// whole conversation so far, as a chat client resends it: every earlier
// turn's user message and answer, then the new user message. Each turn j
// draws, with the seed and the request index of the turn, its user
// message's length (Config.Input), its answer's length (Config.Output,
// capped by MaxTokens: the turn's max_tokens) and their words. The
// answers in the history are stand-ins of that length drawn from the
// seed, not the server's text, so the prompts depend only on the seed
// (and the tag): two runs send the same bytes, and every turn's prompt
// starts with the previous turn's prompt, the prefix a server's KV cache
// can keep. The conversation's first word is "TAG-cN" (or "cN" without a
// tag), N the conversation: conversations share no prefix.

// Split returns the conversation and the turn (both from 0) of request
// index i in conversations of turns turns.
func Split(i, turns int) (conversation, turn int) {
	if turns <= 1 {
		return i, 0
	}
	return i / turns, i % turns
}

// Validate checks that at most one prompt source is set and that Turns is
// not negative.
func (c Config) Validate() error {
	if c.Turns < 0 {
		return option.Errorf("%s must not be negative, got %d", option.Name("Turns"), c.Turns)
	}
	var set []option.Name
	if c.Dataset != nil {
		set = append(set, "Dataset")
	}
	if c.Trace != nil {
		set = append(set, "Trace")
	}
	if c.Turns > 1 {
		set = append(set, "Turns")
	}
	if c.SharedPrefix != nil {
		set = append(set, "SharedPrefixGroups")
		if err := c.SharedPrefix.validate(); err != nil {
			return err
		}
	}
	if c.Images != nil {
		if err := c.Images.validate(); err != nil {
			return err
		}
	}
	if len(set) > 1 {
		return option.Errorf("%s and %s cannot be combined: choose one source of prompts", set[0], set[1])
	}
	return nil
}

// turn is one turn's draws.
type turn struct {
	rng          *rand.Rand
	user, answer int // words
}

// drawTurn draws the lengths of turn j of conversation c; its rng is then
// positioned at the user message's words, then the answer's.
func (w *Workload) drawTurn(c, j int) turn {
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(c*w.cfg.Turns+j)))
	t := turn{rng: rng, user: w.cfg.Input.Sample(rng), answer: w.cfg.Output.Sample(rng)}
	if w.cfg.MaxTokens > 0 {
		t.answer = min(t.answer, w.cfg.MaxTokens)
	}
	return t
}

// turnRequest is request i of a multi-turn run.
func (w *Workload) turnRequest(i int) client.Request {
	c, t := Split(i, w.cfg.Turns)
	var sb strings.Builder
	sb.WriteString(w.cfg.PromptPrefix)
	if w.tag != "" {
		sb.WriteString(w.tag)
		sb.WriteByte('-')
	}
	sb.WriteByte('c')
	sb.WriteString(strconv.Itoa(c))
	// The history's lengths are in the server's tokens: after each part,
	// as many words as make the tokens so far (Config.Tokens).
	words, tokens := 1, 0
	var cur turn
	for j := 0; j <= t; j++ {
		cur = w.drawTurn(c, j)
		tokens += cur.user
		words = appendWords(&sb, cur.rng, words, max(words, w.cfg.Tokens.Words(tokens)))
		if j < t {
			tokens += cur.answer
			words = appendWords(&sb, cur.rng, words, max(words, w.cfg.Tokens.Words(tokens)))
		}
	}
	return client.Request{Index: i, Prompt: sb.String(), InputTokens: tokens, TargetInputTokens: tokens, MaxTokens: cur.answer, IgnoreEOS: w.cfg.IgnoreEOS}
}
