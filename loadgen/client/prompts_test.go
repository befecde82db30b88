package client

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestScanCachedTokens: usage.prompt_tokens_details.cached_tokens (vLLM
// with --enable-prompt-tokens-details, OpenAI) is read by the scanner,
// exactly as encoding/json reads it, and a chunk the scanner is unsure of
// falls back.
func TestScanCachedTokens(t *testing.T) {
	cases := []struct {
		name, data string
		fast       bool
		want       Usage
	}{
		{"vllm", `{"model":"m","choices":[],"usage":{"prompt_tokens":70,"total_tokens":74,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":48}}}`,
			true, Usage{PromptTokens: 70, CompletionTokens: 4, PromptTokensDetails: PromptTokensDetails{CachedTokens: OptInt{V: 48, Set: true}}}},
		{"openai with audio", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"audio_tokens":0,"cached_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}}`,
			true, Usage{PromptTokens: 9, CompletionTokens: 1, PromptTokensDetails: PromptTokensDetails{CachedTokens: OptInt{Set: true}}, Reasoning: true}},
		{"details null", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":null}}`,
			true, Usage{PromptTokens: 9, CompletionTokens: 1}},
		{"cached null", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":null}}}`,
			true, Usage{PromptTokens: 9, CompletionTokens: 1}},
		{"no cached", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{}}}`,
			true, Usage{PromptTokens: 9, CompletionTokens: 1}},
		{"fraction falls back", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1.5}}}`,
			false, Usage{}},
		{"duplicate falls back", `{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":1,"cached_tokens":2}}}`,
			false, Usage{}},
		{"details not an object", `{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":3}}`,
			false, Usage{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p parsed
			if got := scanChunk([]byte(tc.data), &p); got != tc.fast {
				t.Fatalf("scanner decided %v, want %v", got, tc.fast)
			}
			checkEquivalent(t, []byte(tc.data))
			if !tc.fast {
				return
			}
			if !p.hasUsage || p.usage != tc.want {
				t.Errorf("usage %+v (has %v), want %+v", p.usage, p.hasUsage, tc.want)
			}
			// encoding/json reads the same.
			slow, err := parseChunkJSON([]byte(tc.data), &chunk{})
			if err != nil || slow.usage != tc.want {
				t.Errorf("encoding/json: usage %+v err %v, want %+v", slow.usage, err, tc.want)
			}
		})
	}
}

// TestRecordCachedTokens: the final usage's cached tokens reach the
// record; a server that does not say leaves it nil (not 0).
func TestRecordCachedTokens(t *testing.T) {
	for _, tc := range []struct {
		name  string
		usage string
		want  *int
	}{
		{"reported", `data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":5}}}` + "\n\n", new(5)},
		{"reported zero", `data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\n", new(0)},
		{"not reported", usageChunk, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := sseServer(t, 200, "text/event-stream", 0, roleChunk, helloChunk, worldChunk, tc.usage, done)
			c := newClient(t, srv.URL, EndpointChat, 5*time.Second)
			now := time.Now()
			rec := c.Do(context.Background(), Request{Index: 3, Prompt: "p", MaxTokens: 4, PrefixGroup: 2, PrefixTokens: 100}, now, now)
			if !rec.OK() {
				t.Fatalf("failed: %s %s", rec.ErrorClass, rec.Error)
			}
			if !reflect.DeepEqual(rec.CachedTokens, tc.want) {
				t.Errorf("cached tokens %v, want %v", ptrString(rec.CachedTokens), ptrString(tc.want))
			}
			if rec.PrefixGroup != 2 || rec.PrefixTokens != 100 || rec.Images != 0 {
				t.Errorf("prefix group %d tokens %d images %d, want 2 100 0", rec.PrefixGroup, rec.PrefixTokens, rec.Images)
			}
		})
	}
}

func ptrString(p *int) any {
	if p == nil {
		return "nil"
	}
	return *p
}

// TestBodyImageParts: with images the user content is OpenAI's array of
// content parts, the prompt first, then one image_url part per image;
// without, the plain string as before. The completions endpoint refuses
// images.
func TestBodyImageParts(t *testing.T) {
	c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// One image encoded ahead (NewImage), one when sent: the same bytes.
	r := Request{Index: 1, Prompt: "what \"is\" this", MaxTokens: 3, Images: []Image{NewImage("data:image/png;base64,iVBORw0K"), {URL: "data:image/jpeg;base64,/9j/4A=="}}}
	got, err := c.Body(r)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what \"is\" this"},` +
		`{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0K"}},` +
		`{"type":"image_url","image_url":{"url":"data:image/jpeg;base64,/9j/4A=="}}]}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`
	if string(got) != want {
		t.Errorf("body\n%s\nwant\n%s", got, want)
	}
	var v struct {
		Messages []struct {
			Content []struct {
				Type     string `json:"type"`
				Text     string `json:"text"`
				ImageURL struct {
					URL string `json:"url"`
				} `json:"image_url"`
			} `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(got, &v); err != nil || len(v.Messages) != 1 || len(v.Messages[0].Content) != 3 ||
		v.Messages[0].Content[0].Text != r.Prompt || v.Messages[0].Content[2].ImageURL.URL != r.Images[1].URL {
		t.Errorf("decoded %+v, %v", v, err)
	}
	comp, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointCompletions, Model: "m", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := comp.Body(r); err == nil {
		t.Error("completions body with images: no error")
	}
}

// BenchmarkBodyImages writes a body with two 768 KB images whose parts were
// encoded ahead (NewImage): a copy, not an escape, per request.
func BenchmarkBodyImages(b *testing.B) {
	c, _ := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Second})
	u := "data:image/png;base64," + strings.Repeat("iVBORw0KGgoAAAANSUhEUgAAAgAAAAIACAIAAAB7GkOtAAAA", 16000)
	r := Request{Prompt: "17 the quick brown fox", MaxTokens: 128, Images: []Image{NewImage(u), NewImage(u)}}
	b.SetBytes(int64(2 * len(u)))
	buf := make([]byte, 0, 4<<20)
	for b.Loop() {
		buf = c.appendBody(buf[:0], r)
	}
}
