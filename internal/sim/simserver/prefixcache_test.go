package simserver

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// seqWords returns "p1 p2 … pn" with the given prefix letter.
func seqWords(prefix string, from, to int) string {
	var w []string
	for i := from; i <= to; i++ {
		w = append(w, fmt.Sprintf("%s%d", prefix, i))
	}
	return strings.Join(w, " ")
}

// hashBlocks returns the block hashes of contents walked in order with
// the words tokenizer (one token per word, no template).
func hashBlocks(contents []json.RawMessage, size int) []uint64 {
	p := &promptWalk{words: true, size: size, h: fnvOffset}
	for _, c := range contents {
		p.content(c)
	}
	return p.blocks
}

// countWords counts a content's tokens with the words tokenizer.
func countWords(raw json.RawMessage) int {
	p := &promptWalk{words: true}
	p.content(raw)
	return p.n
}

func blocksOf(prompt string, size int) []uint64 {
	raw, _ := json.Marshal(prompt)
	return hashBlocks([]json.RawMessage{raw}, size)
}

// runAlone sends r to an idle engine at now and drives it until nothing is
// pending; it returns r's time to first token and when everything ended.
func runAlone(t *testing.T, e *engine, now time.Time, r *request) (time.Duration, time.Time) {
	t.Helper()
	r.arrival = now
	e.enqueue(r)
	start := now
	for i := 0; i < 1000; i++ {
		e.advance(now)
		next, ok := e.next()
		if !ok {
			break
		}
		now = next
	}
	times, finished := r.snapshot()
	if !finished || len(times) == 0 {
		t.Fatalf("request %d did not finish", r.seq)
	}
	return time.Unix(0, times[0]).Sub(start), now
}

func TestPrefixCachePrefillTimes(t *testing.T) {
	t.Parallel()
	// 1 ms per prefilled token, 10 ms per decode step, blocks of 4 words,
	// room for 2 blocks. Every request produces one token, alone, so its
	// TTFT is one step: (prompt − cached) ms + 10 ms.
	cfg := Config{PrefillPerToken: time.Millisecond, DecodeBase: 10 * time.Millisecond, PrefixCacheTokens: 8, PrefixBlockTokens: 4}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var queued atomic.Int64
	m := newMetrics(cfg.Model)
	e := newEngine(&cfg, m, &queued)
	steps := []struct {
		name   string
		prompt string
		cached int
	}{
		// A: 10 words, blocks a1-4 and a5-8 cached afterwards; 20 ms.
		{"cold", seqWords("a", 1, 10), 0},
		// The same 8 words then 2 others: both blocks hit; 2 + 10 ms.
		{"shared prefix", seqWords("a", 1, 8) + " x y", 8},
		// A again: both blocks hit, the last 2 words are computed.
		{"same prompt", seqWords("a", 1, 10), 8},
		// Exactly the 2 cached blocks: at least one token is computed, so
		// the last block is: 4 cached, 4 + 10 ms.
		{"prompt cached whole", seqWords("a", 1, 8), 4},
		// A prompt sharing only the first word hits nothing.
		{"first block differs", "a1 b2 b3 b4 b5 b6 b7 b8 b9", 0},
		// Its 2 blocks filled the cache: A's blocks were evicted.
		{"evicted", seqWords("a", 1, 10), 0},
	}
	now := time.Unix(1_700_000_000, 0)
	queries, hits := 0, 0
	for i, s := range steps {
		r := testRequest(uint64(i), len(strings.Fields(s.prompt)), 1, -1, now)
		r.blocks = blocksOf(s.prompt, 4)
		ttft, end := runAlone(t, e, now, r)
		want := time.Duration(r.promptTokens-s.cached)*time.Millisecond + 10*time.Millisecond
		if r.cached != s.cached || ttft != want {
			t.Errorf("%s: cached %d tokens, TTFT %v; want %d, %v", s.name, r.cached, ttft, s.cached, want)
		}
		queries += r.promptTokens
		hits += s.cached
		now = end.Add(time.Second)
	}
	if got := testutil.ToFloat64(m.prefixQueries); got != float64(queries) {
		t.Errorf("vllm:prefix_cache_queries_total = %v, want %d", got, queries)
	}
	if got := testutil.ToFloat64(m.prefixHits); got != float64(hits) {
		t.Errorf("vllm:prefix_cache_hits_total = %v, want %d", got, hits)
	}
}

func TestPrefixCacheLRU(t *testing.T) {
	t.Parallel()
	c := newPrefixCache(3)
	for _, s := range []struct {
		blocks []uint64
		hit    int
		keep   []uint64 // cached afterwards, most recent first
	}{
		{[]uint64{1, 2}, 0, []uint64{1, 2}},
		{[]uint64{1, 2, 3}, 2, []uint64{1, 2, 3}},
		// 4 misses at once: the least recently used block (3, touched
		// first as the tail of the previous prompt) goes.
		{[]uint64{4}, 0, []uint64{4, 1, 2}},
		// 1 is cached but 5 is not: the hit stops at the first miss.
		{[]uint64{5, 1}, 0, []uint64{5, 1, 4}},
	} {
		if got := c.admit(s.blocks); got != s.hit {
			t.Errorf("admit %v = %d hits, want %d", s.blocks, got, s.hit)
		}
		var keep []uint64
		for e := c.lru.Front(); e != nil; e = e.Next() {
			keep = append(keep, e.Value.(uint64))
		}
		if !slices.Equal(keep, s.keep) || len(c.index) != len(s.keep) {
			t.Errorf("after %v: cache %v (index %d), want %v", s.blocks, keep, len(c.index), s.keep)
		}
	}
}

func TestHashBlocksMatchesTheCount(t *testing.T) {
	t.Parallel()
	// Every form of content counts and hashes the same words.
	for _, tc := range []struct {
		name    string
		content string
		words   int
	}{
		{"string", `"a b\tc\u00a0d  e\nf g h"`, 8},
		{"strings", `["a b c", "d e f g h"]`, 8},
		{"parts", `[{"type":"text","text":"a b c d"},{"type":"text","text":"e f g h"}]`, 8},
		{"token ids", `[1, 2, 3, 4, 5]`, 5},
	} {
		raw := json.RawMessage(tc.content)
		if n := countWords(raw); n != tc.words {
			t.Errorf("%s: counted %d words, want %d", tc.name, n, tc.words)
		}
	}
	want := hashBlocks([]json.RawMessage{json.RawMessage(`"a b c d e f g h"`)}, 4)
	if len(want) != 2 {
		t.Fatalf("2 blocks expected, got %d", len(want))
	}
	for _, c := range []string{`"a b\tc\u00a0d  e\nf g h"`, `["a b c", "d e f g h"]`, `[{"text":"a b c d"},{"text":"e f g h"}]`} {
		if got := hashBlocks([]json.RawMessage{json.RawMessage(c)}, 4); !slices.Equal(got, want) {
			t.Errorf("%s: blocks %x, want %x", c, got, want)
		}
	}
	// Split across messages, the words are the same stream.
	if got := hashBlocks([]json.RawMessage{json.RawMessage(`"a b c"`), json.RawMessage(`"d e f g h"`)}, 4); !slices.Equal(got, want) {
		t.Errorf("two messages: blocks %x, want %x", got, want)
	}
	if got := hashBlocks([]json.RawMessage{json.RawMessage(`"a b c d e f g x"`)}, 4); got[0] != want[0] || got[1] == want[1] {
		t.Errorf("a different last word must change the second block only: %x vs %x", got, want)
	}
}

func TestPrefixCacheMetricsOverHTTP(t *testing.T) {
	t.Parallel()
	cfg := Config{FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, PrefixCacheTokens: 1000, PrefixBlockTokens: 4}
	wordTokens(&cfg)
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	done := make(chan struct{})
	go func() { _ = s.Run(t.Context()); close(done) }()
	defer func() { s.Close(); <-done }()
	post := func(body string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("HTTP %d", resp.StatusCode)
		}
	}
	// Turn 1 (10 words), then turn 2 resending it with an answer and a
	// new message (16 words): its first 2 blocks (8 words) are cached.
	post(`{"model":"gpulens-sim","max_tokens":2,"messages":[{"role":"user","content":"` + seqWords("u", 1, 10) + `"}]}`)
	post(`{"model":"gpulens-sim","max_tokens":2,"messages":[{"role":"user","content":"` + seqWords("u", 1, 10) + `"},` +
		`{"role":"assistant","content":"r1 r2"},{"role":"user","content":"` + seqWords("v", 1, 4) + `"}]}`)
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`vllm:prefix_cache_queries_total{model_name="gpulens-sim"} 26`,
		`vllm:prefix_cache_hits_total{model_name="gpulens-sim"} 8`,
		`vllm:num_preemptions_total{model_name="gpulens-sim"} 0`,
	} {
		if !strings.Contains(string(b), want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
