package simserver

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestReasoningStream: with ReasoningTokens 4 and two tokens per chunk,
// the chunks of a 6-token chat answer hold tokens 0, 1–2, 3–4 and 5:
// reasoning, reasoning, the boundary (token 3 thinking, 4 the answer's
// first) with both, and answer; every usage counts the reasoning so far,
// the final one 4.
func TestReasoningStream(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 3, FixedTTFT: time.Millisecond, FixedITL: 100 * time.Microsecond, TokensPerChunk: 2, ReasoningTokens: 4})
	resp, body := post(t, url+"/v1/chat/completions", chatBody(`,"max_tokens":6,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`))
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	type delta struct {
		Role      *string `json:"role"`
		Content   *string `json:"content"`
		Reasoning *string `json:"reasoning"`
	}
	type usage struct {
		CompletionTokens int `json:"completion_tokens"`
		Details          *struct {
			ReasoningTokens int `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
	var (
		kinds      []string
		reasoning  strings.Builder
		content    strings.Builder
		lastUsage  usage
		usageSeen  []int
		reasonSeen []int
	)
	for _, ev := range sseEvents(t, body) {
		if ev == "[DONE]" {
			continue
		}
		var c struct {
			Choices []struct{ Delta delta }
			Usage   *usage
		}
		if err := json.Unmarshal([]byte(ev), &c); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
		if c.Usage != nil {
			lastUsage = *c.Usage
			if c.Usage.Details == nil {
				t.Errorf("usage without completion_tokens_details: %s", ev)
			} else {
				usageSeen, reasonSeen = append(usageSeen, c.Usage.CompletionTokens), append(reasonSeen, c.Usage.Details.ReasoningTokens)
			}
		}
		for _, ch := range c.Choices {
			d := ch.Delta
			k := ""
			if d.Reasoning != nil {
				k += "R"
				reasoning.WriteString(*d.Reasoning)
			}
			if d.Content != nil && *d.Content != "" {
				k += "C"
				content.WriteString(*d.Content)
			}
			if k != "" {
				kinds = append(kinds, k)
			}
		}
	}
	if got := strings.Join(kinds, " "); got != "R R RC C" {
		t.Errorf("chunks %q, want reasoning, reasoning, both, content", got)
	}
	if lastUsage.CompletionTokens != 6 || lastUsage.Details.ReasoningTokens != 4 {
		t.Errorf("final usage %+v, want 6 completion tokens of which 4 reasoning", lastUsage)
	}
	// The chunks 1/1, 3/3, 5/4, 6/4, and the usage chunk 6/4.
	if got, want := ints64(usageSeen), "[1,3,5,6,6]"; got != want {
		t.Errorf("continuous completion tokens %s, want %s", got, want)
	}
	if got, want := ints64(reasonSeen), "[1,3,4,4,4]"; got != want {
		t.Errorf("continuous reasoning tokens %s, want %s", got, want)
	}
	// The same text as without reasoning, split after the third word.
	_, plain := startServer(t, Config{Seed: 3, FixedTTFT: time.Millisecond, FixedITL: 100 * time.Microsecond})
	_, b := post(t, plain+"/v1/chat/completions", chatBody(`,"max_tokens":6,"ignore_eos":true`))
	var whole struct {
		Choices []struct{ Message struct{ Content string } }
	}
	if err := json.Unmarshal(b, &whole); err != nil {
		t.Fatal(err)
	}
	words := strings.Fields(whole.Choices[0].Message.Content)
	if got, want := reasoning.String(), strings.Join(words[:4], " "); got != want {
		t.Errorf("reasoning %q, want %q", got, want)
	}
	if got, want := content.String(), strings.Join(words[4:], " "); got != want {
		t.Errorf("content %q, want %q", got, want)
	}
}

// TestReasoningBeforeTheDrawnAnswer: without ignore_eos the model thinks
// ReasoningTokens tokens, then answers at the length it draws (the same
// draw as without reasoning), max_tokens capping both together.
func TestReasoningBeforeTheDrawnAnswer(t *testing.T) {
	t.Parallel()
	cfg := Config{Seed: 5, FixedTTFT: time.Millisecond, FixedITL: 50 * time.Microsecond, OutputTokensMean: 20}
	_, plain := startServer(t, cfg)
	cfg.ReasoningTokens = 30
	_, thinking := startServer(t, cfg)
	type resp struct {
		Choices []struct {
			Message      struct{ Content, Reasoning string }
			FinishReason string `json:"finish_reason"`
		}
		Usage usageJSON
	}
	get := func(url, extra string) resp {
		t.Helper()
		r, body := post(t, url+"/v1/chat/completions", chatBody(extra))
		var got resp
		if r.StatusCode != 200 || json.Unmarshal(body, &got) != nil {
			t.Fatalf("status %d: %s", r.StatusCode, body)
		}
		return got
	}
	// Request 0 of each server draws the same answer length n (far below
	// the 4096-token cap); the thinking server adds 30 before it.
	a, b := get(plain, ""), get(thinking, "")
	n := a.Usage.CompletionTokens
	if b.Usage.CompletionTokens != n+30 || b.Usage.Details == nil || b.Usage.Details.ReasoningTokens != 30 ||
		len(strings.Fields(b.Choices[0].Message.Content)) != n || b.Choices[0].FinishReason != "stop" {
		t.Errorf("thinking answer: %d tokens (%+v), %q, finish %q; want %d + 30, an answer of %d words, stop", b.Usage.CompletionTokens,
			b.Usage.Details, b.Choices[0].Message.Content, b.Choices[0].FinishReason, n, n)
	}
	// Request 1: max_tokens caps thinking and answer together.
	a, b = get(plain, `,"max_tokens":32`), get(thinking, `,"max_tokens":32`)
	if want := min(a.Usage.CompletionTokens+30, 32); b.Usage.CompletionTokens != want || b.Usage.Details.ReasoningTokens != 30 ||
		(want == 32) != (b.Choices[0].FinishReason == "length") {
		t.Errorf("capped: %d tokens, finish %q; want %d (the plain answer %d + 30, at most 32)", b.Usage.CompletionTokens,
			b.Choices[0].FinishReason, want, a.Usage.CompletionTokens)
	}
}

func ints64(v []int) string {
	s := make([]int64, len(v))
	for i, x := range v {
		s[i] = int64(x)
	}
	return ints(s)
}

// TestReasoningNonStreamingAndOff: a non-streaming answer splits its
// message the same way; enable_thinking false and text completions have
// no reasoning; max_tokens below the reasoning leaves no answer.
func TestReasoningNonStreamingAndOff(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 3, FixedTTFT: time.Millisecond, FixedITL: 100 * time.Microsecond, ReasoningTokens: 4})
	type resp struct {
		Choices []struct {
			Message struct{ Content, Reasoning string }
			Text    string
		}
		Usage usageJSON
	}
	for _, tc := range []struct {
		name, path, body        string
		reasoningWords, content int
		details                 bool
	}{
		{"reasoning then answer", "/v1/chat/completions", chatBody(`,"max_tokens":7,"ignore_eos":true`), 4, 3, true},
		{"max_tokens below the reasoning", "/v1/chat/completions", chatBody(`,"max_tokens":2,"ignore_eos":true`), 2, 0, true},
		{"thinking off", "/v1/chat/completions", chatBody(`,"max_tokens":7,"ignore_eos":true,"chat_template_kwargs":{"enable_thinking":false}`), 0, 7, false},
		{"completions", "/v1/completions", `{"model":"gpulens-sim","prompt":"hi","max_tokens":7,"ignore_eos":true}`, 0, 7, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, body := post(t, url+tc.path, tc.body)
			if r.StatusCode != 200 {
				t.Fatalf("status %d: %s", r.StatusCode, body)
			}
			var got resp
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			m := got.Choices[0].Message
			text := m.Content + got.Choices[0].Text
			if n := len(strings.Fields(m.Reasoning)); n != tc.reasoningWords || len(strings.Fields(text)) != tc.content {
				t.Errorf("reasoning %q (%d words), answer %q, want %d and %d words", m.Reasoning, n, text, tc.reasoningWords, tc.content)
			}
			if d := got.Usage.Details; (d != nil) != tc.details || (d != nil && d.ReasoningTokens != tc.reasoningWords) {
				t.Errorf("usage details %+v, want %d reasoning tokens (present %v)", d, tc.reasoningWords, tc.details)
			}
			if !tc.details && strings.Contains(string(body), "completion_tokens_details") {
				t.Errorf("details without reasoning: %s", body)
			}
		})
	}
}

// TestReasoningUsageWithCachedTokens: a reasoning answer to a prompt the
// prefix cache partly holds reports both details in one usage object, as
// OpenAI does: prompt_tokens_details.cached_tokens and
// completion_tokens_details.reasoning_tokens, streamed (the final usage
// chunk; the last content chunk of continuous usage) and not. Ten
// "university" and a word are 41 tokens with the template; after the
// ten alone were sent, 2 blocks of 16 are cached.
func TestReasoningUsageWithCachedTokens(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 3, Tokenizer: TokenizerSubword, FixedTTFT: time.Millisecond, FixedITL: 100 * time.Microsecond,
		PrefixCacheTokens: 10_000, PrefixBlockTokens: 16, ReasoningTokens: 4})
	words := strings.TrimSpace(strings.Repeat("university ", 10))
	body := func(content, extra string) string {
		return `{"model":"gpulens-sim","messages":[{"role":"user","content":"` + content + `"}],"max_tokens":6,"ignore_eos":true` + extra + `}`
	}
	if r, b := post(t, url+"/v1/chat/completions", body(words, "")); r.StatusCode != 200 {
		t.Fatalf("status %d: %s", r.StatusCode, b)
	}
	const want = `"usage":{"prompt_tokens":41,"total_tokens":47,"completion_tokens":6,` +
		`"prompt_tokens_details":{"cached_tokens":32},"completion_tokens_details":{"reasoning_tokens":4}}`

	r, b := post(t, url+"/v1/chat/completions", body(words+" x", `,"stream":true,"stream_options":{"include_usage":true,"continuous_usage_stats":true}`))
	if r.StatusCode != 200 {
		t.Fatalf("status %d: %s", r.StatusCode, b)
	}
	var withBoth []int
	evs := sseEvents(t, b)
	for i, ev := range evs {
		if strings.Contains(ev, `"prompt_tokens_details"`) {
			if !strings.Contains(ev, want) {
				t.Errorf("event %d: usage is not %s:\n%s", i, want, ev)
			}
			withBoth = append(withBoth, i)
		}
	}
	// The last content chunk and the usage chunk, before [DONE].
	if n := len(evs); len(withBoth) != 2 || withBoth[0] != n-3 || withBoth[1] != n-2 {
		t.Errorf("events %v of %d carry prompt_tokens_details, want the last content chunk's and the usage chunk's", withBoth, n)
	}

	r, b = post(t, url+"/v1/chat/completions", body(words+" x", ""))
	if r.StatusCode != 200 {
		t.Fatalf("status %d: %s", r.StatusCode, b)
	}
	var got struct{ Usage usageJSON }
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	u := got.Usage
	if u.PromptTokens != 41 || u.CompletionTokens != 6 || u.PromptTokensDetails == nil || u.PromptTokensDetails.CachedTokens != 32 ||
		u.Details == nil || u.Details.ReasoningTokens != 4 {
		t.Errorf("non-streaming usage %s, want 41 prompt tokens (32 cached), 6 completion tokens (4 reasoning)", b)
	}
}
