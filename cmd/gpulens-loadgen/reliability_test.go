package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/report"
)

// recordingServer answers every chat request with one content chunk and
// usage, or, with hang, sends the chunk and waits until the client goes;
// it keeps every prompt in arrival order. arrived receives once per
// request. fail answers HTTP status fail with body failBody instead.
type recordingServer struct {
	hang     bool
	fail     int
	failBody string
	mu       sync.Mutex
	prompts  []string
	n        atomic.Int64
	arrived  chan struct{}
}

func (s *recordingServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	s.n.Add(1)
	s.mu.Lock()
	if len(body.Messages) > 0 {
		s.prompts = append(s.prompts, body.Messages[0].Content)
	}
	s.mu.Unlock()
	if s.fail != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(s.fail)
		_, _ = io.WriteString(w, s.failBody)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, `data: {"model":"served","choices":[{"delta":{"content":"hi"}}]}`+"\n\n")
	w.(http.Flusher).Flush()
	if s.arrived != nil {
		s.arrived <- struct{}{}
	}
	if s.hang {
		<-r.Context().Done()
		return
	}
	_, _ = io.WriteString(w, `data: {"choices":[{"delta":{},"finish_reason":"stop"}]}`+"\n\n"+
		`data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}`+"\n\ndata: [DONE]\n\n")
}

func (s *recordingServer) start(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

func (s *recordingServer) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.prompts...)
}

// parseRun parses a run or sweep command line against target.
func parseRun(t *testing.T, cmd func(*kingpin.Application) command, target string, args ...string) command {
	t.Helper()
	app := kingpin.New("t", "")
	c := cmd(app)
	base := []string{"--web.listen-address=127.0.0.1:0", "--target", target, "--model", "m", "--no-progress",
		"--input-tokens", "fixed:6", "--output-tokens", "fixed:4", "--input-tokens.calibrate=off"}
	if _, err := app.Parse(append(args, base...)); err != nil {
		t.Fatal(err)
	}
	return c
}

func readRecords(t *testing.T, path string) []report.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := report.ReadRecords(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return recs
}

// TestOutputsCheckedBeforeRun: an output that could not be written at the
// end is refused before the first request, with the flag and the path,
// and exit status 2.
func TestOutputsCheckedBeforeRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"JSON into a missing directory", []string{"--output", filepath.Join(dir, "missing", "r.json")}, "--output " + filepath.Join(dir, "missing", "r.json") + ": directory " + filepath.Join(dir, "missing") + " does not exist"},
		{"CSV onto a directory", []string{"--csv", dir}, "--csv " + dir + ": " + dir + " is a directory"},
		{"raw records into a missing directory", []string{"--save-requests", filepath.Join(dir, "no", "r.jsonl")}, "--save-requests"},
		{"two outputs on one path", []string{"--output", filepath.Join(dir, "r.out"), "--csv", filepath.Join(dir, "r.out")}, "--output and --csv both write " + filepath.Join(dir, "r.out")},
		{"JSON onto a socket", []string{"--output", sock}, "is a socket"},
		{"bad prompt nonce", []string{"--prompt-nonce", "not ok"}, "--prompt-nonce: prompt nonce \"not ok\""},
		{"zero grace period", []string{"--grace-period", "0s"}, "--grace-period must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.name, "socket") {
				ln, err := net.Listen("unix", sock)
				if err != nil {
					t.Skipf("no unix sockets: %v", err)
				}
				defer ln.Close()
			}
			srv := &recordingServer{}
			c := parseRun(t, runCommand, srv.start(t), append([]string{"run", "--concurrency", "1", "--requests", "2"}, tc.args...)...)
			err := c.run(context.Background(), slog.New(slog.DiscardHandler))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); got != exitUsage {
				t.Errorf("exit status %d, want %d", got, exitUsage)
			}
			if n := srv.n.Load(); n != 0 {
				t.Errorf("%d requests sent before the error", n)
			}
		})
	}
}

// TestOutputsToFIFOs: JSON, CSV, raw records and HTML written to FIFOs go
// to their readers in place; the FIFOs are still FIFOs afterwards.
func TestOutputsToFIFOs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	names := []string{"r.json", "r.csv", "r.jsonl", "r.html"}
	got := map[string]chan string{}
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			t.Skipf("no FIFOs here: %v", err)
		}
		ch := make(chan string, 1)
		got[n] = ch
		go func() {
			f, err := os.Open(p)
			if err != nil {
				ch <- err.Error()
				return
			}
			b, _ := io.ReadAll(f)
			f.Close()
			ch <- string(b)
		}()
	}
	srv := &recordingServer{}
	// The JSON report goes to a FIFO: a regular copy of it feeds the HTML report.
	c := parseRun(t, runCommand, srv.start(t), "run", "--concurrency", "1", "--requests", "2", "--output", filepath.Join(dir, "r.json"),
		"--csv", filepath.Join(dir, "r.csv"), "--save-requests", filepath.Join(dir, "r.jsonl"))
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	jsonText := <-got["r.json"]
	d, err := report.Parse([]byte(jsonText), "fifo")
	if err != nil || len(d.Runs) != 1 || d.Runs[0].Summary.RequestsCompleted != 2 {
		t.Fatalf("JSON through the FIFO: %v, %q", err, jsonText)
	}
	if csv := <-got["r.csv"]; !strings.HasPrefix(csv, "name,level,repeat,aggregate,") || strings.Count(csv, "\n") != 2 {
		t.Errorf("CSV through the FIFO: %q", csv)
	}
	if recs := <-got["r.jsonl"]; strings.Count(recs, "\n") != 2 {
		t.Errorf("raw records through the FIFO: %q", recs)
	}
	copyPath := filepath.Join(dir, "copy.json")
	if err := os.WriteFile(copyPath, []byte(jsonText), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := renderReport(copyPath, filepath.Join(dir, "r.html"), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if html := <-got["r.html"]; !strings.Contains(html, "<title>gpulens load report: m</title>") {
		t.Errorf("HTML through the FIFO: %.200q", html)
	}
	for _, n := range names {
		if fi, err := os.Lstat(filepath.Join(dir, n)); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
			t.Errorf("%s after the run: %v %v, want still a FIFO", n, fi.Mode(), err)
		}
	}
}

// TestHungServer: against a server that never finishes its answers,
// --duration still ends the run after the grace period, with every request
// counted as cancelled_at_end (exit status 3: none completed); Ctrl-C
// instead keeps the hung requests as interrupted (exit status 4). Either
// way the raw records say what happened.
func TestHungServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		args       []string
		interrupt  bool
		status     int
		class      string
		failed     int
		interupted int
	}{
		{"duration and grace period", []string{"--duration", "100ms", "--grace-period", "100ms"}, false, exitAllFailed, report.ErrCancelledAtEnd, 2, 0},
		{"Ctrl-C", []string{"--duration", "1h"}, true, exitInterrupted, report.ErrInterrupted, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			srv := &recordingServer{hang: true, arrived: make(chan struct{}, 16)}
			out, recs := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
			c := parseRun(t, runCommand, srv.start(t), append([]string{"run", "--concurrency", "2", "--output", out, "--save-requests", recs}, tc.args...)...)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.interrupt {
				go func() {
					<-srv.arrived
					<-srv.arrived
					cancel() // both users' requests hang
				}()
			}
			err := c.run(ctx, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); got != tc.status {
				t.Errorf("exit status %d, want %d", got, tc.status)
			}
			d, err := report.Read(out)
			if err != nil {
				t.Fatal(err)
			}
			s := d.Runs[0].Summary
			if s.RequestsCompleted != 0 || s.RequestsFailed != tc.failed || s.RequestsInterrupted != tc.interupted || d.Metadata.Interrupted != tc.interrupt {
				t.Errorf("summary completed %d failed %d interrupted %d (metadata %v), want 0, %d, %d", s.RequestsCompleted, s.RequestsFailed,
					s.RequestsInterrupted, d.Metadata.Interrupted, tc.failed, tc.interupted)
			}
			if tc.failed > 0 && (s.Errors[report.ErrCancelledAtEnd] != tc.failed || d.Runs[0].Settings.GracePeriodSeconds != 0.1) {
				t.Errorf("errors %v, grace period %v s, want %d cancelled_at_end after 0.1 s", s.Errors, d.Runs[0].Settings.GracePeriodSeconds, tc.failed)
			}
			rs := readRecords(t, recs)
			if len(rs) != 2 {
				t.Fatalf("%d raw records, want 2", len(rs))
			}
			for _, r := range rs {
				if r.ErrorClass != tc.class {
					t.Errorf("record %d: error class %q, want %q", r.Index, r.ErrorClass, tc.class)
				}
				// Given up at the end of the grace period at the earliest.
				if tc.failed > 0 && r.End < 200*time.Millisecond {
					t.Errorf("record %d ends %v after the start, before duration + grace", r.Index, r.End)
				}
			}
		})
	}
}

// TestAllFailedAndAPIKeyScrubbed: a server that rejects every request and
// echoes the API key: exit status 3, and the key is nowhere in the raw
// records or the report.
func TestAllFailedAndAPIKeyScrubbed(t *testing.T) {
	t.Parallel()
	const key = "sk-live-51HxYq8Lm2Nd7Rt4Vw9Zb3Kc6Jp0Fg"
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := &recordingServer{fail: 401, failBody: `{"error":{"message":"Incorrect API key provided: ` + key + `.","type":"invalid_request_error","code":"invalid_api_key"}}`}
	out, recs := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.jsonl")
	c := parseRun(t, runCommand, srv.start(t), "run", "--concurrency", "1", "--requests", "3", "--api-key-file", keyFile,
		"--output", out, "--save-requests", recs)
	err := c.run(context.Background(), slog.New(slog.DiscardHandler))
	if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); err != nil || got != exitAllFailed {
		t.Fatalf("err %v, exit status %d, want nil and %d", err, got, exitAllFailed)
	}
	for _, p := range []string{out, recs} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), key[8:20]) {
			t.Errorf("%s holds the API key", p)
		}
	}
	for _, r := range readRecords(t, recs) {
		if r.ErrorClass != report.ErrHTTP4xx || r.Error != "HTTP 401: Incorrect API key provided: [REDACTED]." {
			t.Errorf("record %d: %q %q", r.Index, r.ErrorClass, r.Error)
		}
	}
}

// TestExitStatusMapping: errors found before the run are 2, other errors
// 1, and a run without error exits with the status it recorded.
func TestExitStatusMapping(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	withStatus := func(n int) command {
		return command{clause: kingpin.New("t", "").Command("run", ""), status: func() int { return n }}
	}
	for _, tc := range []struct {
		c    command
		err  error
		want int
	}{
		{withStatus(exitOK), nil, exitOK},
		{withStatus(exitInterrupted), nil, exitInterrupted},
		{withStatus(exitAllFailed), nil, exitAllFailed},
		{withStatus(exitInterrupted), errors.New("--output: writing r.json: disk full"), exitError},
		{withStatus(exitOK), usageError{errors.New("--slo: bad")}, exitUsage},
		{withStatus(exitOK), fmt.Errorf("wrapped: %w", usageError{errors.New("x")}), exitUsage},
		{command{clause: kingpin.New("t", "").Command("merge", "")}, nil, exitOK},
	} {
		if got := exitStatus(tc.c, tc.err, logger); got != tc.want {
			t.Errorf("exitStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
	// The process: a flag kingpin rejects, a value execute rejects.
	if got := runMain([]string{"run", "--no-such-flag"}); got != exitUsage {
		t.Errorf("unknown flag: exit status %d, want %d", got, exitUsage)
	}
	if got := runMain([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m",
		"--concurrency", "1", "--requests", "1", "--slo", "ttft=fast", "--log.level", "error"}); got != exitUsage {
		t.Errorf("bad --slo: exit status %d, want %d", got, exitUsage)
	}
}

// TestPromptsAcrossRunsAndInvocations: by default every level and repeat
// and every invocation sends prompts of its own; --prompt-nonce with a
// report's nonce replays them byte for byte; --prompts reuse sends the
// same prompts everywhere (the seed's, led by the request index).
func TestPromptsAcrossRunsAndInvocations(t *testing.T) {
	t.Parallel()
	sweep := func(t *testing.T, extra ...string) ([]string, *report.Document) {
		t.Helper()
		srv := &recordingServer{}
		out := filepath.Join(t.TempDir(), "r.json")
		c := parseRun(t, sweepCommand, srv.start(t), append([]string{"sweep", "--rate", "100,200", "--arrival", "constant",
			"--repeats", "2", "--requests", "3", "--seed", "4", "--output", out}, extra...)...)
		if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		d, err := report.Read(out)
		if err != nil {
			t.Fatal(err)
		}
		return srv.seen(), d
	}
	set := func(ps []string) map[string]int {
		m := map[string]int{}
		for _, p := range ps {
			m[p]++
		}
		return m
	}
	a, da := sweep(t)
	if len(a) != 12 || len(set(a)) != 12 {
		t.Fatalf("distinct prompts: %d sent, %d different; want 12 and 12", len(a), len(set(a)))
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(da.Metadata.PromptNonce) {
		t.Errorf("metadata.prompt_nonce = %q, want 16 hex digits", da.Metadata.PromptNonce)
	}
	for _, r := range da.Runs {
		if r.Settings.Prompts != report.PromptsDistinct {
			t.Errorf("run %s: settings.prompts %q, want %q", r.Name, r.Settings.Prompts, report.PromptsDistinct)
		}
	}
	b, db := sweep(t)
	if db.Metadata.PromptNonce == da.Metadata.PromptNonce {
		t.Fatalf("two invocations drew the same nonce %q", da.Metadata.PromptNonce)
	}
	for p := range set(b) {
		if set(a)[p] > 0 {
			t.Fatalf("a second invocation resent %q", p)
		}
	}
	// The same prompts (concurrent sends leave the order the server saw
	// them in open).
	replay, dr := sweep(t, "--prompt-nonce", da.Metadata.PromptNonce)
	if !slices.Equal(slices.Sorted(slices.Values(replay)), slices.Sorted(slices.Values(a))) || dr.Metadata.PromptNonce != da.Metadata.PromptNonce {
		t.Errorf("replay with --prompt-nonce %s sent other prompts", da.Metadata.PromptNonce)
	}
	reuse, du := sweep(t, "--prompts", "reuse")
	if len(reuse) != 12 || len(set(reuse)) != 3 || du.Metadata.PromptNonce != "" || du.Runs[0].Settings.Prompts != report.PromptsReuse {
		t.Fatalf("reuse: %d prompts, %d different, nonce %q, settings %q; want 12, 3, none, reuse", len(reuse), len(set(reuse)),
			du.Metadata.PromptNonce, du.Runs[0].Settings.Prompts)
	}
	// Led by the request index: 0, 1 and 2, once per level and repeat.
	firsts := map[string]int{}
	for _, p := range reuse {
		firsts[strings.Fields(p)[0]]++
	}
	if want := map[string]int{"0": 4, "1": 4, "2": 4}; !maps.Equal(firsts, want) {
		t.Errorf("reused prompts start with %v, want the request indexes %v", firsts, want)
	}
}

// TestReportRejectsEmpty: a report without runs is refused (exit status
// 2) and no HTML file is written.
func TestReportRejectsEmpty(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	in, html := filepath.Join(dir, "empty.json"), filepath.Join(dir, "out.html")
	if err := (&report.Document{Metadata: report.Metadata{Command: "run"}}).Write(in); err != nil {
		t.Fatal(err)
	}
	app := kingpin.New("t", "")
	c := reportCommand(app)
	if _, err := app.Parse([]string{"report", in, "--html", html}); err != nil {
		t.Fatal(err)
	}
	err := c.run(context.Background(), slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), "report "+in+" has no runs") {
		t.Fatalf("err = %v, want the file named and no runs", err)
	}
	if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); got != exitUsage {
		t.Errorf("exit status %d, want %d", got, exitUsage)
	}
	if _, err := os.Stat(html); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("HTML written for an empty report: %v", err)
	}
}

// TestUnwritableOutputSavedElsewhere: an output that passed the checks but
// fails when written (a link to /dev/full) is saved in the temporary
// folder instead, and the error says where.
func TestUnwritableOutputSavedElsewhere(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	dir, tmp := t.TempDir(), t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out := filepath.Join(dir, "r.json")
	if err := os.Symlink("/dev/full", out); err != nil {
		t.Fatal(err)
	}
	srv := &recordingServer{}
	c := parseRun(t, runCommand, srv.start(t), "run", "--concurrency", "1", "--requests", "2", "--output", out)
	err := c.run(context.Background(), slog.New(slog.DiscardHandler))
	if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); got != exitError {
		t.Errorf("exit status %d, want %d", got, exitError)
	}
	m := regexp.MustCompile(`saved to (\S+) instead`).FindStringSubmatch(fmt.Sprint(err))
	if m == nil || !strings.HasPrefix(m[1], tmp) || !strings.Contains(err.Error(), "--output: writing "+out) {
		t.Fatalf("err = %v, want the output named and where it was saved", err)
	}
	d, rerr := report.Read(m[1])
	if rerr != nil || len(d.Runs) != 1 || d.Runs[0].Summary.RequestsCompleted != 2 {
		t.Errorf("saved report: %v", rerr)
	}
}
