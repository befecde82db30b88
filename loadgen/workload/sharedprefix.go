package workload

import (
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
)

// Shared prefixes (Config.SharedPrefix): every synthetic prompt starts
// with one of Groups prefixes, the long system prompt or document that
// many requests of a real service share and that a server's prefix cache
// keeps, followed by the request's own question. As in inference-perf's
// shared_prefix workload (num_groups, system_prompt_len, question_len,
// output_len), each group's prefix length is drawn once from Tokens (in
// the server's tokens), the question's from Config.Input and the output's
// from Config.Output, per request; unlike it, a request picks its group
// by Pick (uniform, Zipf-skewed or round-robin), seeded by the seed and
// the request index, so that any shard or run computes the same choice.
//
// The prefix of group g is "TAG-pG" ("pG" without a tag; G = g + 1) then
// words drawn with the seed and g, as many as make its length in the
// server's tokens (Config.Tokens); the question is "I" (the request
// index: no two requests share more than their prefix) then words drawn
// with the seed and i. Runs with different tags share no prefix.

// Picks of SharedPrefix.Pick.
const (
	PickUniform    = "uniform"
	PickZipf       = "zipf"
	PickRoundRobin = "round-robin"
)

// Pick is how a request picks its group.
type Pick struct {
	Kind string  // PickUniform, PickZipf or PickRoundRobin
	S    float64 // Zipf's exponent (> 1): group k is picked ∝ 1/(k+1)^S
	spec string
}

// String returns the spec Pick was parsed from.
func (p Pick) String() string { return p.spec }

// ParsePick parses "uniform", "round-robin" or "zipf:S" (S > 1; "zipf"
// alone is zipf:1.1). name names the option in errors.
func ParsePick(name option.Name, spec string) (Pick, error) {
	kind, arg, hasArg := strings.Cut(spec, ":")
	p := Pick{Kind: kind, spec: spec}
	switch kind {
	case PickUniform, PickRoundRobin:
		if hasArg {
			return p, option.Errorf("%s %q: %s takes no parameter", name, spec, kind)
		}
	case PickZipf:
		p.S = 1.1
		if hasArg {
			s, err := strconv.ParseFloat(arg, 64)
			if err != nil || !(s > 1) || math.IsInf(s, 0) {
				return p, option.Errorf("%s %q: Zipf's exponent must be a number above 1, got %q", name, spec, arg)
			}
			p.S = s
		} else {
			p.spec = "zipf:1.1"
		}
	default:
		return p, option.Errorf("%s %q: want uniform, zipf:S or round-robin", name, spec)
	}
	return p, nil
}

// SharedPrefix configures a shared-prefix workload.
type SharedPrefix struct {
	Groups int
	Tokens Length // each group's prefix length, in the server's tokens
	Pick   Pick
}

// maxGroups bounds SharedPrefix.Groups.
const maxGroups = 1 << 20

// validate checks the shared prefixes.
func (s *SharedPrefix) validate() error {
	if s.Groups < 1 || s.Groups > maxGroups {
		return option.Errorf("%s must be 1 to %d, got %d", option.Name("SharedPrefixGroups"), maxGroups, s.Groups)
	}
	if s.Tokens.Kind == "" {
		return option.Errorf("%s is required", option.Name("SharedPrefixTokens"))
	}
	if s.Pick.Kind == "" {
		s.Pick = Pick{Kind: PickUniform, spec: PickUniform}
	}
	return nil
}

// Seeds' stream selectors, apart from the request stream (the index).
const (
	prefixStream = 0x5ea4ed_0000_0000
	pickStream   = 0x91c4_0000_0000
)

// group returns the group (from 0) request i uses.
func (w *Workload) group(i int) int {
	sp := w.cfg.SharedPrefix
	n := sp.Groups
	switch sp.Pick.Kind {
	case PickRoundRobin:
		return i % n
	case PickZipf:
		if n == 1 {
			return 0
		}
		rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed)^pickStream, uint64(i)))
		return int(rand.NewZipf(rng, sp.Pick.S, 1, uint64(n-1)).Uint64())
	default:
		rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed)^pickStream, uint64(i)))
		return rng.IntN(n)
	}
}

// prefixRNG is group g's generator: its length, then its words.
func (w *Workload) prefixRNG(g int) *rand.Rand {
	return rand.New(rand.NewPCG(uint64(w.cfg.Seed)^prefixStream, uint64(g)))
}

// PrefixTokens is group g's prefix length, in the server's tokens.
func (w *Workload) PrefixTokens(g int) int {
	return w.cfg.SharedPrefix.Tokens.Sample(w.prefixRNG(g))
}

// prefixWords is how many words make tokens of the server's tokens in the
// middle of a prompt: no per-request overhead.
func (c Tokens) prefixWords(tokens int) int {
	per := c.TokensPerWord
	if per <= 0 {
		per = 1
	}
	return max(1, int(math.Round(float64(tokens)/per)))
}

// sharedPrefixRequest is request i of a shared-prefix run.
func (w *Workload) sharedPrefixRequest(i int) client.Request {
	g := w.group(i)
	prng := w.prefixRNG(g)
	pt := w.cfg.SharedPrefix.Tokens.Sample(prng)
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(i)))
	q := w.cfg.Input.Sample(rng)
	out := w.cfg.Output.Sample(rng)
	if w.cfg.MaxTokens > 0 {
		out = min(out, w.cfg.MaxTokens)
	}
	pw := w.cfg.Tokens.prefixWords(pt)
	qw := max(1, w.cfg.Tokens.Words(pt+q)-pw)
	var sb strings.Builder
	sb.Grow((pw + qw) * 6)
	sb.WriteString(w.cfg.PromptPrefix)
	if w.tag != "" {
		sb.WriteString(w.tag)
		sb.WriteByte('-')
	}
	sb.WriteByte('p')
	sb.WriteString(strconv.Itoa(g + 1))
	for k := 1; k < pw; k++ {
		sb.WriteByte(' ')
		sb.WriteString(vocabulary[prng.IntN(len(vocabulary))])
	}
	sb.WriteByte(' ')
	sb.WriteString(strconv.Itoa(i))
	for k := 1; k < qw; k++ {
		sb.WriteByte(' ')
		sb.WriteString(vocabulary[rng.IntN(len(vocabulary))])
	}
	return client.Request{Index: i, Prompt: sb.String(), InputTokens: pw + qw, TargetInputTokens: pt + q, MaxTokens: out,
		IgnoreEOS: w.cfg.IgnoreEOS, PrefixGroup: g + 1, PrefixTokens: pt}
}
