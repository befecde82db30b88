package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// sseServer answers every request with status, content type and the given
// body pieces, flushing after each and sleeping gap between them. A piece
// "<hangup>" closes the connection, "<stall>" waits for the client to go.
func sseServer(t *testing.T, status int, ctype string, gap time.Duration, pieces ...string) (*httptest.Server, chan []byte) {
	t.Helper()
	srv, bodies, _ := sseServerSignals(t, status, ctype, gap, pieces...)
	return srv, bodies
}

// stallingSSEServer is an event-stream sseServer whose stalled channel
// receives when a request reaches its "<stall>" piece.
func stallingSSEServer(t *testing.T, pieces ...string) (*httptest.Server, chan []byte, <-chan struct{}) {
	t.Helper()
	return sseServerSignals(t, 200, "text/event-stream", 0, pieces...)
}

// cancelOnStall returns a context cancelled once the server stalls (the
// request is then in flight, past its first bytes), like a Ctrl-C.
func cancelOnStall(t *testing.T, stalled <-chan struct{}) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		select {
		case <-stalled:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx
}

func sseServerSignals(t *testing.T, status int, ctype string, gap time.Duration, pieces ...string) (*httptest.Server, chan []byte, <-chan struct{}) {
	t.Helper()
	stalled := make(chan struct{}, 16)
	bodies := make(chan []byte, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		select {
		case bodies <- b:
		default:
		}
		w.Header().Set("Content-Type", ctype)
		w.WriteHeader(status)
		for i, p := range pieces {
			if i > 0 && gap > 0 {
				time.Sleep(gap) // not a wait: the gap between pieces is under test
			}
			if p == "<hangup>" {
				hj, _ := w.(http.Hijacker)
				conn, _, _ := hj.Hijack()
				conn.Close()
				return
			}
			if p == "<stall>" {
				select {
				case stalled <- struct{}{}:
				default:
				}
				<-r.Context().Done()
				return
			}
			io.WriteString(w, p)
			w.(http.Flusher).Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv, bodies, stalled
}

func newClient(t *testing.T, url, endpoint string, timeout time.Duration) *Client {
	t.Helper()
	c, err := New(Config{BaseURL: url + "/v1", Endpoint: endpoint, Model: "m", APIKey: "sk-test", Timeout: timeout, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

const (
	roleChunk  = `data: {"model":"served-m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}` + "\n\n"
	helloChunk = `data: {"model":"served-m","choices":[{"index":0,"delta":{"content":"Hello"}}]}` + "\n\n"
	worldChunk = `data: {"model":"served-m","choices":[{"index":0,"delta":{"content":" big world"},"finish_reason":"stop"}]}` + "\n\n"
	usageChunk = `data: {"model":"served-m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4}}` + "\n\n"
	done       = "data: [DONE]\n\n"
)

func TestStreams(t *testing.T) {
	for _, tc := range []struct {
		name       string
		endpoint   string
		status     int
		ctype      string
		pieces     []string
		class      string
		errPart    string
		out, in    int
		chunkToks  []int32
		estimated  bool
		mismatch   bool
		firstToken bool
		continuous bool // the client asks for continuous usage
	}{
		{name: "vllm role chunk and usage chunk", pieces: []string{roleChunk, helloChunk, worldChunk, usageChunk, done},
			out: 4, in: 7, chunkToks: []int32{2, 2}, firstToken: true},
		{name: "crlf and keep-alives split across writes", pieces: []string{": ping\r\n\r\n", strings.ReplaceAll(helloChunk, "\n", "\r\n")[:20], strings.ReplaceAll(helloChunk, "\n", "\r\n")[20:], strings.ReplaceAll(worldChunk+usageChunk+done, "\n", "\r\n")},
			out: 4, in: 7, chunkToks: []int32{2, 2}, firstToken: true},
		{name: "llama.cpp usage in last content chunk, no DONE", pieces: []string{helloChunk,
			`data: {"choices":[{"delta":{"content":" there"},"finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":2}}` + "\n\n"},
			out: 2, in: 2, chunkToks: []int32{1, 1}, firstToken: true},
		{name: "no usage: estimated", pieces: []string{helloChunk, worldChunk, done}, out: 2, chunkToks: []int32{1, 1}, estimated: true, firstToken: true},
		{name: "continuous usage", pieces: []string{
			`data: {"choices":[{"delta":{"content":"a b"}}],"usage":{"prompt_tokens":3,"completion_tokens":2}}` + "\n\n",
			`data: {"choices":[{"delta":{"content":"c d e"}}],"usage":{"prompt_tokens":3,"completion_tokens":5}}` + "\n\n",
			`data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}` + "\n\n", done},
			out: 5, in: 3, chunkToks: []int32{2, 3}, firstToken: true, continuous: true},
		{name: "usage disagrees with content", pieces: []string{helloChunk, worldChunk, `data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":1}}` + "\n\n", done},
			out: 1, in: 1, chunkToks: []int32{1, 1}, mismatch: true, firstToken: true},
		{name: "completions endpoint text", endpoint: EndpointCompletions, pieces: []string{`data: {"choices":[{"text":"x"}]}` + "\n\n", `data: {"choices":[{"text":"y","finish_reason":"length"}]}` + "\n\n", done},
			out: 2, chunkToks: []int32{1, 1}, estimated: true, firstToken: true},
		{name: "error object mid-stream", pieces: []string{helloChunk, `data: {"error":{"message":"overloaded","code":503}}` + "\n\n"}, class: report.ErrHTTP5xx, errPart: "overloaded"},
		{name: "error event", pieces: []string{helloChunk, "event: error\ndata: {\"error\":\"kaput\"}\n\n"}, class: report.ErrStreamBroken, errPart: "kaput"},
		{name: "invalid json", pieces: []string{"data: {not json}\n\n"}, class: report.ErrParse, errPart: "decoding stream chunk"},
		{name: "eof without done", pieces: []string{helloChunk}, class: report.ErrStreamBroken, errPart: "without [DONE]"},
		{name: "hangup mid-stream", pieces: []string{helloChunk, "<hangup>"}, class: report.ErrStreamBroken},
		{name: "429", status: 429, ctype: "application/json", pieces: []string{`{"error":{"message":"queue full"}}`}, class: report.ErrHTTP429, errPart: "HTTP 429: queue full"},
		{name: "404", status: 404, ctype: "application/json", pieces: []string{`{"error":{"message":"no such model"}}`}, class: report.ErrHTTP4xx, errPart: "no such model"},
		{name: "500", status: 500, ctype: "text/plain", pieces: []string{"boom"}, class: report.ErrHTTP5xx, errPart: "HTTP 500: boom"},
		{name: "not an event stream", ctype: "application/json", pieces: []string{`{"choices":[]}`}, class: report.ErrParse, errPart: "text/event-stream"},
		{name: "stall times out", pieces: []string{helloChunk, "<stall>"}, class: report.ErrTimeout, errPart: "no complete answer within the request timeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, ctype, ep := tc.status, tc.ctype, tc.endpoint
			if status == 0 {
				status = 200
			}
			if ctype == "" {
				ctype = "text/event-stream; charset=utf-8"
			}
			if ep == "" {
				ep = EndpointChat
			}
			srv, bodies := sseServer(t, status, ctype, 0, tc.pieces...)
			// --timeout ends only the stalled stream (causally: it never
			// ends); the others get a minute, which only stops a hang.
			timeout := time.Minute
			if tc.class == report.ErrTimeout {
				timeout = 300 * time.Millisecond
			}
			c := newClient(t, srv.URL, ep, timeout)
			if tc.continuous {
				var err error
				if c, err = New(Config{BaseURL: srv.URL + "/v1", Endpoint: ep, Model: "m", APIKey: "sk-test", Timeout: timeout, MaxConns: 4, ContinuousUsage: true}); err != nil {
					t.Fatal(err)
				}
			}
			now := time.Now()
			res := c.Do(context.Background(), Request{Index: 3, Prompt: "hi there", MaxTokens: 16}, now, now)
			if res.ErrorClass != tc.class {
				t.Fatalf("class = %q (%s), want %q", res.ErrorClass, res.Error, tc.class)
			}
			if !strings.Contains(res.Error, tc.errPart) {
				t.Errorf("err = %q, want containing %q", res.Error, tc.errPart)
			}
			if res.Interrupted() || res.Index != 3 || res.Intended != 0 || res.End < res.Sent {
				t.Errorf("bad bookkeeping: %+v", res)
			}
			body := <-bodies
			var req map[string]any
			if err := json.Unmarshal(body, &req); err != nil {
				t.Fatal(err)
			}
			if req["stream"] != true || req["model"] != "m" || req["max_tokens"] != 16.0 {
				t.Errorf("request body = %s", body)
			}
			if so, _ := req["stream_options"].(map[string]any); so["include_usage"] != true {
				t.Errorf("stream_options = %v", req["stream_options"])
			}
			if tc.class != "" {
				return
			}
			if res.OutputTokens != tc.out || res.PromptTokens != tc.in || res.TokensEstimated != tc.estimated || res.UsageMismatch != tc.mismatch {
				t.Errorf("tokens out=%d in=%d est=%v mismatch=%v, want %d %d %v %v", res.OutputTokens, res.PromptTokens, res.TokensEstimated, res.UsageMismatch, tc.out, tc.in, tc.estimated, tc.mismatch)
			}
			if len(res.ChunkTokens) != len(tc.chunkToks) {
				t.Fatalf("chunk tokens = %v, want %v", res.ChunkTokens, tc.chunkToks)
			}
			for i := range tc.chunkToks {
				if res.ChunkTokens[i] != tc.chunkToks[i] {
					t.Fatalf("chunk tokens = %v, want %v", res.ChunkTokens, tc.chunkToks)
				}
			}
			if (res.FirstToken == 0) != !tc.firstToken || res.FirstToken < res.FirstByte {
				t.Errorf("first token %v, first byte %v", res.FirstToken, res.FirstByte)
			}
		})
	}
}

func TestTimingAndAuth(t *testing.T) {
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		io.WriteString(w, roleChunk) // role-only chunk right away: not a token
		f.Flush()
		time.Sleep(40 * time.Millisecond) // not a wait: the time to the first token under test
		io.WriteString(w, helloChunk)
		f.Flush()
		time.Sleep(20 * time.Millisecond) // not a wait: the gap between tokens under test
		io.WriteString(w, worldChunk+usageChunk+done)
		f.Flush()
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, EndpointChat, time.Minute)
	res := c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
	if !res.OK() {
		t.Fatal(res.Error)
	}
	if a, _ := auth.Load().(string); a != "Bearer sk-test" {
		t.Errorf("Authorization = %q", a)
	}
	// Sleeps only overrun: the lower bounds below are causal; above, only
	// structure (the first token is the first content chunk, in order,
	// before the end), whatever the speed of the machine.
	ttft := res.FirstToken - res.Sent
	if ttft < 40*time.Millisecond {
		t.Errorf("TTFT = %v, want ≥ 40ms (role-only chunk must not count)", ttft)
	}
	if len(res.ChunkOffsets) != 2 {
		t.Fatalf("chunk offsets = %v, want 2", res.ChunkOffsets)
	}
	if first := time.Duration(res.ChunkOffsets[0]); first != ttft {
		t.Errorf("first chunk at %v after send, TTFT %v: want the same", first, ttft)
	}
	if second := time.Duration(res.ChunkOffsets[1]); second < 60*time.Millisecond || second < ttft || res.End < res.Sent+second {
		t.Errorf("second chunk at %v after send, TTFT %v, end %v: want ≥ 60ms, after the first, before the end", second, ttft, res.End-res.Sent)
	}
	if res.Model != "served-m" {
		t.Errorf("model = %q", res.Model)
	}
}

func TestConnectAndCancel(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := newClient(t, "http://"+addr, EndpointChat, time.Minute)
	res := c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
	if res.ErrorClass != report.ErrConnect {
		t.Fatalf("class = %q (%s), want connect", res.ErrorClass, res.Error)
	}

	srv, _, stalled := stallingSSEServer(t, helloChunk, "<stall>")
	c = newClient(t, srv.URL, EndpointChat, time.Minute)
	res = c.Do(cancelOnStall(t, stalled), Request{Prompt: "x"}, time.Now(), time.Now())
	if !res.Interrupted() {
		t.Fatalf("cancelled request: class=%q, want %q", res.ErrorClass, report.ErrInterrupted)
	}
}

func TestNewValidation(t *testing.T) {
	for _, cfg := range []Config{
		{BaseURL: "ftp://x/v1", Endpoint: "chat", Timeout: time.Second},
		{BaseURL: "http://x/v1", Endpoint: "embeddings", Timeout: time.Second},
		{BaseURL: "http://x/v1", Endpoint: "chat"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestDistribute(t *testing.T) {
	toks := make([]int32, 3)
	distribute(toks, []int{5, 10, 5}, 8)
	if toks[0] != 2 || toks[1] != 4 || toks[2] != 2 {
		t.Fatalf("distribute = %v, want [2 4 2]", toks)
	}
}

// TestAPIKeyScrubbed: a server that echoes the API key in its errors —
// whole, JSON-escaped in an error object, in a stream, or where the
// 200-character cut of a plain-text body falls inside it — never gets any
// of it into the result's error text.
func TestAPIKeyScrubbed(t *testing.T) {
	const key = "sk-proj-7hQ2vX9mK4pL8sN3dF6gJ1aZ5cB0eR2tY"
	long := strings.Repeat("x", 180) + " key " + key + " rejected"
	for _, tc := range []struct {
		name   string
		status int
		ctype  string
		pieces []string
	}{
		{"401 error object", 401, "application/json", []string{`{"error":{"message":"Incorrect API key provided: ` + key + `. You can find your API key at ...","type":"invalid_request_error","code":"invalid_api_key"}}`}},
		{"403 error string", 403, "application/json", []string{`{"error":"forbidden for ` + key + `"}`}},
		{"plain body cut inside the key", 401, "text/plain", []string{long}},
		{"error object in the stream", 200, "text/event-stream", []string{helloChunk, `data: {"error":{"message":"key ` + key + ` revoked","code":401}}` + "\n\n"}},
		{"error event", 200, "text/event-stream", []string{"event: error\ndata: {\"error\":\"bad key " + key + "\"}\n\n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := sseServer(t, tc.status, tc.ctype, 0, tc.pieces...)
			c, err := New(Config{BaseURL: srv.URL + "/v1", Endpoint: EndpointChat, Model: "m", APIKey: key, Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			res := c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
			if res.OK() || res.Error == "" {
				t.Fatalf("want a failure, got %+v", res)
			}
			// No 8 consecutive characters of the key survive.
			for i := 0; i+8 <= len(key); i++ {
				if strings.Contains(res.Error, key[i:i+8]) {
					t.Fatalf("error text keeps %q of the key: %s", key[i:i+8], res.Error)
				}
			}
			if !strings.Contains(res.Error, "[REDACTED]") {
				t.Errorf("error text %q does not say where the key was", res.Error)
			}
		})
	}
}

// TestGivenUpKeepsWhatArrived: a request that times out or is cancelled
// after some chunks came keeps their times and tokens (one per chunk: the
// server never said), and ends when it was given up, not at its last byte.
func TestGivenUpKeepsWhatArrived(t *testing.T) {
	stream := []piece{
		{at: 10 * time.Millisecond, data: []byte(roleChunk)},
		{at: 100 * time.Millisecond, data: []byte(helloChunk)},
		{at: 130 * time.Millisecond, data: []byte(helloChunk)},
	}
	for _, tc := range []struct {
		name    string
		timeout time.Duration // real: the scripted server never ends the stream
		cancel  bool          // cancel once the server hangs (Ctrl-C, the end of a run)
		class   string
	}{
		{name: "timeout", timeout: 50 * time.Millisecond, class: report.ErrTimeout},
		{name: "cancelled", timeout: time.Minute, cancel: true, class: report.ErrInterrupted},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
			clk := &fakeClock{t: start}
			// Given up 5 s after the send on the request's clock.
			h := &hang{at: 5 * time.Second, hung: make(chan struct{})}
			tr := &scriptedTransport{clk: clk, start: start, pieces: stream, hang: h}
			c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: tc.timeout, Now: clk.Now, Transport: tr})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel {
				go func() {
					<-h.hung
					cancel()
				}()
			}
			res := c.Do(ctx, Request{Prompt: "x"}, start, start)
			if res.ErrorClass != tc.class {
				t.Fatalf("class %q (%s), want %q", res.ErrorClass, res.Error, tc.class)
			}
			if fmt.Sprint(res.ChunkOffsets) != "[100ms 130ms]" || fmt.Sprint(res.ChunkTokens) != "[1 1]" ||
				res.OutputTokens != 2 || !res.TokensEstimated {
				t.Errorf("kept offsets %v tokens %v output %d estimated %v, want [100ms 130ms], [1 1], 2, true",
					res.ChunkOffsets, res.ChunkTokens, res.OutputTokens, res.TokensEstimated)
			}
			if got := res.FirstToken - res.Sent; got != 100*time.Millisecond {
				t.Errorf("first token %v after the send, want 100ms", got)
			}
			if got := res.End - res.Sent; got != h.at {
				t.Errorf("end %v after the send, want %v (when it was given up), not the last byte's 130ms", got, h.at)
			}
		})
	}
}
