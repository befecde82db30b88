package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// streamFixture is one file of testdata/streams: a server's stream as its
// documentation and source describe it, cut into the reads the client
// sees, each at its time after the send, and what the client must measure
// from it.
//
// The file starts with "# " comments and "key: value" lines; then every
// line "@DURATION" starts the bytes of one read, which arrives DURATION
// after the request was sent and runs, verbatim, to the next "@" line.
type streamFixture struct {
	name       string
	endpoint   string
	continuous []bool // client configurations to run it under
	pieces     []piece

	ttft, e2e             time.Duration
	itl                   []time.Duration
	chunkTokens           []int32
	outTokens, promptToks int
	model                 string
	mismatch, estimated   bool
}

type piece struct {
	at   time.Duration
	data []byte
}

func loadFixture(t *testing.T, path string) streamFixture {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fx := streamFixture{name: strings.TrimSuffix(filepath.Base(path), ".txt")}
	dur := func(key, s string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, key, err)
		}
		return d
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	var cur *piece
	for sc.Scan() {
		line := sc.Text()
		if at, ok := strings.CutPrefix(line, "@"); ok {
			fx.pieces = append(fx.pieces, piece{at: dur("@", at)})
			cur = &fx.pieces[len(fx.pieces)-1]
			continue
		}
		if cur != nil {
			cur.data = append(append(cur.data, line...), '\n')
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, val, ok := strings.Cut(line, ": ")
		if !ok {
			t.Fatalf("%s: header line %q is not key: value", path, line)
		}
		switch key {
		case "endpoint":
			fx.endpoint = val
		case "continuous-usage":
			for _, f := range strings.Fields(val) {
				v, err := strconv.ParseBool(f)
				if err != nil {
					t.Fatalf("%s: %s: %v", path, key, err)
				}
				fx.continuous = append(fx.continuous, v)
			}
		case "want-ttft":
			fx.ttft = dur(key, val)
		case "want-e2e":
			fx.e2e = dur(key, val)
		case "want-itl":
			for _, f := range strings.Fields(val) {
				fx.itl = append(fx.itl, dur(key, f))
			}
		case "want-chunk-tokens":
			for _, f := range strings.Fields(val) {
				n, err := strconv.Atoi(f)
				if err != nil {
					t.Fatalf("%s: %s: %v", path, key, err)
				}
				fx.chunkTokens = append(fx.chunkTokens, int32(n))
			}
		case "want-output-tokens":
			fx.outTokens, err = strconv.Atoi(val)
		case "want-prompt-tokens":
			fx.promptToks, err = strconv.Atoi(val)
		case "want-model":
			fx.model = val
		case "want-usage-mismatch":
			fx.mismatch, err = strconv.ParseBool(val)
		case "want-tokens-estimated":
			fx.estimated, err = strconv.ParseBool(val)
		default:
			t.Fatalf("%s: unknown header key %q", path, key)
		}
		if err != nil {
			t.Fatalf("%s: %s: %v", path, key, err)
		}
	}
	if len(fx.pieces) == 0 || len(fx.continuous) == 0 || fx.endpoint == "" {
		t.Fatalf("%s: needs endpoint, continuous-usage and at least one @ read", path)
	}
	return fx
}

// fakeClock is the client's clock: the scripted body sets it to each
// read's arrival time.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// scriptedBody returns one piece per Read, moving the clock to its time.
// With a hang, it then blocks until the request's context ends (a server
// that stops sending), closing hung when it starts to wait, and returns
// the context's error at hang.at on the clock.
type scriptedBody struct {
	clk    *fakeClock
	start  time.Time
	pieces []piece
	hang   *hang
	ctx    context.Context
}

type hang struct {
	at   time.Duration
	hung chan struct{}
}

func (b *scriptedBody) Read(p []byte) (int, error) {
	if len(b.pieces) == 0 {
		if b.hang == nil {
			return 0, io.EOF
		}
		close(b.hang.hung)
		<-b.ctx.Done()
		b.clk.set(b.start.Add(b.hang.at))
		return 0, b.ctx.Err()
	}
	pc := &b.pieces[0]
	b.clk.set(b.start.Add(pc.at))
	n := copy(p, pc.data)
	pc.data = pc.data[n:]
	if len(pc.data) == 0 {
		b.pieces = b.pieces[1:]
	}
	return n, nil
}

func (b *scriptedBody) Close() error { return nil }

// scriptedTransport answers every request with the fixture's stream.
type scriptedTransport struct {
	clk    *fakeClock
	start  time.Time
	pieces []piece
	hang   *hang
	body   []byte // the last request's body
}

func (s *scriptedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	s.body, _ = io.ReadAll(r.Body)
	pieces := make([]piece, len(s.pieces))
	for i, p := range s.pieces {
		pieces[i] = piece{at: p.at, data: bytes.Clone(p.data)}
	}
	return &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header:  http.Header{"Content-Type": {"text/event-stream; charset=utf-8"}},
		Body:    &scriptedBody{clk: s.clk, start: s.start, pieces: pieces, hang: s.hang, ctx: r.Context()},
		Request: r}, nil
}

// TestServerStreamFixtures replays every server's documented stream with
// an injected clock and checks the TTFT, inter-token latencies, E2E and
// token counts the client derives from it, exactly.
func TestServerStreamFixtures(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("testdata", "streams", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Every server the README names has at least one fixture.
	for _, server := range []string{"vllm", "tgi", "sglang", "llamacpp", "ollama", "openai"} {
		found := false
		for _, p := range paths {
			found = found || strings.HasPrefix(filepath.Base(p), server+"-")
		}
		if !found {
			t.Errorf("no stream fixture for %s in testdata/streams", server)
		}
	}
	for _, path := range paths {
		fx := loadFixture(t, path)
		for _, cont := range fx.continuous {
			t.Run(fmt.Sprintf("%s/continuous-usage=%v", fx.name, cont), func(t *testing.T) {
				start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
				clk := &fakeClock{t: start}
				tr := &scriptedTransport{clk: clk, start: start, pieces: fx.pieces}
				c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: fx.endpoint, Model: "m", Timeout: time.Minute,
					ContinuousUsage: cont, Now: clk.Now, Transport: tr})
				if err != nil {
					t.Fatal(err)
				}
				res := c.Do(context.Background(), Request{Index: 1, Prompt: "p", InputTokens: 1, MaxTokens: 64}, start, start)
				if !res.OK() {
					t.Fatalf("failed: %s: %s", res.ErrorClass, res.Error)
				}
				var req struct {
					StreamOptions map[string]bool `json:"stream_options"`
				}
				if err := json.Unmarshal(tr.body, &req); err != nil || !req.StreamOptions["include_usage"] || req.StreamOptions["continuous_usage_stats"] != cont {
					t.Errorf("request stream_options = %v (%v), want include_usage and continuous_usage_stats=%v", req.StreamOptions, err, cont)
				}
				if got := res.FirstToken - res.Sent; got != fx.ttft {
					t.Errorf("TTFT = %v, want %v", got, fx.ttft)
				}
				if got := res.End - res.Sent; got != fx.e2e {
					t.Errorf("E2E = %v, want %v", got, fx.e2e)
				}
				var itl []float64
				for g := range res.InterTokenLatencies() {
					itl = append(itl, g)
				}
				if len(itl) != len(fx.itl) {
					t.Errorf("ITL = %v s, want %v", itl, fx.itl)
				} else {
					for i, want := range fx.itl {
						if math.Abs(itl[i]-want.Seconds()) > 1e-12 {
							t.Errorf("ITL = %v s, want %v", itl, fx.itl)
							break
						}
					}
				}
				if fmt.Sprint(res.ChunkTokens) != fmt.Sprint(fx.chunkTokens) {
					t.Errorf("chunk tokens = %v, want %v", res.ChunkTokens, fx.chunkTokens)
				}
				if res.OutputTokens != fx.outTokens || res.PromptTokens != fx.promptToks {
					t.Errorf("tokens out %d in %d, want %d and %d", res.OutputTokens, res.PromptTokens, fx.outTokens, fx.promptToks)
				}
				if res.UsageMismatch != fx.mismatch || res.TokensEstimated != fx.estimated {
					t.Errorf("usage mismatch %v, tokens estimated %v, want %v and %v", res.UsageMismatch, res.TokensEstimated, fx.mismatch, fx.estimated)
				}
				if res.Model != fx.model {
					t.Errorf("model = %q, want %q", res.Model, fx.model)
				}
			})
		}
	}
}

func TestTokensPerChunk(t *testing.T) {
	for _, tc := range []struct {
		name                string
		bytes, cum          []int
		final               *Usage
		trust               bool
		want                []int32
		out                 int
		mismatch, estimated bool
	}{
		{name: "growing per-chunk usage asked for", bytes: []int{5, 1, 9}, cum: []int{1, 3, 4}, final: &Usage{PromptTokens: 2, CompletionTokens: 4}, trust: true,
			want: []int32{1, 2, 1}, out: 4},
		{name: "growing per-chunk usage not asked for: final spread by bytes", bytes: []int{5, 1, 9}, cum: []int{1, 3, 4}, final: &Usage{PromptTokens: 2, CompletionTokens: 4},
			want: []int32{1, 1, 2}, out: 4},
		{name: "zeroed per-chunk usage (Ollama) asked for: final spread", bytes: []int{3, 3, 3}, cum: []int{0, 0, 0}, final: &Usage{PromptTokens: 2, CompletionTokens: 3}, trust: true,
			want: []int32{1, 1, 1}, out: 3},
		{name: "per-chunk usage going down: not trusted", bytes: []int{3, 3, 3}, cum: []int{2, 1, 3}, final: &Usage{PromptTokens: 2, CompletionTokens: 3}, trust: true,
			want: []int32{1, 1, 1}, out: 3},
		{name: "per-chunk usage on some chunks only: not trusted", bytes: []int{3, 3, 3}, cum: []int{1, -1, 3}, final: &Usage{PromptTokens: 2, CompletionTokens: 3}, trust: true,
			want: []int32{1, 1, 1}, out: 3},
		{name: "trusted per-chunk usage ending below the final", bytes: []int{3, 3}, cum: []int{1, 2}, final: &Usage{PromptTokens: 2, CompletionTokens: 5}, trust: true,
			want: []int32{1, 1}, out: 5, mismatch: true},
		{name: "trusted per-chunk usage, stream cut (no final)", bytes: []int{3, 3}, cum: []int{2, 3}, trust: true,
			want: []int32{2, 1}, out: 3},
		{name: "no usage: one token per chunk, estimated", bytes: []int{3, 3}, cum: []int{-1, -1},
			want: []int32{1, 1}, out: 2, estimated: true},
		{name: "final below the chunks", bytes: []int{3, 3, 3}, cum: []int{-1, -1, -1}, final: &Usage{PromptTokens: 2, CompletionTokens: 1},
			want: []int32{1, 1, 1}, out: 1, mismatch: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var res report.Record
			got := tokensPerChunk(tc.bytes, tc.cum, tc.final, tc.trust, &res)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || res.OutputTokens != tc.out || res.UsageMismatch != tc.mismatch || res.TokensEstimated != tc.estimated {
				t.Errorf("tokens %v out %d mismatch %v estimated %v, want %v %d %v %v", got, res.OutputTokens, res.UsageMismatch,
					res.TokensEstimated, tc.want, tc.out, tc.mismatch, tc.estimated)
			}
			if tc.final != nil && res.PromptTokens != tc.final.PromptTokens {
				t.Errorf("prompt tokens %d, want %d", res.PromptTokens, tc.final.PromptTokens)
			}
		})
	}
}
