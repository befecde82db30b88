package simserver

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestCountSubword(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		word string
		want int
	}{
		{"the", 1}, {"time", 1}, {"tokens", 2}, {"university", 3}, {"12", 1}, {"1234", 2}, {"1234567890", 4},
		{"cal-0", 3}, {"2218125677-5", 6}, {"h12", 2}, {"héllo", 2}, {"a,b", 3}, {"", 0},
	} {
		if got := countSubword([]byte(tc.word)); got != tc.want {
			t.Errorf("countSubword(%q) = %d, want %d", tc.word, got, tc.want)
		}
	}
}

// TestSubwordUsageAndTokenize: by default the usage counts the sub-word
// tokens plus the chat template (1 + 5 per message + 4) or a BOS token,
// and /tokenize answers the same count; TokenizerWords counts words.
func TestSubwordUsageAndTokenize(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{FixedTTFT: 1, FixedITL: 1, Tokenizer: TokenizerSubword})
	_, wurl := startServer(t, Config{FixedTTFT: 1, FixedITL: 1, Tokenizer: TokenizerWords})
	post := func(u, path, body string) (int, map[string]any) {
		t.Helper()
		resp, err := http.Post(u+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		return resp.StatusCode, m
	}
	// "the university of 1234": 1 + 3 + 1 + 2 = 7 tokens; "hi there": 1 + 2.
	chat := `{"model":"gpulens-sim","max_tokens":1,"messages":[{"role":"system","content":"hi there"},{"role":"user","content":"the university of 1234"}]}`
	comp := `{"model":"gpulens-sim","max_tokens":1,"prompt":"the university of 1234"}`
	for _, tc := range []struct {
		url, path, body string
		want            float64
	}{
		{url, "/v1/chat/completions", chat, 10 + 1 + 5*2 + 4},
		{url, "/v1/completions", comp, 7 + 1},
		{url, "/tokenize", chat, 10 + 1 + 5*2 + 4},
		{url, "/tokenize", comp, 7 + 1},
		{url, "/tokenize", `{"model":"gpulens-sim","add_generation_prompt":false,"messages":[{"role":"user","content":"the"}]}`, 1 + 1 + 5},
		{wurl, "/v1/chat/completions", chat, 6},
		{wurl, "/tokenize", comp, 4},
	} {
		code, m := post(tc.url, tc.path, tc.body)
		var got float64
		if u, ok := m["usage"].(map[string]any); ok {
			got, _ = u["prompt_tokens"].(float64)
		} else {
			got, _ = m["count"].(float64)
		}
		if code != 200 || got != tc.want {
			t.Errorf("%s %s: HTTP %d, %v tokens, want %v (%v)", tc.path, tc.body, code, got, tc.want, m)
		}
		if tc.path == "/tokenize" {
			if ids, _ := m["tokens"].([]any); len(ids) != int(tc.want) || m["max_model_len"] == nil {
				t.Errorf("/tokenize answer %v", m)
			}
		}
	}
	if code, _ := post(url, "/tokenize", `{"model":"other","prompt":"x"}`); code != http.StatusNotFound {
		t.Errorf("/tokenize of another model: HTTP %d", code)
	}
	if code, _ := post(url, "/tokenize", `{"model":"gpulens-sim"}`); code != http.StatusBadRequest {
		t.Errorf("/tokenize without a prompt: HTTP %d", code)
	}
	if err := (&Config{Tokenizer: "bpe"}).Validate(); err == nil || !strings.Contains(err.Error(), `Tokenizer "bpe": must be subword or words`) {
		t.Errorf("bad tokenizer: %v", err)
	}
}
