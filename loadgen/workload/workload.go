// Package workload generates the prompts of a run: synthetic prompts with
// seeded token-length distributions, or prompts from a dataset file. The
// seed and i fix request i's lengths and words, so every shard sees the
// same requests in the same order; a nonce and a variant (Config.Nonce,
// WithVariant) lead every prompt with a tag of their own, so that runs
// with different ones send prompts no prefix cache can share, while the
// lengths and the rest of the text stay those of the seed.
package workload

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
)

// Length is a token-length distribution.
type Length struct {
	Kind     string // fixed, uniform, normal, lognormal
	A, B     float64
	Min, Max int
	spec     string
}

// String returns the spec the distribution was parsed from.
func (l Length) String() string { return l.spec }

// ParseLength parses "fixed:N", "uniform:LO,HI", "normal:MEAN,STDDEV",
// "lognormal:MEDIAN,SIGMA", each optionally followed by ",min=N" and
// ",max=N". name names the option in errors (package option).
func ParseLength(name option.Name, spec string) (Length, error) {
	l := Length{spec: spec, Min: 1, Max: math.MaxInt32}
	kind, rest, _ := strings.Cut(spec, ":")
	l.Kind = kind
	var nums []float64
	for _, part := range strings.Split(rest, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if k, v, ok := strings.Cut(part, "="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return l, option.Errorf("%s %q: %s=%q is not a non-negative integer", name, spec, k, v)
			}
			switch k {
			case "min":
				l.Min = n
			case "max":
				l.Max = n
			default:
				return l, option.Errorf("%s %q: unknown option %q (want min= or max=)", name, spec, k)
			}
			continue
		}
		f, err := strconv.ParseFloat(part, 64)
		if err != nil || f < 0 || math.IsNaN(f) || math.IsInf(f, 0) {
			return l, option.Errorf("%s %q: %q is not a non-negative number", name, spec, part)
		}
		nums = append(nums, f)
	}
	want := map[string]int{"fixed": 1, "uniform": 2, "normal": 2, "lognormal": 2}
	n, ok := want[kind]
	if !ok {
		return l, option.Errorf("%s %q: unknown distribution %q (want fixed, uniform, normal or lognormal)", name, spec, kind)
	}
	if len(nums) != n {
		return l, option.Errorf("%s %q: %s takes %d number(s), got %d", name, spec, kind, n, len(nums))
	}
	l.A = nums[0]
	if n == 2 {
		l.B = nums[1]
	}
	if kind == "uniform" && l.B < l.A {
		return l, option.Errorf("%s %q: uniform high %v is below low %v", name, spec, l.B, l.A)
	}
	if l.Max < l.Min {
		return l, option.Errorf("%s %q: max %d is below min %d", name, spec, l.Max, l.Min)
	}
	return l, nil
}

// Sample draws one length.
func (l Length) Sample(rng *rand.Rand) int {
	var v float64
	switch l.Kind {
	case "fixed":
		v = l.A
	case "uniform":
		v = l.A + rng.Float64()*(l.B-l.A+1)
		v = math.Floor(v)
	case "normal":
		v = l.A + rng.NormFloat64()*l.B
	case "lognormal":
		v = l.A * math.Exp(rng.NormFloat64()*l.B)
	}
	n := int(math.Round(v))
	return min(max(n, l.Min), l.Max)
}

// Entry is one dataset prompt.
type Entry struct {
	Prompt string
	// OutputTokens is the output length the row gives, in the server's
	// tokens (JSONL output_tokens, max_tokens); 0: the length of Reply in
	// the server's tokens (Replies), else the output length distribution.
	OutputTokens int
	// Reply is the answer the row gives to the prompt: ShareGPT's next
	// gpt turn, JSONL "completion" or "response" ("" when none).
	Reply string
	// History are a ShareGPT conversation's turns before the prompt (a
	// later human turn's: DatasetTurns "all"), sent before it; Turn is
	// which human turn of its conversation the prompt is, from 0.
	History []client.Message
	Turn    int
	// Row is where the prompt is in the file, counted from 1: its line
	// (JSONL) or its position in the array (ShareGPT). ID is the row's
	// "id" (a number as written) and Reference its "reference" (else
	// "expected") field as raw JSON: copied to saved responses, never
	// scored.
	Row       int
	ID        string
	Reference json.RawMessage
}

// Dataset is a loaded prompt file.
type Dataset struct {
	Name    string // base name
	SHA256  string
	Entries []Entry
}

// LoadDataset reads a JSONL file of {"prompt": ...} objects (also "text";
// optional "output_tokens" or "max_tokens") or a ShareGPT JSON array
// ({"conversations": [{"from": "human", "value": ...}, {"from": "gpt", ...}]}).
func LoadDataset(path string) (*Dataset, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading dataset: %w", err)
	}
	sum := sha256.Sum256(b)
	d := &Dataset{Name: filepath.Base(path), SHA256: hex.EncodeToString(sum[:])}
	if trimmed := bytes.TrimSpace(b); len(trimmed) > 0 && trimmed[0] == '[' {
		d.Entries, err = parseShareGPT(trimmed, path)
	} else {
		d.Entries, err = parseJSONL(b, path)
	}
	if err != nil {
		return nil, err
	}
	if len(d.Entries) == 0 {
		return nil, fmt.Errorf("dataset %s: no prompts", path)
	}
	return d, nil
}

func parseJSONL(b []byte, path string) ([]Entry, error) {
	var out []Entry
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for line := 1; sc.Scan(); line++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var rec struct {
			Prompt       *string         `json:"prompt"`
			Text         *string         `json:"text"`
			OutputTokens int             `json:"output_tokens"`
			MaxTokens    int             `json:"max_tokens"`
			Completion   *string         `json:"completion"`
			Response     *string         `json:"response"`
			ID           json.RawMessage `json:"id"`
			Reference    json.RawMessage `json:"reference"`
			Expected     json.RawMessage `json:"expected"`
		}
		if err := json.Unmarshal(raw, &rec); err != nil {
			return nil, fmt.Errorf("dataset %s: line %d: %w", path, line, err)
		}
		p := rec.Prompt
		if p == nil {
			p = rec.Text
		}
		if p == nil {
			return nil, fmt.Errorf("dataset %s: line %d: no \"prompt\" or \"text\" field", path, line)
		}
		if rec.OutputTokens < 0 || rec.MaxTokens < 0 {
			return nil, fmt.Errorf("dataset %s: line %d: output_tokens and max_tokens must not be negative", path, line)
		}
		e := Entry{Prompt: *p, OutputTokens: max(rec.OutputTokens, rec.MaxTokens), Row: line}
		for _, r := range []*string{rec.Completion, rec.Response} {
			if r != nil && e.Reply == "" {
				e.Reply = *r
			}
		}
		if err := e.setPassThrough(rec.ID, rec.Reference, rec.Expected); err != nil {
			return nil, fmt.Errorf("dataset %s: line %d: %w", path, line, err)
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("dataset %s: %w", path, err)
	}
	return out, nil
}

func parseShareGPT(b []byte, path string) ([]Entry, error) {
	var convs []struct {
		ID            json.RawMessage `json:"id"`
		Reference     json.RawMessage `json:"reference"`
		Expected      json.RawMessage `json:"expected"`
		Conversations []struct {
			From  string `json:"from"`
			Value string `json:"value"`
		} `json:"conversations"`
	}
	if err := json.Unmarshal(b, &convs); err != nil {
		return nil, fmt.Errorf("dataset %s: ShareGPT JSON: %w", path, err)
	}
	var out []Entry
	for n, c := range convs {
		// Every human turn is a prompt (Turn counts them), with the turns
		// before it as its history; the gpt turn after it is its reply,
		// whose length in the server's tokens is the output length.
		// Conversations without a human turn are skipped.
		var history []client.Message
		turn := 0
		for i, t := range c.Conversations {
			role := shareGPTRole(t.From)
			if role != "user" {
				if role != "" {
					history = append(history, client.Message{Role: role, Content: t.Value})
				}
				continue
			}
			e := Entry{Prompt: t.Value, Row: n + 1, Turn: turn, History: slices.Clip(history)}
			if err := e.setPassThrough(c.ID, c.Reference, c.Expected); err != nil {
				return nil, fmt.Errorf("dataset %s: conversation %d: %w", path, n+1, err)
			}
			if i+1 < len(c.Conversations) && shareGPTRole(c.Conversations[i+1].From) == "assistant" {
				e.Reply = c.Conversations[i+1].Value
			}
			out = append(out, e)
			history = append(history, client.Message{Role: "user", Content: t.Value})
			turn++
		}
	}
	return out, nil
}

// shareGPTRole is the chat role of a ShareGPT turn's "from" ("" for one
// that is no message: a tool's, an unknown).
func shareGPTRole(from string) string {
	switch from {
	case "human", "user":
		return "user"
	case "gpt", "chatgpt", "bard", "bing", "assistant", "model":
		return "assistant"
	case "system":
		return "system"
	}
	return ""
}

// setPassThrough sets the entry's ID (a JSON string or number; null or
// absent: none) and Reference (reference, else expected; null: none).
func (e *Entry) setPassThrough(id, reference, expected json.RawMessage) error {
	if id = bytes.TrimSpace(id); len(id) > 0 && string(id) != "null" {
		var s string
		switch {
		case json.Unmarshal(id, &s) == nil:
			e.ID = s
		case id[0] == '-' || id[0] >= '0' && id[0] <= '9':
			e.ID = string(id)
		default:
			return fmt.Errorf(`"id" must be a string or a number, got %s`, id)
		}
	}
	for _, r := range []json.RawMessage{reference, expected} {
		if r = bytes.TrimSpace(r); len(r) > 0 && string(r) != "null" {
			var c bytes.Buffer
			if err := json.Compact(&c, r); err != nil {
				return err
			}
			e.Reference = c.Bytes()
			break
		}
	}
	return nil
}

// Config describes a workload.
type Config struct {
	Seed         int64
	Input        Length
	Output       Length
	Dataset      *Dataset
	MaxTokens    int // caps output; 0 = no cap beyond the distribution
	IgnoreEOS    bool
	PromptPrefix string
	// Nonce and Variant, when either is set, lead every prompt with a tag
	// derived from both (see Request): prompts of different nonces or
	// variants share no prefix. A run draws a nonce per invocation and
	// uses its level and repeat as the variant; the same seed, nonce and
	// variant give the same prompts byte for byte. Both empty: prompts
	// depend only on the seed and the request index.
	Nonce   string
	Variant string
	// Trace replays a trace's lengths (trace.go); Turns > 1 makes
	// multi-turn conversations of Turns turns (conversation.go). At most
	// one of Dataset, Trace and Turns > 1 is set (Validate).
	Trace *Trace
	Turns int
	// DatasetTurns is which of a dataset's prompts are sent:
	// DatasetTurnsFirst (empty: each conversation's first human turn, as
	// before) or DatasetTurnsAll (every human turn, after its history).
	// Replies converts the rows' replies to output lengths (reply.go).
	DatasetTurns string
	Replies      Replies
	// Tokens converts the lengths asked for, in the server's tokens, to
	// words of the synthetic prompts (tokens.go); zero: one word each.
	Tokens Tokens
	// SharedPrefix starts every synthetic prompt with one of a pool of
	// shared prefixes (sharedprefix.go); not with Dataset, Trace or Turns.
	SharedPrefix *SharedPrefix
	// Images are sent with every (chat) request (images.go).
	Images *Images
}

// maxNonce is the longest nonce accepted.
const maxNonce = 64

// ValidateNonce checks a nonce: 1 to 64 letters, digits, '-' or '_' (it
// becomes part of the first word of every prompt).
func ValidateNonce(n string) error {
	if n == "" || len(n) > maxNonce {
		return fmt.Errorf("prompt nonce %q: want 1 to %d letters, digits, '-' or '_'", n, maxNonce)
	}
	for _, c := range n {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("prompt nonce %q: %q is not a letter, digit, '-' or '_'", n, c)
		}
	}
	return nil
}

// Workload hands out requests by index.
type Workload struct {
	cfg  Config
	perm []int
	tag  string // leads every prompt; empty without nonce and variant
}

// New returns a workload.
func New(cfg Config) *Workload {
	w := &Workload{cfg: cfg}
	if cfg.Dataset != nil {
		// The entries sent (every one, or each conversation's first turn),
		// in an order drawn with the seed.
		var sel []int
		for k, e := range cfg.Dataset.Entries {
			if e.Turn == 0 || cfg.DatasetTurns == DatasetTurnsAll {
				sel = append(sel, k)
			}
		}
		rng := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x9e3779b97f4a7c15))
		w.perm = rng.Perm(len(sel))
		for j, p := range w.perm {
			w.perm[j] = sel[p]
		}
	}
	w.tag = tag(cfg.Nonce, cfg.Variant)
	return w
}

// Entry returns the dataset entry request i sends, or false without a
// dataset.
func (w *Workload) Entry(i int) (Entry, bool) {
	d := w.cfg.Dataset
	if d == nil || len(w.perm) == 0 {
		return Entry{}, false
	}
	return d.Entries[w.perm[i%len(w.perm)]], true
}

// WithVariant returns the workload with Config.Variant set to v: the same
// lengths and words, a different tag.
func (w *Workload) WithVariant(v string) *Workload {
	c := *w
	c.cfg.Variant = v
	c.tag = tag(c.cfg.Nonce, v)
	return &c
}

// tag is 10 decimal digits of a hash of nonce and variant, or "" when
// both are empty.
func tag(nonce, variant string) string {
	if nonce == "" && variant == "" {
		return ""
	}
	h := fnv.New64a()
	h.Write([]byte(nonce))
	h.Write([]byte{0})
	h.Write([]byte(variant))
	// Decimal digits: a tokenizer splits a run of digits the same way
	// whatever they are (Llama 3 and GPT-4 by three, others one by one),
	// so every run's tag costs the same tokens and the calibration holds
	// for all of them; hex letters would merge unpredictably.
	return fmt.Sprintf("%010d", h.Sum64()%10_000_000_000)
}

// vocabulary are the words of synthetic prompts: short, common English
// words that every widespread sub-word tokenizer (Llama, GPT, Qwen,
// Mistral) counts as one token each after a space, so that a prompt's
// length in the server's tokens follows its word count closely, prompt
// by prompt, and a calibration (Tokens) can size it to within a token
// or two.
var vocabulary = strings.Fields(`the of and to in is was for on that with as by at from it an be this are or has have had not but were one all its also more two new can they some into only most over may when many time than used city part made each life game team work area high year same well long both back east west town band song film last best home land`)

// Request returns request i. A synthetic prompt is the request index (led
// by the tag: "TAG-i") then words drawn with the seed and i, as many as
// make the length drawn in the server's tokens (Config.Tokens); a dataset prompt is led by "TAG-i " when there is a tag.
func (w *Workload) Request(i int) client.Request {
	r := w.textRequest(i)
	if w.cfg.Images != nil {
		r.Images = w.cfg.Images.images(i)
	}
	return r
}

// textRequest is request i without its images.
func (w *Workload) textRequest(i int) client.Request {
	switch {
	case w.cfg.Trace != nil:
		return w.traceRequest(i)
	case w.cfg.Turns > 1:
		return w.turnRequest(i)
	case w.cfg.SharedPrefix != nil:
		return w.sharedPrefixRequest(i)
	}
	rng := rand.New(rand.NewPCG(uint64(w.cfg.Seed), uint64(i)))
	var prompt string
	var in, out, target int // target: the length asked for, in the server's tokens (0: a dataset's prompt)
	var history []client.Message
	if d := w.cfg.Dataset; d != nil {
		k := w.perm[i%len(w.perm)]
		e := d.Entries[k]
		prompt, history = e.Prompt, e.History
		lead := w.tag + "-" + strconv.Itoa(i) + " "
		switch {
		case w.tag != "" && len(history) > 0:
			// The conversation's first message leads with the tag.
			history = slices.Clone(history)
			history[0].Content = lead + history[0].Content
		case w.tag != "":
			prompt = lead + prompt
		}
		in = len(strings.Fields(prompt))
		for _, m := range history {
			in += len(strings.Fields(m.Content))
		}
		out = e.OutputTokens
		if out == 0 && e.Reply != "" {
			out = w.cfg.Replies.Tokens(k, e.Reply)
		}
		if out == 0 {
			out = w.cfg.Output.Sample(rng)
		}
	} else {
		in = w.cfg.Input.Sample(rng)
		out = w.cfg.Output.Sample(rng)
		target = in
		nw := w.cfg.Tokens.Words(in)
		var sb strings.Builder
		sb.Grow(in * 8)
		sb.WriteString(w.cfg.PromptPrefix)
		// A unique leading number defeats prefix caching across requests,
		// the tag across runs.
		if w.tag != "" {
			sb.WriteString(w.tag)
			sb.WriteByte('-')
		}
		sb.WriteString(strconv.Itoa(i))
		for k := 1; k < nw; k++ {
			sb.WriteByte(' ')
			sb.WriteString(vocabulary[rng.IntN(len(vocabulary))])
		}
		prompt = sb.String()
	}
	if w.cfg.MaxTokens > 0 {
		out = min(out, w.cfg.MaxTokens)
	}
	return client.Request{Index: i, Prompt: prompt, History: history, InputTokens: in, TargetInputTokens: target, MaxTokens: out, IgnoreEOS: w.cfg.IgnoreEOS}
}
