package campaign

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
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
