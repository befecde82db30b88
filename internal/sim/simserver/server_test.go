package simserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	dto_ "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/testenv"
)

// startServer runs a simulator with cfg behind an httptest server on
// 127.0.0.1 until the test ends.
func startServer(t testing.TB, cfg Config) (*Server, string) {
	wordTokens(&cfg)
	t.Helper()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return s, ts.URL
}

// startGatedServer serves cfg like startServer but leaves the scheduler
// stopped until run is called: requests are received, answered with their
// headers and queued, and nothing is admitted. Tests use it to have every
// request of a batch arrive before the first is scheduled, whatever the
// speed of the machine.
func startGatedServer(t testing.TB, cfg Config) (s *Server, url string, run func()) {
	wordTokens(&cfg)
	t.Helper()
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var once sync.Once
	started := false
	run = func() { once.Do(func() { started = true; go func() { done <- s.Run(ctx) }() }) }
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		ts.Close()
		cancel()
		if started {
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
	})
	return s, ts.URL, run
}

// waitQueued waits until n requests have been handed to the scheduler (a
// gated server's inbox holds them all). The deadline only stops a broken
// test from hanging.
func waitQueued(t testing.TB, s *Server, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	testenv.Eventually(ctx, t, time.Millisecond, fmt.Sprintf("%d requests queued", n), func() (bool, string) {
		s.inMu.Lock()
		got := len(s.inbox)
		s.inMu.Unlock()
		if got > n {
			t.Fatalf("%d requests queued, want %d", got, n)
		}
		return got == n, fmt.Sprintf("%d queued", got)
	})
}

func post(t testing.TB, url, body string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, b
}

// lastSim extracts the gpulens_sim object from the final chunk of a stream.
func lastSim(t testing.TB, body []byte) SimInfo {
	t.Helper()
	events := sseEvents(t, body)
	for i := len(events) - 1; i >= 0; i-- {
		var c struct {
			Sim *SimInfo `json:"gpulens_sim"`
		}
		if events[i] == "[DONE]" {
			continue
		}
		if err := json.Unmarshal([]byte(events[i]), &c); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if c.Sim != nil {
			return *c.Sim
		}
	}
	t.Fatalf("no gpulens_sim in stream:\n%s", body)
	return SimInfo{}
}

// sseEvents splits a body of "data: X\n\n" events, failing on any other
// framing.
func sseEvents(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	rest := string(body)
	for rest != "" {
		ev, after, ok := strings.Cut(rest, "\n\n")
		if !ok || !strings.HasPrefix(ev, "data: ") || strings.Contains(ev, "\n") {
			t.Fatalf("bad SSE framing at %q", rest)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
		rest = after
	}
	return out
}

func ints(v []int64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.FormatInt(x, 10)
	}
	return "[" + strings.Join(s, ",") + "]"
}

func TestStreamFramingExact(t *testing.T) {
	// Parallel: its checks on time are causal (lower bounds), which load
	// cannot break.
	t.Parallel()
	cfg := Config{Seed: 7, FixedTTFT: 2 * time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 2}
	for _, tc := range []struct {
		name, path, body string
		roleChunk        bool
		want             func(h string, si SimInfo) string
	}{
		{
			name: "chat, role chunk, usage", path: "/v1/chat/completions", roleChunk: true,
			body: `{"model":"gpulens-sim","messages":[{"role":"user","content":"one two three"}],"max_tokens":4,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
			want: func(h string, si SimInfo) string {
				return h + `{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
					h + `{"index":0,"delta":{"content":"client"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
					h + `{"index":0,"delta":{"content":" jumps away"},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
					h + `{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":"length"}]}` + "\n\n" +
					h + `],"usage":{"prompt_tokens":3,"total_tokens":7,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},"gpulens_sim":{"request_seq":0,"arrival_unix_nano":` +
					strconv.FormatInt(si.ArrivalUnixNano, 10) + `,"first_token_unix_nano":` + strconv.FormatInt(si.FirstTokenUnixNano, 10) +
					`,"token_unix_nanos":` + ints(si.TokenUnixNanos) + `,"chunk_unix_nanos":` + ints(si.ChunkUnixNanos) + "}}\n\n" +
					"data: [DONE]\n\n"
			},
		},
		{
			name: "chat, role in first content chunk, continuous usage, no usage chunk", path: "/v1/chat/completions",
			body: `{"model":"gpulens-sim","messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"hi there you"}]}],"max_completion_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"continuous_usage_stats":true}}`,
			want: func(h string, si SimInfo) string {
				return h + `{"index":0,"delta":{"role":"assistant","content":"client"},"logprobs":null,"finish_reason":null}],"usage":{"prompt_tokens":5,"total_tokens":6,"completion_tokens":1}}` + "\n\n" +
					h + `{"index":0,"delta":{"content":" jumps away"},"logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}},"gpulens_sim":{"request_seq":0,"arrival_unix_nano":` +
					strconv.FormatInt(si.ArrivalUnixNano, 10) + `,"first_token_unix_nano":` + strconv.FormatInt(si.FirstTokenUnixNano, 10) +
					`,"token_unix_nanos":` + ints(si.TokenUnixNanos) + `,"chunk_unix_nanos":` + ints(si.ChunkUnixNanos) + "}}\n\n" +
					"data: [DONE]\n\n"
			},
		},
		{
			name: "completions", path: "/v1/completions",
			body: `{"model":"gpulens-sim","prompt":"a b c d e","max_tokens":3,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`,
			want: func(h string, si SimInfo) string {
				return h + `{"index":0,"text":"client","logprobs":null,"finish_reason":null,"stop_reason":null}]}` + "\n\n" +
					h + `{"index":0,"text":" jumps away","logprobs":null,"finish_reason":"length","stop_reason":null}]}` + "\n\n" +
					h + `],"usage":{"prompt_tokens":5,"total_tokens":8,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0}},"gpulens_sim":{"request_seq":0,"arrival_unix_nano":` +
					strconv.FormatInt(si.ArrivalUnixNano, 10) + `,"first_token_unix_nano":` + strconv.FormatInt(si.FirstTokenUnixNano, 10) +
					`,"token_unix_nanos":` + ints(si.TokenUnixNanos) + `,"chunk_unix_nanos":` + ints(si.ChunkUnixNanos) + "}}\n\n" +
					"data: [DONE]\n\n"
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			c.RoleChunk = tc.roleChunk
			_, url := startServer(t, c)
			before := time.Now().UnixNano()
			resp, body := post(t, url+tc.path, tc.body)
			after := time.Now().UnixNano()
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream; charset=utf-8" {
				t.Errorf("Content-Type = %q", ct)
			}
			arrival, err := strconv.ParseInt(resp.Header.Get("X-Sim-Arrival"), 10, 64)
			if err != nil {
				t.Fatalf("X-Sim-Arrival: %v", err)
			}
			si := lastSim(t, body)
			if si.ArrivalUnixNano != arrival {
				t.Errorf("arrival_unix_nano %d != X-Sim-Arrival %d", si.ArrivalUnixNano, arrival)
			}
			id, object := "chatcmpl-sim-0", "chat.completion.chunk"
			if !strings.Contains(tc.path, "chat") {
				id, object = "cmpl-sim-0", "text_completion"
			}
			h := fmt.Sprintf(`data: {"id":%q,"object":%q,"created":%d,"model":"gpulens-sim","choices":[`, id, object, arrival/1e9)
			if want := tc.want(h, si); string(body) != want {
				t.Errorf("body mismatch\n got: %s\nwant: %s", body, want)
			}
			// The timestamps are real, without timing assumptions about
			// the machine: the request arrived after the client sent it;
			// token i is never before its schedule, arrival + TTFT 2 ms +
			// i × 1 ms; each chunk was written after the last token it
			// carries (chunk j ≥ 1 holds tokens 2j−1 and 2j) and before the
			// client had read the whole stream.
			if arrival < before {
				t.Errorf("arrival %d before the client sent the request at %d", arrival, before)
			}
			if si.TokenUnixNanos[0] != si.FirstTokenUnixNano {
				t.Errorf("first_token_unix_nano %d != token_unix_nanos[0] %d", si.FirstTokenUnixNano, si.TokenUnixNanos[0])
			}
			for i, tok := range si.TokenUnixNanos {
				if due := 2*time.Millisecond + time.Duration(i)*time.Millisecond; time.Duration(tok-arrival) < due {
					t.Errorf("token %d at %v after arrival, before its schedule %v", i, time.Duration(tok-arrival), due)
				}
				if i > 0 && tok < si.TokenUnixNanos[i-1] {
					t.Errorf("token times not monotonic: %v", si.TokenUnixNanos)
				}
			}
			if want := 1 + len(si.TokenUnixNanos)/2; len(si.ChunkUnixNanos) != want {
				t.Fatalf("%d chunk times for %d tokens, want %d", len(si.ChunkUnixNanos), len(si.TokenUnixNanos), want)
			}
			for j, w := range si.ChunkUnixNanos {
				lastTok := min(2*j, len(si.TokenUnixNanos)-1)
				if w < si.TokenUnixNanos[lastTok] || (j > 0 && w < si.ChunkUnixNanos[j-1]) || w > after {
					t.Errorf("chunk %d written at %d: before its last token %d, the previous chunk, or after the client's read ended %d",
						j, w, si.TokenUnixNanos[lastTok], after)
				}
			}
		})
	}
}

type dto = dto_.MetricFamily

// wordTokens makes the tests that assert round prompt counts (one token
// per word, no template) use TokenizerWords unless they name a tokenizer;
// tokenizer_test.go tests the default.
func wordTokens(cfg *Config) {
	if cfg.Tokenizer == "" {
		cfg.Tokenizer = TokenizerWords
	}
}
