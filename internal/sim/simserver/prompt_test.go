package simserver

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWalkCountsAsTheTokenizer: hashing the prompt's tokens for the prefix
// cache walks exactly the tokens the usage counts: countSubword's per word,
// the template's, one per token id.
func TestWalkCountsAsTheTokenizer(t *testing.T) {
	t.Parallel()
	s := &Server{cfg: Config{PrefixCacheTokens: 100, PrefixBlockTokens: 3}, tokens: newTokenCounter(TokenizerSubword), images: newImageCache()}
	contents := []string{
		`"the university of 2024-25, naïve café: x1y22z333 ..."`,
		`"日本語の文章 and ελληνικά 1234567 ‽‽ a"`,
		`["strings too", "and more"]`,
		`[{"type":"text","text":"part one"},{"text":"no type"}]`,
		`[1, 2, 3]`,
		`""`,
	}
	for _, c := range contents {
		want := 0
		var raw json.RawMessage = []byte(c)
		var str string
		var strs []string
		var parts []struct{ Text string }
		switch {
		case json.Unmarshal(raw, &str) == nil:
			strs = []string{str}
		case json.Unmarshal(raw, &strs) == nil:
		case json.Unmarshal(raw, &parts) == nil && len(parts) > 0 && parts[0].Text != "":
			for _, p := range parts {
				strs = append(strs, p.Text)
			}
		default:
			want = 3 // the token ids
		}
		for _, s := range strs {
			for _, w := range strings.Fields(s) {
				want += countSubword([]byte(w))
			}
		}
		for _, hash := range []bool{false, true} {
			p := s.newWalk(hash)
			p.content(raw)
			if p.n != want || p.err != nil {
				t.Errorf("%s (hashing %v): %d tokens (err %v), want %d", c, hash, p.n, p.err, want)
			}
			if hash && len(p.blocks) != want/3 {
				t.Errorf("%s: %d blocks of 3, want %d", c, len(p.blocks), want/3)
			}
		}
		msgs := []json.RawMessage{[]byte(`{"role":"system","content":"be brief"}`), []byte(`{"role":"user","content":` + c + `}`)}
		p := s.newWalk(true)
		if err := p.chat(msgs, true); err != nil || p.n != want+3+ChatTemplateTokens(2) { // "be brief": 3
			t.Errorf("%s in chat: %d tokens (%v), want %d", c, p.n, err, want+3+ChatTemplateTokens(2))
		}
	}
}

// usageOf reads the final usage of a streamed answer.
func usageOf(t *testing.T, body []byte) (prompt int, cached *int) {
	t.Helper()
	for _, ev := range sseEvents(t, body) {
		var c struct {
			Usage *struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens *int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(ev), &c) == nil && c.Usage != nil {
			prompt = c.Usage.PromptTokens
			cached = nil
			if d := c.Usage.PromptTokensDetails; d != nil {
				cached = d.CachedTokens
			}
		}
	}
	return prompt, cached
}

func streamChat(content string) string {
	return `{"model":"gpulens-sim","max_tokens":1,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":` + content + `}]}`
}

// TestPrefixCacheCountsTokens: with the sub-word tokenizer the prefix
// cache's blocks are 16 of the tokens the usage counts, the template's
// included, and the usage reports the cached ones. Ten "university" are
// 30 tokens, 40 with the template: a prompt that adds a word after them
// shares its first 35 tokens, 2 blocks, 32 cached tokens (walking words,
// the simulator found no block of 16 in 11 words and cached nothing).
func TestPrefixCacheCountsTokens(t *testing.T) {
	t.Parallel()
	cfg := Config{Tokenizer: TokenizerSubword, FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, PrefixCacheTokens: 10_000, PrefixBlockTokens: 16}
	_, url := startServer(t, cfg)
	words := strings.TrimSpace(strings.Repeat("university ", 10))
	for _, step := range []struct {
		content      string
		prompt, want int
	}{
		{`"` + words + `"`, 40, 0},
		{`"` + words + ` x"`, 41, 32},
		// The same words in two text parts: the same tokens.
		{`[{"type":"text","text":"` + words + `"},{"type":"text","text":"x"}]`, 41, 32},
		// Another first word: nothing shared past the template's 5.
		{`"college ` + words + `"`, 42, 0},
	} {
		resp, body := post(t, url+"/v1/chat/completions", streamChat(step.content))
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: HTTP %d: %s", step.content, resp.StatusCode, body)
		}
		prompt, cached := usageOf(t, body)
		if prompt != step.prompt || cached == nil || *cached != step.want {
			t.Errorf("%s: prompt %d cached %v, want %d and %d", step.content, prompt, ptr(cached), step.prompt, step.want)
		}
	}

	// vLLM without --enable-prompt-tokens-details says nothing.
	cfg.OmitCachedTokens = true
	_, url = startServer(t, cfg)
	_, body := post(t, url+"/v1/chat/completions", streamChat(`"`+words+`"`))
	if _, cached := usageOf(t, body); cached != nil {
		t.Errorf("omitted: cached %d", *cached)
	}
}

func ptr(p *int) any {
	if p == nil {
		return "none"
	}
	return *p
}

// pngURL is a data: URL of a w × h PNG (or JPEG).
func imageURL(t *testing.T, w, h int, format string) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.SetRGBA(x, y, color.RGBA{uint8(x), uint8(y), uint8(x ^ y), 255})
		}
	}
	var buf bytes.Buffer
	if format == "jpeg" {
		if err := jpeg.Encode(&buf, img, nil); err != nil {
			t.Fatal(err)
		}
	} else if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return "data:image/" + format + ";base64," + base64.StdEncoding.EncodeToString(buf.Bytes())
}

func TestImageTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ w, h, want int }{
		{512, 512, 18*18 + 2},
		{1024, 768, 37*27 + 2},
		{14, 14, 2*2 + 2}, // scaled up to 4 tokens' pixels
		{4000, 3000, 143*107 + 2},
		{6000, 3000, 181*90 + 2}, // scaled down under 16384 tokens' pixels
	} {
		if got, err := ImageTokens(tc.w, tc.h); err != nil || got != tc.want {
			t.Errorf("%dx%d: %d tokens (%v), want %d", tc.w, tc.h, got, err, tc.want)
		}
	}
	if _, err := ImageTokens(402, 2); err == nil {
		t.Error("aspect ratio 201: no error")
	}
}

// TestImagesOverHTTP: an image_url part is decoded and charged its
// tokens, in the usage and /tokenize alike; the same image after the same
// text is a prefix the cache serves; malformed images get 400 as a real
// server answers them.
func TestImagesOverHTTP(t *testing.T) {
	t.Parallel()
	cfg := Config{Tokenizer: TokenizerSubword, FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, PrefixCacheTokens: 10_000, PrefixBlockTokens: 16}
	_, url := startServer(t, cfg)
	img := imageURL(t, 512, 512, "png")
	content := `[{"type":"text","text":"the cat"},{"type":"image_url","image_url":{"url":"` + img + `"}}]`
	// 1 + 4 + 2 (text) + 326 (image) + 1 + 4.
	const want = 338
	resp, body := post(t, url+"/v1/chat/completions", streamChat(content))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("HTTP %d: %s", resp.StatusCode, body)
	}
	if prompt, cached := usageOf(t, body); prompt != want || cached == nil || *cached != 0 {
		t.Errorf("first: prompt %d cached %v, want %d and 0", prompt, ptr(cached), want)
	}
	_, body = post(t, url+"/v1/chat/completions", streamChat(content))
	// The last block is recomputed: ⌊337/16⌋ × 16.
	if prompt, cached := usageOf(t, body); prompt != want || cached == nil || *cached != 336 {
		t.Errorf("again: prompt %d cached %v, want %d and 336", prompt, ptr(cached), want)
	}
	// Another image after the same text: only the blocks before it.
	other := strings.Replace(content, img, imageURL(t, 512, 512, "jpeg"), 1)
	_, body = post(t, url+"/v1/chat/completions", streamChat(other))
	if prompt, cached := usageOf(t, body); prompt != want || cached == nil || *cached != 0 {
		t.Errorf("other image: prompt %d cached %v, want %d and 0 (7 tokens before it: no full block)", prompt, ptr(cached), want)
	}
	resp, body = post(t, url+"/tokenize", `{"model":"gpulens-sim","messages":[{"role":"user","content":`+content+`}]}`)
	var tok struct{ Count int }
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &tok) != nil || tok.Count != want {
		t.Errorf("/tokenize: HTTP %d %s, want count %d", resp.StatusCode, body, want)
	}

	png := imageURL(t, 64, 64, "png")
	raw, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(png, "data:image/png;base64,"))
	truncated := "data:image/png;base64," + base64.StdEncoding.EncodeToString(raw[:len(raw)/2])
	for _, tc := range []struct{ name, part, want string }{
		{"bad base64", `{"type":"image_url","image_url":{"url":"data:image/png;base64,@@@"}}`, "invalid base64"},
		{"not an image", `{"type":"image_url","image_url":{"url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString([]byte("hello")) + `"}}`, "cannot identify image"},
		{"truncated", `{"type":"image_url","image_url":{"url":"` + truncated + `"}}`, "truncated or corrupt"},
		{"remote", `{"type":"image_url","image_url":{"url":"https://example.com/a.png"}}`, "fetches no remote image"},
		{"text media type", `{"type":"image_url","image_url":{"url":"data:text/plain;base64,aGk="}}`, "is not an image"},
		{"not base64", `{"type":"image_url","image_url":{"url":"data:image/png,rawbytes"}}`, "base64-encoded"},
		{"no url", `{"type":"image_url","image_url":{}}`, "want {\"url\""},
		{"url not a string", `{"type":"image_url","image_url":{"url":3}}`, "want {\"url\""},
		{"too thin", `{"type":"image_url","image_url":{"url":"` + imageURL(t, 402, 2, "png") + `"}}`, "aspect ratio"},
		{"audio", `{"type":"input_audio","input_audio":{"data":"","format":"wav"}}`, `"input_audio" is not supported`},
	} {
		resp, body := post(t, url+"/v1/chat/completions", streamChat(`[{"type":"text","text":"hi"},`+tc.part+`]`))
		var e struct {
			Error struct{ Message, Type string }
		}
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(body, &e) != nil || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, tc.want) {
			t.Errorf("%s: HTTP %d %s, want 400 invalid_request_error with %q", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	// A completions prompt takes no content parts.
	resp, _ = post(t, url+"/v1/completions", fmt.Sprintf(`{"model":"gpulens-sim","max_tokens":1,"prompt":[{"type":"image_url","image_url":{"url":%q}}]}`, png))
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("completions with an image: HTTP %d, want 400", resp.StatusCode)
	}
}

// TestPrefillChargesTokensNotCached: the prefill of a chat prompt walked
// by the sub-word tokenizer costs PrefillPerToken for every token the
// cache did not serve, an image's tokens included: alone, with 1 ms per
// token and a 10 ms step, TTFT is (prompt − cached) ms + 10 ms.
func TestPrefillChargesTokensNotCached(t *testing.T) {
	t.Parallel()
	cfg := Config{Tokenizer: TokenizerSubword, PrefillPerToken: time.Millisecond, DecodeBase: 10 * time.Millisecond, PrefixCacheTokens: 10_000, PrefixBlockTokens: 16}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	s := &Server{cfg: cfg, tokens: newTokenCounter(cfg.Tokenizer), images: newImageCache()}
	var queued atomic.Int64
	e := newEngine(&s.cfg, newMetrics(cfg.Model), &queued)
	img, other := imageURL(t, 512, 512, "png"), imageURL(t, 512, 512, "jpeg") // 326 tokens each
	words := strings.TrimSpace(strings.Repeat("university ", 10))
	withImage := func(url string) string {
		return `[{"type":"text","text":"` + words + `"},{"type":"image_url","image_url":{"url":"` + url + `"}}]`
	}
	now := time.Unix(1_700_000_000, 0)
	for i, step := range []struct {
		content        string
		prompt, cached int
	}{
		{`"` + words + `"`, 40, 0},
		{`"` + words + ` x"`, 41, 32},
		// 1 + 4 + 30 + 326 + 1 + 4 tokens: the text's 2 blocks cached.
		{withImage(img), 366, 32},
		// Again: every block but the last (recomputed), image included.
		{withImage(img), 366, 352},
		// Another image after the same text: the text's blocks only.
		{withImage(other), 366, 32},
	} {
		p := s.newWalk(true)
		if err := p.chat([]json.RawMessage{[]byte(`{"role":"user","content":` + step.content + `}`)}, true); err != nil {
			t.Fatal(err)
		}
		r := testRequest(uint64(i), p.n, 1, -1, now)
		r.blocks = p.blocks
		ttft, end := runAlone(t, e, now, r)
		if want := time.Duration(step.prompt-step.cached)*time.Millisecond + 10*time.Millisecond; p.n != step.prompt || r.cached != step.cached || ttft != want {
			t.Errorf("step %d: %d tokens, %d cached, TTFT %v; want %d, %d, %v", i, p.n, r.cached, ttft, step.prompt, step.cached, want)
		}
		now = end.Add(time.Second)
	}
}

// BenchmarkPromptWalk walks a 2000-word chat prompt, counting and hashing
// its tokens for the prefix cache, as every request's handler does.
func BenchmarkPromptWalk(b *testing.B) {
	s := &Server{cfg: Config{PrefixCacheTokens: 200_000, PrefixBlockTokens: 16}, tokens: newTokenCounter(TokenizerSubword), images: newImageCache()}
	words := strings.Fields(strings.Repeat("the of and to in is was for on that with as by at from it an be this are university 2024 ", 100))
	content, _ := json.Marshal(strings.Join(words, " "))
	msgs := []json.RawMessage{[]byte(`{"role":"user","content":` + string(content) + `}`)}
	b.ReportAllocs()
	var n int
	for b.Loop() {
		p := s.newWalk(true)
		if err := p.chat(msgs, true); err != nil {
			b.Fatal(err)
		}
		n = p.n
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/token")
}
