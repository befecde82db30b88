package campaign

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// usageServer answers every chat request with one token and a usage whose
// prompt_tokens is count(words of the prompt) (none when count is nil);
// it records the prompts it measured.
type usageServer struct {
	count   func(words int) int
	mu      sync.Mutex
	prompts []string
}

func (s *usageServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" { // no /tokenize
		http.NotFound(w, r)
		return
	}
	var body struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	words := len(strings.Fields(body.Messages[0].Content))
	s.mu.Lock()
	s.prompts = append(s.prompts, body.Messages[0].Content)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
	if s.count != nil {
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":1}}`+"\n\n", s.count(words))
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
}

func TestFitLine(t *testing.T) {
	for _, tc := range []struct {
		probes []report.TokenProbe
		a, b   float64
		err    string
	}{
		{[]report.TokenProbe{{Words: 32, Tokens: 52}, {Words: 128, Tokens: 196}, {Words: 512, Tokens: 772}}, 1.5, 4, ""},
		{[]report.TokenProbe{{Words: 32, Tokens: 42}, {Words: 32, Tokens: 43}, {Words: 128, Tokens: 138}, {Words: 128, Tokens: 139}}, 1, 10.5, ""},
		{[]report.TokenProbe{{Words: 32, Tokens: 4}, {Words: 128, Tokens: 4}}, 0, 0, "do not follow the prompt's length"},
		{[]report.TokenProbe{{Words: 32, Tokens: 40}}, 0, 0, "too few calibration prompts"},
		{[]report.TokenProbe{{Words: 32, Tokens: 40}, {Words: 32, Tokens: 41}}, 0, 0, "too few calibration prompts"},
	} {
		a, b, err := fitLine(tc.probes)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: err %v, want %q", tc.probes, err, tc.err)
			}
			continue
		}
		if err != nil || math.Abs(a-tc.a) > 1e-9 || math.Abs(b-tc.b) > 1e-9 {
			t.Errorf("%v: %v, %v, %v; want %v, %v", tc.probes, a, b, err, tc.a, tc.b)
		}
	}
}

// TestCalibrateFromUsage: a server without /tokenize counting 2 tokens a
// word plus 20 is calibrated from the usage of six short requests, which
// belong to no run; the run's prompts then have (N − 20) / 2 words. A
// server that reports the same usage whatever the prompt, or none, fails
// the calibration: recorded, warned, one word per token.
func TestCalibrateFromUsage(t *testing.T) {
	for _, tc := range []struct {
		name      string
		count     func(int) int
		wantWords int // of a measured prompt of fixed:8 … here fixed:120
		wantErr   string
	}{
		{"2 per word + 20", func(w int) int { return 2*w + 20 }, 50, ""},
		{"constant usage", func(int) int { return 4 }, 120, "do not follow the prompt's length"},
		{"no usage", nil, 120, "the server reports no usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &usageServer{count: tc.count}
			o := options(t, srv)
			o.Calibrate = CalibrateAuto
			o.Workload.Input.A, o.Workload.Input.Min = 120, 1
			res := run(t, Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o, nil)
			cal := res.Document.Metadata.TokenCalibration
			if cal == nil || cal.Method != CalibrateUsage {
				t.Fatalf("calibration %+v", cal)
			}
			if !strings.Contains(cal.Error, tc.wantErr) || (tc.wantErr == "") != (cal.Error == "") {
				t.Errorf("calibration error %q, want %q", cal.Error, tc.wantErr)
			}
			warned := false
			for _, w := range res.Document.Metadata.Warnings {
				warned = warned || strings.Contains(w, "token calibration (usage) failed")
			}
			if warned != (tc.wantErr != "") {
				t.Errorf("warnings %v", res.Document.Metadata.Warnings)
			}
			// The probes (when usage came back: all six) then the 3 measured requests.
			srv.mu.Lock()
			prompts := srv.prompts
			srv.mu.Unlock()
			measured := prompts[len(prompts)-3:]
			for _, p := range measured {
				if n := len(strings.Fields(p)); n != tc.wantWords {
					t.Errorf("measured prompt of %d words, want %d", n, tc.wantWords)
				}
			}
			if s := res.Document.Runs[0].Summary; s.RequestsCompleted != 3 || s.InputTokensRequested == nil || s.InputTokensRequested.P50 != 120 {
				t.Errorf("run: %d completed (the probes are in no run), asked %+v", s.RequestsCompleted, s.InputTokensRequested)
			}
			if tc.wantErr == "" && len(prompts) != 6+3 {
				t.Errorf("%d requests, want 6 probes and 3 measured", len(prompts))
			}
		})
	}
}

// TestCalibrationValidation: an unknown method is refused, named.
func TestCalibrationValidation(t *testing.T) {
	o := options(t, &usageServer{})
	o.Calibrate = "sometimes"
	if _, err := New(Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o); err == nil ||
		!strings.Contains(err.Error(), `Calibrate "sometimes": want auto, tokenize, usage or off`) {
		t.Errorf("err %v", err)
	}
}

// silentServer accepts connections on loopback and never answers: it
// reads what it is sent and holds the connection until the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(done); ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				go func() { _, _ = io.Copy(io.Discard, conn) }()
				<-done
				conn.Close()
			}()
		}
	}()
	return "http://" + ln.Addr().String() + "/v1"
}

// TestCalibrationBoundedBySilentServer: against a server that accepts
// connections and never answers, the calibration ends within its time
// limit (by default the run's own warmup + duration + grace period; the
// request timeout here is ten minutes) instead of waiting on each probe:
// the report says it failed and timed out, naming the tokenize endpoint
// and the completion request that did not answer, and no run starts.
// The bound asserted (a minute) is far above what it takes; before the
// fix the campaign was still waiting then.
func TestCalibrationBoundedBySilentServer(t *testing.T) {
	for _, method := range []string{CalibrateAuto, CalibrateUsage, CalibrateTokenize} {
		t.Run(method, func(t *testing.T) {
			base := silentServer(t)
			o := options(t, &usageServer{})
			o.Client.BaseURL, o.Client.Timeout = base, 10*time.Minute
			o.Calibrate = method
			o.ServerInfo = true // never asked of a server that did not answer
			o.Run = runner.Config{Duration: 200 * time.Millisecond, GracePeriod: 200 * time.Millisecond}
			c, err := New(Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1, 2}, Repeats: 1}, o)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := c.Run(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatal("the campaign ran past a minute: the calibration is not bounded")
			}
			m := res.Document.Metadata
			cal := m.TokenCalibration
			if m.Interrupted || cal == nil || !cal.TimedOut {
				t.Fatalf("interrupted %v, calibration %+v: want a calibration that timed out", m.Interrupted, cal)
			}
			want := []string{"did not answer within the calibration's time limit of 400ms", "no answer"}
			switch method {
			case CalibrateAuto:
				want = append(want, "calibration request 1 of 6: POST "+base+"/chat/completions", "POST "+strings.TrimSuffix(base, "/v1")+"/tokenize")
			case CalibrateUsage:
				want = append(want, "calibration request 1 of 6: POST "+base+"/chat/completions")
			case CalibrateTokenize:
				want = append(want, "POST "+strings.TrimSuffix(base, "/v1")+"/tokenize")
			}
			for _, w := range want {
				if !strings.Contains(cal.Error, w) {
					t.Errorf("calibration error %q does not say %q", cal.Error, w)
				}
			}
			if len(res.Document.Runs) != 0 || res.Completed+res.Failed != 0 {
				t.Errorf("%d runs, %d requests: want none after a calibration nobody answered", len(res.Document.Runs), res.Completed+res.Failed)
			}
			if len(m.Warnings) != 1 || !strings.Contains(m.Warnings[0], "token calibration ("+cal.Method+") failed, no run started") {
				t.Errorf("warnings %q", m.Warnings)
			}
			if m.Manifest == nil || m.Manifest.Server != nil {
				t.Errorf("manifest %+v: the silent server must not be asked what it is", m.Manifest)
			}
		})
	}
}

// TestSystemPromptSizedInServerTokens: a generated system prompt of 40
// tokens against a server counting 2 tokens a word (every message) plus
// 20 is 20 words once calibrated; the probes carried it at one word per
// token, and the overhead fitted moves by the 40 tokens it lost, so the
// measured prompts (system and user message) are the 120 tokens asked for.
func TestSystemPromptSizedInServerTokens(t *testing.T) {
	var mu sync.Mutex
	var last [][]string // every request's messages, as words
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Messages []struct{ Role, Content string } `json:"messages"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		words := 0
		for _, m := range body.Messages {
			words += len(strings.Fields(m.Content))
		}
		mu.Lock()
		last = append(last, []string{body.Messages[0].Role, body.Messages[0].Content})
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":1}}`+"\n\n", 2*words+20)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	o := options(t, srv)
	o.Calibrate, o.SystemPromptTokens = CalibrateUsage, 40
	o.Workload.Input.A, o.Workload.Input.Min = 120, 1
	res := run(t, Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o, nil)
	cal := res.Document.Metadata.TokenCalibration
	if cal == nil || cal.Error != "" || cal.TokensPerWord != 2 || cal.OverheadTokens != 20+2*20 || cal.SystemPromptWords != 20 {
		t.Fatalf("calibration %+v: want 2 tokens per word, 60 tokens of overhead (the template's 20 and the system prompt's 20 words), 20 words", cal)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, m := range last {
		want := 40 // the probes: one word per token asked
		if i >= 6 {
			want = 20
		}
		if m[0] != "system" || len(strings.Fields(m[1])) != want {
			t.Errorf("request %d: first message %s of %d words, want the system prompt of %d", i, m[0], len(strings.Fields(m[1])), want)
		}
	}
	if s := res.Document.Runs[0].Summary; s.InputTokens.P50 != 120 {
		t.Errorf("server-counted prompts p50 %v, want 120", s.InputTokens.P50)
	}
	rs := res.Document.Runs[0].Settings.Request
	if rs.SystemPromptTokens != 40 || rs.SystemPromptChars == 0 || rs.ExtraBody != "" || rs.Headers != "" {
		t.Errorf("settings.request %+v", rs)
	}
}

// TestDatasetRepliesFromUsage: against a server without /tokenize that
// counts 3 tokens for the word "word", 1 for any other, plus 20 per
// request, a dataset's replies (JSONL
// "completion") are counted from the usage of short requests, less the
// 20 every request carries: the 16 counted are sent as 3 × their words,
// the others at the 3 tokens per word fitted; a row's own output_tokens
// is sent as it is.
func TestDatasetRepliesFromUsage(t *testing.T) {
	var lines []string
	for i := range 20 {
		lines = append(lines, fmt.Sprintf(`{"prompt":"question %d","completion":"%s"}`, i, strings.TrimSpace(strings.Repeat("word ", i+1))))
	}
	lines = append(lines, `{"prompt":"fixed","output_tokens":9,"completion":"a b"}`)
	path := filepath.Join(t.TempDir(), "d.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := workload.LoadDataset(path)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	maxTokens := map[string]int{} // measured prompt → max_tokens
	probes := 0
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var body struct {
			Messages  []struct{ Content string } `json:"messages"`
			MaxTokens int                        `json:"max_tokens"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		text := body.Messages[0].Content
		mu.Lock()
		if strings.Contains(text, "question") || strings.Contains(text, "fixed") {
			f := strings.Fields(text) // TAG-i question N, TAG-i fixed
			maxTokens[f[len(f)-1]] = body.MaxTokens
		} else {
			probes++
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, `data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":1}}`+"\n\n", len(strings.Fields(text))+2*strings.Count(text, "word")+20)
		fmt.Fprint(w, "data: [DONE]\n\n")
	})
	o := options(t, srv)
	o.Calibrate, o.Workload.Dataset = CalibrateAuto, d
	o.Run = runner.Config{Requests: 21}
	res := run(t, Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o, nil)
	cal := res.Document.Metadata.TokenCalibration
	if cal == nil || cal.Error != "" || cal.Method != CalibrateUsage || cal.Calibrated != report.CalibratedDatasetReplies || len(cal.Probes) != 16 || cal.TokensPerWord != 3 {
		t.Fatalf("calibration %+v", cal)
	}
	mu.Lock()
	defer mu.Unlock()
	if probes != 17 {
		t.Errorf("%d calibration requests, want 17 (a one-word prompt, 16 replies)", probes)
	}
	if len(maxTokens) != 21 {
		t.Fatalf("%d prompts measured, want 21", len(maxTokens))
	}
	for i := range 20 {
		if got := maxTokens[fmt.Sprint(i)]; got != 3*(i+1) {
			t.Errorf("question %d: max_tokens %d, want %d (its reply's %d words at 3 tokens each)", i, got, 3*(i+1), i+1)
		}
	}
	if maxTokens["fixed"] != 9 {
		t.Errorf("the row with output_tokens 9: max_tokens %d", maxTokens["fixed"])
	}
}
