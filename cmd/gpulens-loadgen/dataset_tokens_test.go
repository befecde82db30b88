package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestShareGPTOutputInServerTokens (issue 29 item 4): a ShareGPT reply's
// length is sent as max_tokens in the server's tokens, counted by the
// server (its /tokenize here), not in words: the simulated server's
// sub-word tokenizer counts these replies (long words, digits,
// punctuation) at 2 to 4 tokens a word, so with --ignore-eos every answer
// has the reply's token count. The old code sent the word counts.
func TestShareGPTOutputInServerTokens(t *testing.T) {
	t.Parallel()
	replies := []string{
		"Internationalization, standardization; approximately 1234567 characters.",
		"Electroencephalography (EEG) measures: 0.001-0.1 millivolts, roughly.",
		"Yes.",
		"Counterrevolutionaries misunderstood telecommunications infrastructure comprehensively!",
	}
	var convs []map[string]any
	for i, r := range replies {
		convs = append(convs, map[string]any{"id": fmt.Sprint(i), "conversations": []map[string]string{
			{"from": "human", "value": fmt.Sprintf("question number %d", i)}, {"from": "gpt", "value": r}}})
	}
	dir := t.TempDir()
	ds := filepath.Join(dir, "sharegpt.json")
	b, _ := json.Marshal(convs)
	if err := os.WriteFile(ds, b, 0o600); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 1, Seed: 1,
		Tokenizer: simserver.TokenizerSubword}))
	defer srv.Close()
	// What the server counts each reply as: its /tokenize of the text as a
	// completions prompt, less the BOS token.
	want := map[int]int{}
	for i, r := range replies {
		body, _ := json.Marshal(map[string]string{"model": simserver.DefaultModel, "prompt": r})
		resp, err := http.Post(srv.URL+"/tokenize", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var out struct{ Count int }
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		want[i+1] = out.Count - 1
		if w := len(strings.Fields(r)); i != 2 && want[i+1] < 2*w {
			t.Fatalf("reply %d: %d tokens for %d words: want a reply the tokenizer counts well above its words", i, want[i+1], w)
		}
	}
	out, resp := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
	app := kingpin.New("t", "")
	c := runCommand(app)
	if _, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", simserver.DefaultModel, "--no-progress",
		"--no-server-info", "--concurrency", "2", "--requests", "8", "--dataset", ds, "--ignore-eos", "--output", out, "--save-responses", resp}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(t.Context(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(resp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := report.ReadResponses(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 8 {
		t.Fatalf("%d responses, want 8", len(recs))
	}
	// With ignore_eos an answer is max_tokens long.
	sum := 0
	for _, r := range recs {
		row := r.Answer.DatasetRow
		sum += want[row]
		if r.OutputTokens != want[row] {
			t.Errorf("row %d: answer of %d tokens; want the reply's %d server tokens (%d words)", row, r.OutputTokens, want[row], len(strings.Fields(replies[row-1])))
		}
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Runs[0].Summary
	if s.OutputTokensRequested == nil || s.OutputTokensRequested.Mean != float64(sum)/8 {
		t.Errorf("output tokens asked %+v, want mean %v", s.OutputTokensRequested, float64(sum)/8)
	}
	if w := report.TokenDeviations(&s); len(w) != 0 {
		t.Errorf("token warnings %v", w)
	}
	if cal := d.Metadata.TokenCalibration; cal == nil || cal.Calibrated != report.CalibratedDatasetReplies || len(cal.Probes) != 4 {
		t.Errorf("calibration %+v", cal)
	}
}

// TestDatasetTurnsFlag: --dataset.turns all sends every human turn of a
// ShareGPT conversation after its history; the settings record it.
func TestDatasetTurnsFlag(t *testing.T) {
	t.Parallel()
	ds := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(ds, []byte(`[{"conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"human","value":"q2"},{"from":"gpt","value":"a2 a2"}]}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []int // messages per measured request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Messages []json.RawMessage }
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		seen = append(seen, len(body.Messages))
		mu.Unlock()
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	out := filepath.Join(t.TempDir(), "r.json")
	app := kingpin.New("t", "")
	c := runCommand(app)
	if _, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", "m", "--no-progress", "--no-server-info",
		"--input-tokens.calibrate", "off", "--concurrency", "1", "--requests", "4", "--dataset", ds, "--dataset.turns", "all", "--output", out}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(t.Context(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	n1, n3 := 0, 0
	for _, n := range seen {
		switch n {
		case 1:
			n1++
		case 3: // q1, a1, then q2
			n3++
		}
	}
	if n1 != 2 || n3 != 2 {
		t.Errorf("messages per request %v: want the first turn alone twice and the second after its history twice", seen)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if d.Runs[0].Settings.DatasetTurns != "all" {
		t.Errorf("settings.dataset_turns %q", d.Runs[0].Settings.DatasetTurns)
	}
}
