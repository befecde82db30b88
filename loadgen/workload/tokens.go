package workload

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/client"
)

// Tokens converts lengths in the server's tokens (what --input-tokens,
// a trace and a conversation's turns ask for) to words of the synthetic
// vocabulary, from a calibration against the server (loadgen/campaign):
// the server counts TokensPerWord tokens per word of it, plus Overhead
// tokens per request (the chat template, a BOS token). The zero value
// is one word per token and no overhead.
type Tokens struct {
	TokensPerWord float64
	Overhead      float64
}

// Words is how many words make a prompt the server counts as tokens
// tokens (at least 1).
func (c Tokens) Words(tokens int) int {
	per := c.TokensPerWord
	if per <= 0 {
		per = 1
	}
	return max(1, int(math.Round((float64(tokens)-c.Overhead)/per)))
}

// WithTokens returns the workload with its token conversion set.
func (w *Workload) WithTokens(t Tokens) *Workload {
	c := *w
	c.cfg.Tokens = t
	return &c
}

// ProbeRequest is request i of a calibration: a synthetic prompt of
// exactly words words, shaped as the run's prompts are (the same prefix,
// a tag when they have one, the index, then vocabulary words), with words
// of its own: no prompt of a run starts like it past the first word.
func (w *Workload) ProbeRequest(i, words int) client.Request {
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed)^0x7ca1b, uint64(i)))
	var sb strings.Builder
	sb.WriteString(w.cfg.PromptPrefix)
	if w.tag != "" {
		sb.WriteString(tag(w.cfg.Nonce, "calibration"))
		sb.WriteByte('-')
	}
	sb.WriteString(strconv.Itoa(i))
	appendWords(&sb, rng, 1, words)
	return client.Request{Index: i, Prompt: sb.String(), InputTokens: words, MaxTokens: 1}
}
