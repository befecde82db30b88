package simserver

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

func chatBody(extra string) string {
	return `{"model":"gpulens-sim","messages":[{"role":"user","content":"count these five words"}]` + extra + `}`
}

func TestNonStreaming(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 3, FixedTTFT: time.Millisecond, FixedITL: 100 * time.Microsecond, OutputTokensMean: 1000})
	for _, tc := range []struct {
		name, path, body string
		tokens           int
		finish, text     string
	}{
		{"chat max_tokens", "/v1/chat/completions", chatBody(`,"max_tokens":5`), 5, "length", "client jumps away word dog"},
		{"chat max_completion_tokens", "/v1/chat/completions", chatBody(`,"max_completion_tokens":2,"stream":false`), 2, "length", "latency sentence"},
		{"completions token-id prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":[1,2,3,4],"max_tokens":3}`, 3, "length", "in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, url+tc.path, tc.body)
			if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
			}
			var got struct {
				ID, Object, Model string
				Choices           []struct {
					Message      struct{ Role, Content string }
					Text         string
					FinishReason string `json:"finish_reason"`
				}
				Usage usageJSON
				Sim   SimInfo `json:"gpulens_sim"`
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			wantPrompt := 4
			text := got.Choices[0].Text
			if strings.Contains(tc.path, "chat") {
				if got.Object != "chat.completion" || got.Choices[0].Message.Role != "assistant" {
					t.Errorf("object %q role %q", got.Object, got.Choices[0].Message.Role)
				}
				text = got.Choices[0].Message.Content
			} else if got.Object != "text_completion" {
				t.Errorf("object %q", got.Object)
			}
			if got.Usage.PromptTokensDetails == nil || got.Usage.PromptTokensDetails.CachedTokens != 0 {
				t.Errorf("usage %+v: want prompt_tokens_details.cached_tokens 0", got.Usage)
			}
			got.Usage.PromptTokensDetails = nil
			if got.Usage != (usageJSON{PromptTokens: wantPrompt, CompletionTokens: tc.tokens, TotalTokens: wantPrompt + tc.tokens}) {
				t.Errorf("usage %+v, want prompt %d completion %d", got.Usage, wantPrompt, tc.tokens)
			}
			if n := len(strings.Fields(text)); n != tc.tokens {
				t.Errorf("text %q has %d words, want %d", text, n, tc.tokens)
			}
			if got.Choices[0].FinishReason != tc.finish {
				t.Errorf("finish_reason %q, want %q", got.Choices[0].FinishReason, tc.finish)
			}
			if len(got.Sim.TokenUnixNanos) != tc.tokens || got.Sim.FirstTokenUnixNano-got.Sim.ArrivalUnixNano < int64(time.Millisecond) {
				t.Errorf("gpulens_sim %+v", got.Sim)
			}
			if got.Model != "gpulens-sim" {
				t.Errorf("model %q", got.Model)
			}
		})
	}
}

// TestOutputLengths checks seeded lengths without ignore_eos, the
// max_tokens cap, ignore_eos and the server's cap.
func TestOutputLengths(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 11, FixedTTFT: time.Microsecond, OutputTokensMean: 20, MaxOutputTokens: 64})
	lengths := func(extra string, n int) ([]int, []string) {
		var ls []int
		var reasons []string
		for range n {
			resp, body := post(t, url+"/v1/completions", `{"model":"gpulens-sim","prompt":"x"`+extra+`}`)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			var got struct {
				Choices []struct {
					FinishReason string `json:"finish_reason"`
				}
				Usage usageJSON
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			ls = append(ls, got.Usage.CompletionTokens)
			reasons = append(reasons, got.Choices[0].FinishReason)
		}
		return ls, reasons
	}
	free, freeReasons := lengths("", 40)
	sum := 0
	for i, n := range free {
		sum += n
		if want := map[bool]string{true: "length", false: "stop"}[n == 64]; freeReasons[i] != want {
			t.Errorf("length %d: finish_reason %q, want %q", n, freeReasons[i], want)
		}
	}
	if mean := float64(sum) / 40; mean < 10 || mean > 30 || slices.Min(free) == slices.Max(free) {
		t.Errorf("free lengths %v: mean %.1f, want varied around 20", free, mean)
	}
	capped, _ := lengths(`,"max_tokens":3`, 10)
	for _, n := range capped {
		if n < 1 || n > 3 {
			t.Errorf("max_tokens 3 gave %d tokens", n)
		}
	}
	if eos, r := lengths(`,"max_tokens":37,"ignore_eos":true`, 3); !slices.Equal(eos, []int{37, 37, 37}) || r[0] != "length" {
		t.Errorf("ignore_eos lengths %v %v, want 37 each, length", eos, r)
	}
	if eos, _ := lengths(`,"ignore_eos":true`, 2); !slices.Equal(eos, []int{64, 64}) {
		t.Errorf("ignore_eos without max_tokens: %v, want the server cap 64", eos)
	}
}

// TestDeterministic sends the same request sequence to two servers with the
// same seed and one with another seed.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	run := func(seed uint64) []string {
		_, url := startServer(t, Config{Seed: seed, FixedTTFT: time.Microsecond, OutputTokensMean: 30, ErrorRate: 0.2})
		var out []string
		for i := range 15 {
			resp, body := post(t, url+"/v1/chat/completions", chatBody(fmt.Sprintf(`,"max_tokens":%d`, 10+i*5)))
			if resp.StatusCode != 200 {
				out = append(out, strconv.Itoa(resp.StatusCode))
				continue
			}
			var got struct {
				Choices []struct{ Message struct{ Content string } }
			}
			if err := json.Unmarshal(body, &got); err != nil {
				t.Fatal(err)
			}
			out = append(out, got.Choices[0].Message.Content)
		}
		return out
	}
	a, b, c := run(5), run(5), run(6)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different responses:\n%q\n%q", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 5 and 6 gave identical responses %q", a)
	}
	if !slices.Contains(a, "500") {
		t.Errorf("error rate 0.2 gave no 500 in 15 requests: %q", a)
	}
}

// streamTimes streams one request and returns when the client sent it, the
// client-side arrival times of each content token (a chunk of k tokens
// counts k times) and the server's timestamps from the final chunk (nil if
// the stream ended without them).
func streamTimes(t testing.TB, url, body string) (time.Time, []time.Time, *SimInfo, error) {
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return start, nil, nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		return start, nil, nil, fmt.Errorf("status %d: %s", resp.StatusCode, b)
	}
	var times []time.Time
	var sim *SimInfo
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		now := time.Now()
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			if data == "[DONE]" {
				return start, times, sim, nil
			}
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string }
				Text  string
			}
			Sim *SimInfo `json:"gpulens_sim"`
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return start, times, sim, err
		}
		if c.Sim != nil {
			sim = c.Sim
		}
		for _, ch := range c.Choices {
			for range strings.Fields(ch.Delta.Content + ch.Text) {
				times = append(times, now)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return start, times, sim, err
	}
	return start, times, sim, io.ErrUnexpectedEOF
}

// TestBatchingITL runs 4 streams through the batching model: every decode
// step of the 4 lasts 6 + 1×4 = 10 ms. The scheduler starts once all four
// are queued, so they run in one batch from the first step to the last,
// whatever the speed of the machine. The server's own timestamps show it:
// the four streams get their tokens at the same instants, and token k
// comes no earlier than (k+1) steps of 10 ms after the requests arrived
// (the engine never runs ahead of its model; a batch of 3 would allow
// 9 ms). The schedule itself is checked to the nanosecond, on an injected
// clock, by TestEngineSchedules.
func TestBatchingITL(t *testing.T) {
	// Serial: it checks inter-token latencies measured on the wall clock.
	const streams, tokens = 4, 40
	const step = 6*time.Millisecond + streams*time.Millisecond
	s, url, run := startGatedServer(t, Config{Seed: 1, DecodeBase: 6 * time.Millisecond, DecodePerSeq: time.Millisecond, TokensPerChunk: 1})
	bodies := make([][]byte, streams)
	errs := make([]error, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			resp, err := http.Post(url+"/v1/chat/completions", "application/json",
				strings.NewReader(chatBody(fmt.Sprintf(`,"max_tokens":%d,"ignore_eos":true,"stream":true`, tokens))))
			if err != nil {
				errs[i] = err
				return
			}
			defer resp.Body.Close()
			bodies[i], errs[i] = io.ReadAll(resp.Body)
			if errs[i] == nil && resp.StatusCode != 200 {
				errs[i] = fmt.Errorf("status %d: %s", resp.StatusCode, bodies[i])
			}
		})
	}
	waitQueued(t, s, streams)
	run()
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var sims []SimInfo
	var lastArrival int64
	for _, b := range bodies {
		si := lastSim(t, b)
		if len(si.TokenUnixNanos) != tokens {
			t.Fatalf("got %d tokens, want %d", len(si.TokenUnixNanos), tokens)
		}
		sims = append(sims, si)
		lastArrival = max(lastArrival, si.ArrivalUnixNano)
	}
	for i, si := range sims[1:] {
		if !slices.Equal(si.TokenUnixNanos, sims[0].TokenUnixNanos) {
			t.Errorf("stream %d's token times differ from stream 0's: not one batch\n%v\n%v", i+1, si.TokenUnixNanos, sims[0].TokenUnixNanos)
		}
	}
	for k, tok := range sims[0].TokenUnixNanos {
		if due := time.Duration(k+1) * step; time.Duration(tok-lastArrival) < due {
			t.Fatalf("token %d came %v after the last arrival, before %d steps of %v", k, time.Duration(tok-lastArrival), k+1, step)
		}
	}
}

// TestFixedModeTokenChunks checks TTFT and token-level ITL in fixed mode
// with 3 tokens per chunk: chunks 15 ms apart carry 3 tokens each.
func TestFixedModeTokenChunks(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Seed: 1, FixedTTFT: 30 * time.Millisecond, FixedITL: 5 * time.Millisecond, TokensPerChunk: 3, RoleChunk: true})
	start, times, si, err := streamTimes(t, url+"/v1/completions", `{"model":"gpulens-sim","prompt":"hi","max_tokens":31,"ignore_eos":true,"stream":true}`)
	if err != nil {
		t.Fatal(err)
	}
	if len(times) != 31 || si == nil || len(si.TokenUnixNanos) != 31 || len(si.ChunkUnixNanos) != 11 {
		t.Fatalf("got %d tokens, server timestamps %+v; want 31 tokens in 11 chunks", len(times), si)
	}
	// Tokens 1..30 come in 10 chunks of 3 (exact, not timing).
	for c := 1; c <= 10; c++ {
		a := 3*c - 2
		if !times[a].Equal(times[a+1]) || !times[a+1].Equal(times[a+2]) {
			t.Fatalf("tokens %d-%d not in one chunk", a, a+2)
		}
	}
	// Causal bounds, true on any machine: the request arrived after the
	// client sent it; no token is produced before its schedule (arrival +
	// 30 ms + 5 ms per token); a chunk is written after the last token it
	// carries, and the client reads it after it was written.
	if si.ArrivalUnixNano < start.UnixNano() {
		t.Errorf("arrival %d before the client sent the request at %d", si.ArrivalUnixNano, start.UnixNano())
	}
	for i, tok := range si.TokenUnixNanos {
		if due := 30*time.Millisecond + time.Duration(i)*5*time.Millisecond; time.Duration(tok-si.ArrivalUnixNano) < due {
			t.Fatalf("token %d produced %v after the arrival, before its schedule %v", i, time.Duration(tok-si.ArrivalUnixNano), due)
		}
		chunk := (i + 2) / 3 // chunk 0: token 0; chunk c ≥ 1: tokens 3c−2 … 3c
		if w := si.ChunkUnixNanos[chunk]; w < tok {
			t.Errorf("token %d produced at %d, after its chunk %d was written at %d", i, tok, chunk, w)
		} else if seen := times[i].UnixNano(); seen < w {
			t.Errorf("token %d seen by the client at %d, before its chunk was written at %d", i, seen, w)
		}
	}
	for i, tm := range times {
		if due := 30*time.Millisecond + time.Duration(i)*5*time.Millisecond; tm.Sub(start) < due {
			t.Fatalf("token %d came %v after the request, before its schedule %v", i, tm.Sub(start), due)
		}
	}
}

// TestQueueFull fills a one-slot batch and a one-slot queue; the third
// request gets 429 and the queued one waits until the first leaves the
// batch. The first asks for a billion tokens, so that it holds its slot
// until the test lets it go, however slowly the others are sent.
func TestQueueFull(t *testing.T) {
	// Parallel: its checks on time are causal (lower bounds), which load
	// cannot break.
	t.Parallel()
	_, url := startServer(t, Config{Seed: 1, FixedTTFT: 10 * time.Millisecond, FixedITL: 10 * time.Millisecond, MaxBatch: 1, MaxQueue: 1})
	open := func(ctx context.Context, maxTokens int) (*http.Response, *bufio.Reader) {
		req, err := http.NewRequestWithContext(ctx, "POST", url+"/v1/chat/completions",
			strings.NewReader(chatBody(fmt.Sprintf(`,"max_tokens":%d,"ignore_eos":true,"stream":true`, maxTokens))))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp, bufio.NewReader(resp.Body)
	}
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	first, r1 := open(ctx, 1_000_000_000)
	if first.StatusCode != 200 {
		t.Fatalf("first: status %d", first.StatusCode)
	}
	// Reading the first content chunk proves the first request was admitted.
	for {
		line, err := r1.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(line, `"content":"`) && !strings.Contains(line, `"content":""`) {
			break
		}
	}
	second, r2 := open(context.Background(), 10)
	if second.StatusCode != 200 {
		t.Fatalf("second: status %d", second.StatusCode)
	}
	third, r3 := open(context.Background(), 10)
	b, _ := io.ReadAll(r3)
	if third.StatusCode != http.StatusTooManyRequests || !strings.Contains(string(b), `"type":"rate_limit_error"`) {
		t.Errorf("third: status %d body %s, want 429 rate_limit_error", third.StatusCode, b)
	}
	left := time.Now().UnixNano()
	leave()
	first.Body.Close()
	b2, err := io.ReadAll(r2)
	if err != nil {
		t.Fatal(err)
	}
	// Server-side times, causal on any machine: the queued request arrived
	// before the first left, was admitted only after it left, and its first
	// token came TTFT = 10 ms after its admission.
	secondSim := lastSim(t, b2)
	if len(secondSim.TokenUnixNanos) != 10 {
		t.Errorf("second: %d tokens, want 10", len(secondSim.TokenUnixNanos))
	}
	if secondSim.ArrivalUnixNano >= left {
		t.Errorf("second request arrived after the first left: it was never queued")
	}
	if wait := time.Duration(secondSim.FirstTokenUnixNano - left); wait < 10*time.Millisecond {
		t.Errorf("queued request's first token came %v after the first request left; want ≥ TTFT 10ms", wait)
	}
	if got := counterValue(t, scrape(t, url), "gpulens_sim_faults_injected_total", "fault", "queue_full"); got != 1 {
		t.Errorf("queue_full faults = %v, want 1", got)
	}
}

func scrape(t testing.TB, url string) map[string]*dto {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mfs
}

func counterValue(t testing.TB, mfs map[string]*dto, name, label, value string) float64 {
	t.Helper()
	mf, ok := mfs[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	for _, m := range mf.GetMetric() {
		match := label == ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == label && lp.GetValue() == value {
				match = true
			}
		}
		if match {
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("metric %s{%s=%q} missing", name, label, value)
	return 0
}

func TestFaults(t *testing.T) {
	t.Parallel()
	t.Run("error rate", func(t *testing.T) {
		_, url := startServer(t, Config{FixedTTFT: time.Millisecond, ErrorRate: 1})
		resp, body := post(t, url+"/v1/chat/completions", chatBody(`,"stream":true`))
		if resp.StatusCode != 500 || !strings.Contains(string(body), `"message":"simulated internal error (the configured error rate)"`) {
			t.Errorf("status %d body %s", resp.StatusCode, body)
		}
		if got := counterValue(t, scrape(t, url), "gpulens_sim_faults_injected_total", "fault", "error"); got != 1 {
			t.Errorf("error faults %v, want 1", got)
		}
	})
	t.Run("disconnect", func(t *testing.T) {
		_, url := startServer(t, Config{Seed: 2, FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, DisconnectRate: 1})
		for range 5 {
			_, times, _, err := streamTimes(t, url+"/v1/chat/completions", chatBody(`,"max_tokens":20,"ignore_eos":true,"stream":true`))
			if !errors.Is(err, io.ErrUnexpectedEOF) || len(times) >= 20 {
				t.Errorf("after %d tokens: err %v, want unexpected EOF before 20 tokens", len(times), err)
			}
		}
		// Non-streaming: the connection is cut before any response.
		_, err := http.Post(url+"/v1/completions", "application/json", strings.NewReader(`{"model":"gpulens-sim","prompt":"x","max_tokens":5}`))
		if err == nil || !strings.Contains(err.Error(), "EOF") {
			t.Errorf("non-streaming disconnect: err %v, want EOF", err)
		}
		if got := counterValue(t, scrape(t, url), "gpulens_sim_faults_injected_total", "fault", "disconnect"); got != 6 {
			t.Errorf("disconnect faults %v, want 6", got)
		}
	})
	t.Run("stall", func(t *testing.T) {
		_, url := startServer(t, Config{Seed: 2, FixedTTFT: 2 * time.Millisecond, FixedITL: 2 * time.Millisecond, StallRate: 1, StallDuration: 150 * time.Millisecond})
		start, times, si, err := streamTimes(t, url+"/v1/chat/completions", chatBody(`,"max_tokens":10,"ignore_eos":true,"stream":true`))
		if err != nil {
			t.Fatal(err)
		}
		if len(times) != 10 || si == nil || len(si.TokenUnixNanos) != 10 {
			t.Fatalf("got %d tokens, server timestamps %+v; want 10", len(times), si)
		}
		// Server-side, causal on any machine: the stall delays the token
		// it precedes by 150 ms after the one before it (or after TTFT);
		// the whole schedule is TTFT 2 + 9 gaps × 2 + stall 150 = 170 ms,
		// and the client sees the last token after it was produced.
		biggest := time.Duration(si.TokenUnixNanos[0] - si.ArrivalUnixNano)
		for i := 1; i < len(si.TokenUnixNanos); i++ {
			biggest = max(biggest, time.Duration(si.TokenUnixNanos[i]-si.TokenUnixNanos[i-1]))
		}
		e2e := time.Duration(si.TokenUnixNanos[9] - si.ArrivalUnixNano)
		if biggest < 150*time.Millisecond || e2e < 170*time.Millisecond {
			t.Errorf("server: largest gap %v, E2E %v; want one stall of 150 ms in a 170 ms schedule", biggest, e2e)
		}
		if seen := times[9].UnixNano(); si.ArrivalUnixNano < start.UnixNano() || seen < si.TokenUnixNanos[9] {
			t.Errorf("client sent at %d, saw the last token at %d; server arrival %d, last token %d", start.UnixNano(), seen, si.ArrivalUnixNano, si.TokenUnixNanos[9])
		}
	})
}

func TestRequestErrors(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{FixedTTFT: time.Millisecond, KVCapacityTokens: 100})
	for _, tc := range []struct {
		name, path, body string
		status           int
		want             string
	}{
		{"unknown model", "/v1/chat/completions", `{"model":"gpt-9","messages":[{"role":"user","content":"x"}]}`, 404, `{"error":{"message":"The model ` + "`gpt-9`" + ` does not exist.","type":"invalid_request_error","param":null,"code":"model_not_found"}}`},
		{"bad json", "/v1/completions", `{"model":`, 400, `"type":"invalid_request_error"`},
		{"no messages", "/v1/chat/completions", `{"model":"gpulens-sim"}`, 400, `messages: must contain at least one message`},
		{"no prompt", "/v1/completions", `{"model":"gpulens-sim"}`, 400, `prompt: required`},
		{"zero max_tokens", "/v1/completions", `{"model":"gpulens-sim","prompt":"x","max_tokens":0}`, 400, `max_tokens must be at least 1, got 0`},
		{"context too long", "/v1/completions", `{"model":"gpulens-sim","prompt":"x","max_tokens":100,"ignore_eos":true}`, 400, `maximum context length is 100 tokens. However, you requested 101 tokens (1 in the messages, 100 in the completion)`},
		// A prompt is a string, strings, token ids or arrays of token ids;
		// anything else is refused with an OpenAI-style error.
		{"object prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":{"text":"x"},"max_tokens":2}`, 400, `{"error":{"message":"prompt: must be a string, an array of strings, an array of token ids or an array of arrays of token ids","type":"invalid_request_error","param":null,"code":null}}`},
		{"number prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":42,"max_tokens":2}`, 400, `prompt: must be a string`},
		{"boolean prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":true,"max_tokens":2}`, 400, `prompt: must be a string`},
		{"null prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":null,"max_tokens":2}`, 400, `prompt: required`},
		{"mixed array prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":["x",{"y":1}],"max_tokens":2}`, 400, `prompt: must be a string`},
		{"object content", "/v1/chat/completions", `{"model":"gpulens-sim","messages":[{"role":"user","content":{"text":"x"}}],"max_tokens":2}`, 400, `messages: content: must be a string or an array of content parts`},
		{"strings prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":["a b","c"],"max_tokens":2}`, 200, `"prompt_tokens":3`},
		{"token ids prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":[1,2,3,4],"max_tokens":2}`, 200, `"prompt_tokens":4`},
		{"token id arrays prompt", "/v1/completions", `{"model":"gpulens-sim","prompt":[[1,2],[3]],"max_tokens":2}`, 200, `"prompt_tokens":3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := post(t, url+tc.path, tc.body)
			if resp.StatusCode != tc.status || !strings.Contains(string(body), tc.want) {
				t.Errorf("status %d body %s; want %d containing %s", resp.StatusCode, body, tc.status, tc.want)
			}
		})
	}
	resp, err := http.Get(url + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET completions: status %d, want 405", resp.StatusCode)
	}
}

func TestModelsHealthMetrics(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{Model: "llama-8b", FixedTTFT: time.Millisecond, FixedITL: time.Millisecond})
	resp, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("/health status %d", resp.StatusCode)
	}
	resp, body := get(t, url+"/v1/models")
	var models struct {
		Object string
		Data   []struct{ ID, Object string }
	}
	if err := json.Unmarshal(body, &models); err != nil || resp.StatusCode != 200 {
		t.Fatalf("/v1/models: %d %v %s", resp.StatusCode, err, body)
	}
	if models.Object != "list" || len(models.Data) != 1 || models.Data[0].ID != "llama-8b" || models.Data[0].Object != "model" {
		t.Errorf("/v1/models = %s", body)
	}
	for range 3 {
		if r, b := post(t, url+"/v1/completions", `{"model":"llama-8b","prompt":"a b","max_tokens":4,"ignore_eos":true,"stream":true}`); r.StatusCode != 200 {
			t.Fatalf("status %d: %s", r.StatusCode, b)
		}
	}
	mfs := scrape(t, url)
	for _, c := range []struct {
		name, label, value string
		want               float64
	}{
		{"vllm:prompt_tokens_total", "model_name", "llama-8b", 6},
		{"vllm:generation_tokens_total", "model_name", "llama-8b", 12},
		{"vllm:request_success_total", "finished_reason", "length", 3},
		{"vllm:request_success_total", "finished_reason", "stop", 0},
		{"vllm:time_to_first_token_seconds", "model_name", "llama-8b", 3},
		{"vllm:inter_token_latency_seconds", "model_name", "llama-8b", 9},
		{"vllm:time_per_output_token_seconds", "model_name", "llama-8b", 9},
		{"vllm:e2e_request_latency_seconds", "model_name", "llama-8b", 3},
		{"vllm:num_requests_running", "model_name", "llama-8b", 0},
		{"vllm:num_requests_waiting", "model_name", "llama-8b", 0},
		{"vllm:gpu_cache_usage_perc", "model_name", "llama-8b", 0},
		{"vllm:kv_cache_usage_perc", "model_name", "llama-8b", 0},
	} {
		if got := counterValue(t, mfs, c.name, c.label, c.value); got != c.want {
			t.Errorf("%s{%s=%q} = %v, want %v", c.name, c.label, c.value, got, c.want)
		}
	}
	var bounds []float64
	for _, b := range mfs["vllm:time_to_first_token_seconds"].GetMetric()[0].GetHistogram().GetBucket() {
		bounds = append(bounds, b.GetUpperBound())
	}
	if !slices.Equal(bounds, append(slices.Clone(ttftBuckets), math.Inf(1))) {
		t.Errorf("TTFT buckets %v, want vLLM's %v", bounds, ttftBuckets)
	}
}

func get(t testing.TB, url string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// TestClientGoneFreesCapacity cancels a stream mid-way; the scheduler
// drops it and the next request runs. With one batch slot and a billion
// tokens to go, the abandoned stream would hold the slot for days: the
// second request can only finish if it was freed.
func TestClientGoneFreesCapacity(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{FixedTTFT: time.Millisecond, FixedITL: 5 * time.Millisecond, MaxBatch: 1})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(`{"model":"gpulens-sim","prompt":"x","max_tokens":1000000000,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	// The deadline only stops a broken test from hanging.
	ctx2, cancel2 := context.WithTimeout(context.Background(), time.Minute)
	defer cancel2()
	req2, _ := http.NewRequestWithContext(ctx2, "POST", url+"/v1/completions", strings.NewReader(`{"model":"gpulens-sim","prompt":"x","max_tokens":2,"ignore_eos":true}`))
	r, err := http.DefaultClient.Do(req2)
	if err != nil {
		t.Fatalf("second request: %v: the abandoned stream kept its batch slot", err)
	}
	defer r.Body.Close()
	if b, err := io.ReadAll(r.Body); err != nil || r.StatusCode != 200 {
		t.Fatalf("second request: status %d, err %v: %s", r.StatusCode, err, b)
	}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// countStreamTokens reads an SSE stream to [DONE] and counts the words of
// its content.
func countStreamTokens(resp *http.Response) (int, error) {
	if resp.StatusCode != 200 {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	n := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			return n, nil
		}
		var c struct {
			Choices []struct {
				Delta struct{ Content string }
				Text  string
			}
		}
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return n, err
		}
		for _, ch := range c.Choices {
			n += len(strings.Fields(ch.Delta.Content + ch.Text))
		}
	}
	if err := sc.Err(); err != nil {
		return n, err
	}
	return n, io.ErrUnexpectedEOF
}

// TestHugeMaxTokens asks for a billion tokens from a server without KV
// limit and leaves after a few: nothing is allocated for the billion.
func TestHugeMaxTokens(t *testing.T) {
	t.Parallel()
	_, url := startServer(t, Config{FixedTTFT: time.Millisecond, FixedITL: time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", url+"/v1/completions", strings.NewReader(`{"model":"gpulens-sim","prompt":"x","max_tokens":1000000000,"ignore_eos":true,"stream":true}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	for range 6 { // three content chunks, each "data: …\n\n"
		if _, err := br.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
}
