package main

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"math"
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

// seenRequests records what a server was sent.
type seenRequests struct {
	mu      sync.Mutex
	bodies  []map[string]any
	headers []http.Header
}

func (s *seenRequests) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		s.mu.Lock()
		s.bodies, s.headers = append(s.bodies, m), append(s.headers, r.Header.Clone())
		s.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// TestRequestControlAgainstSim (issue 29 item 1): the extra body, the
// headers and a generated system prompt reach the simulated server in
// every request (calibration probes included); the report records them,
// the secret header's value nowhere (report, saved responses, log); the
// prompts still add up to the tokens asked for; and with temperature 0
// and a seed in the extra body two runs of the same prompts save the
// same answers, which without them differ. There is no real inference
// server in the test suite (only recorded stream fixtures), so this runs
// against the simulated one, which decodes greedily at temperature 0
// and reproducibly with a seed.
func TestRequestControlAgainstSim(t *testing.T) {
	t.Parallel()
	const secret = "sk-very-secret-0042"
	seen := &seenRequests{}
	srv := httptest.NewServer(seen.wrap(simHandler(t, simserver.Config{FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 1,
		Seed: 1, OutputTokensMean: 12, Tokenizer: simserver.TokenizerSubword})))
	defer srv.Close()
	dir := t.TempDir()
	run := func(name string, extra ...string) (*report.Document, []report.Record, string) {
		t.Helper()
		out, resp := filepath.Join(dir, name+".json"), filepath.Join(dir, name+".jsonl")
		app := kingpin.New("t", "")
		c := runCommand(app)
		args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", simserver.DefaultModel, "--no-progress",
			"--no-server-info", "--concurrency", "2", "--requests", "6", "--input-tokens", "fixed:200", "--output-tokens", "fixed:24",
			"--prompts", "reuse", "--request.system-prompt-tokens", "40", "--request.header", "X-Tenant: team-a",
			"--request.header", "X-Gateway-Auth: " + secret, "--output", out, "--save-responses", resp}, extra...)
		if _, err := app.Parse(args); err != nil {
			t.Fatal(err)
		}
		var log bytes.Buffer
		if err := c.run(t.Context(), slog.New(slog.NewTextHandler(&log, nil))); err != nil {
			t.Fatal(err)
		}
		d, err := report.Read(out)
		if err != nil {
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
		for _, p := range []string{out, resp} {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the secret header's value", filepath.Base(p))
			}
		}
		if strings.Contains(log.String(), secret) {
			t.Error("the log holds the secret header's value")
		}
		return d, recs, log.String()
	}
	greedy := []string{"--request.extra-body", `{"temperature":0,"seed":7}`, "--request.extra-body", `{"chat_template_kwargs":{"enable_thinking":false}}`}
	d1, r1, _ := run("a", greedy...)
	d2, r2, _ := run("b", greedy...)
	_, r3, _ := run("c")

	// What arrived: every request of the first two runs (probes too).
	seen.mu.Lock()
	bodies, headers := seen.bodies, seen.headers
	seen.mu.Unlock()
	greedyRequests := 0
	for i, b := range bodies {
		if headers[i].Get("X-Tenant") != "team-a" || headers[i].Get("X-Gateway-Auth") != secret {
			t.Fatalf("request %d: headers %v", i, headers[i])
		}
		if _, ok := b["messages"]; !ok { // the tokenize endpoint's count
			continue
		}
		msgs := b["messages"].([]any)
		sys := msgs[0].(map[string]any)
		if len(msgs) != 2 || sys["role"] != "system" {
			t.Fatalf("request %d: messages %v, want a system message first", i, msgs)
		}
		if b["temperature"] == 0.0 && b["seed"] == 7.0 {
			greedyRequests++
			if k, _ := b["chat_template_kwargs"].(map[string]any); k["enable_thinking"] != false {
				t.Errorf("request %d: chat_template_kwargs %v", i, b["chat_template_kwargs"])
			}
		}
	}
	if greedyRequests < 12 {
		t.Errorf("%d requests carried the extra body, want the 12 measured of two runs at least", greedyRequests)
	}

	// Recorded: settings, hash.
	rs := d1.Runs[0].Settings.Request
	if rs.ExtraBody != `{"chat_template_kwargs":{"enable_thinking":false},"seed":7,"temperature":0}` || rs.Headers != `["X-Tenant: team-a","X-Gateway-Auth: [REDACTED]"]` ||
		rs.SystemPromptTokens != 40 || len(rs.SystemPromptSHA256) != 64 || rs.MaxTokensField != "" {
		t.Errorf("settings.request %+v", rs)
	}
	if h1, h2 := d1.Metadata.Manifest.SettingsHash, d2.Metadata.Manifest.SettingsHash; h1 == "" || h1 != h2 {
		t.Errorf("settings hashes %q, %q: want equal", h1, h2)
	}
	// The prompts, system prompt included, are the 200 tokens asked for.
	if got := d1.Runs[0].Summary.InputTokens.P50; math.Abs(got-200) > 4 {
		t.Errorf("server-counted prompt tokens p50 %v, want 200 ± 2 %% (calibration %+v)", got, d1.Metadata.TokenCalibration)
	}
	// The sub-word tokenizer counts the vocabulary's words one token each.
	if cal := d1.Metadata.TokenCalibration; cal == nil || cal.TokensPerWord != 1 || cal.SystemPromptWords != 40 {
		t.Errorf("calibration %+v: want the 40 tokens of system prompt in 40 words", cal)
	}

	answers := func(recs []report.Record) map[int]string {
		m := map[int]string{}
		for _, r := range recs {
			m[r.Index] = r.Answer.Response
		}
		return m
	}
	a1, a2, a3 := answers(r1), answers(r2), answers(r3)
	if len(a1) != 6 {
		t.Fatalf("%d saved answers, want 6", len(a1))
	}
	same := 0
	for i, s := range a1 {
		if s == "" || a2[i] != s {
			t.Errorf("request %d: %q then %q: temperature 0 and a seed must give the same answer", i, s, a2[i])
		}
		if a3[i] == s {
			same++
		}
	}
	if same == len(a1) {
		t.Error("without temperature 0 or a seed every answer was the same again")
	}
}

// TestRequestFlagErrors: bad JSON, headers and conflicting flags are
// refused before any request, naming the flag.
func TestRequestFlagErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "none.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--request.extra-body", `{"temperature":0`}, "--request.extra-body \"{\\\"temperature\\\":0\": want one JSON object"},
		{[]string{"--request.extra-body", `[1,2]`}, "--request.extra-body \"[1,2]\": want one JSON object"},
		{[]string{"--request.extra-body=@" + missing}, "--request.extra-body: open " + missing},
		{[]string{"--request.extra-body", `{"seed":1}`, "--request.extra-body", `{"seed":2}`}, `--request.extra-body: field "seed" given twice`},
		{[]string{"--request.extra-body", `{"max_tokens":9}`}, `--request.extra-body: "max_tokens" is written by the load generator itself`},
		{[]string{"--request.header", "X-Tenant team-a"}, `--request.header "X-Tenant team-a": want Name: value`},
		{[]string{"--request.header", "Content-Type: text/plain"}, "--request.header: Content-Type is set by the load generator"},
		{[]string{"--request.secret-header", "X-Foo"}, `--request.secret-header "X-Foo": no --request.header of that name`},
		{[]string{"--request.system-prompt", "be brief", "--request.system-prompt-tokens", "10"}, "set --request.system-prompt or --request.system-prompt-tokens, not both"},
		{[]string{"--request.system-prompt-tokens=-1"}, "--request.system-prompt-tokens must not be negative"},
		{[]string{"--request.max-tokens-field", "max_new_tokens"}, "enum value must be one of"},
	} {
		app := kingpin.New("t", "")
		c := runCommand(app)
		args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--concurrency", "1", "--requests", "1"}, tc.args...)
		_, err := app.Parse(args)
		if err == nil {
			err = c.run(t.Context(), slog.New(slog.DiscardHandler))
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestRequestFlagFiles: --request.extra-body=@FILE and
// --request.system-prompt=@FILE read their files; the bodies merge.
func TestRequestFlagFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	body, sys := filepath.Join(dir, "body.json"), filepath.Join(dir, "system.txt")
	if err := os.WriteFile(body, []byte("{\"top_k\": 5,\n \"min_p\": 0.1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(sys, []byte("You are terse.\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	app := kingpin.New("t", "")
	f := addLoadFlags(app.Command("run", ""))
	if _, err := app.Parse([]string{"run", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--request.extra-body=@" + body,
		"--request.extra-body", `{"seed":3}`, "--request.system-prompt=@" + sys, "--request.max-tokens-field", "max_completion_tokens"}); err != nil {
		t.Fatal(err)
	}
	o, err := f.options()
	if err != nil {
		t.Fatal(err)
	}
	if string(o.Client.ExtraBody) != `{"min_p":0.1,"seed":3,"top_k":5}` || o.SystemPrompt != "You are terse.\n" || o.Client.MaxTokensField != "max_completion_tokens" {
		t.Errorf("extra body %s, system prompt %q, field %s", o.Client.ExtraBody, o.SystemPrompt, o.Client.MaxTokensField)
	}
}
