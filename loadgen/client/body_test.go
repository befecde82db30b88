package client

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// bodyJSON is the request body as encoding/json writes it: the reference
// for Client.Body.
func bodyJSON(c *Client, r Request) []byte {
	type streamOptions struct {
		IncludeUsage    bool `json:"include_usage"`
		ContinuousUsage bool `json:"continuous_usage_stats,omitempty"`
	}
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	body := struct {
		Model         string        `json:"model"`
		Messages      []message     `json:"messages,omitempty"`
		Prompt        *string       `json:"prompt,omitempty"`
		MaxTokens     int           `json:"max_tokens,omitempty"`
		Stream        bool          `json:"stream"`
		StreamOptions streamOptions `json:"stream_options"`
		IgnoreEOS     bool          `json:"ignore_eos,omitempty"`
	}{
		Model: c.cfg.Model, MaxTokens: r.MaxTokens, Stream: true, IgnoreEOS: r.IgnoreEOS,
		StreamOptions: streamOptions{IncludeUsage: true, ContinuousUsage: c.cfg.ContinuousUsage},
	}
	if c.cfg.Endpoint == EndpointChat {
		body.Messages = []message{{Role: "user", Content: r.Prompt}}
	} else {
		body.Prompt = &r.Prompt
	}
	b, _ := json.Marshal(&body)
	return b
}

func checkBody(t testing.TB, c *Client, r Request) {
	t.Helper()
	got, err := c.Body(r)
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %q is not JSON: %v", got, err)
	}
	want := bodyJSON(c, r)
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("body\n%s\ndecodes differently from encoding/json's\n%s", got, want)
	}
}

var bodyPrompts = []string{"", "hello world", `quote " backslash \ slash /`, "tab\tnewline\nreturn\r bell\a nul\x00 del\x7f",
	"é ü 日本 🙂", "<html>&amp;</html>", "line\u2028sep\u2029", "bad \xff\xfe utf-8 \xed\xa0\x80 surrogate", "trailing \xe6\x97"}

func TestBodyMatchesEncodingJSON(t *testing.T) {
	for _, ep := range []string{EndpointChat, EndpointCompletions} {
		for _, cont := range []bool{false, true} {
			for _, model := range []string{"m", `org/model "v2"`} {
				c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: ep, Model: model, Timeout: time.Second, ContinuousUsage: cont})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range bodyPrompts {
					for _, r := range []Request{{Prompt: p}, {Prompt: p, MaxTokens: 16, IgnoreEOS: true}} {
						checkBody(t, c, r)
					}
				}
			}
		}
	}
	c, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Second})
	got, _ := c.Body(Request{Prompt: "a\"b", MaxTokens: 7, IgnoreEOS: true})
	const want = `{"model":"m","messages":[{"role":"user","content":"a\"b"}],"max_tokens":7,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`
	if string(got) != want {
		t.Errorf("body = %s\nwant   %s", got, want)
	}
}

func FuzzBody(f *testing.F) {
	for _, p := range bodyPrompts {
		f.Add(p, "m", 3, true)
	}
	f.Fuzz(func(t *testing.T, prompt, model string, maxTokens int, chat bool) {
		ep := EndpointCompletions
		if chat {
			ep = EndpointChat
		}
		c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: ep, Model: model, Timeout: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		checkBody(t, c, Request{Prompt: prompt, MaxTokens: maxTokens})
	})
}

func BenchmarkBody(b *testing.B) {
	c, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Second})
	r := Request{Prompt: "17 the quick brown fox jumps over the lazy dog and keeps running far away", MaxTokens: 128}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		c.Body(r)
	}
}
