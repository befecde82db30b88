package main

import (
	"context"
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
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/loadgen/report"
)

const (
	lingerMsg = "run finished; serving metrics until the linger ends (Ctrl-C to exit now)"
	// waitLimit only stops a broken test from hanging: nothing is timed.
	waitLimit = time.Minute
	// returnLimit bounds "returns promptly" after a cancel during a 1 h linger.
	returnLimit = 10 * time.Second
)

// TestLingerServesFinalMetrics runs against the in-process simulator with
// --linger 1h: once lingering, the report is already written and /metrics
// (and the landing page) still answer with the report's final request count;
// cancelling the context (Ctrl-C) then ends the linger at once with the run's
// exit status (nil).
func TestLingerServesFinalMetrics(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cmd  func(*kingpin.Application) command
		args []string
	}{
		{"run", runCommand, []string{"run", "--concurrency", "2", "--requests", "20"}},
		{"sweep", sweepCommand, []string{"sweep", "--concurrency", "1,2", "--requests", "8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := startSim(t)
			out := filepath.Join(t.TempDir(), "r.json")
			logs := &recordingHandler{}
			c := parseLoadCommand(t, tc.cmd, append(tc.args, "--target", target, "--linger", "1h", "--output", out))

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.run(ctx, slog.New(logs)) }()

			lg := logs.wait(t, done, lingerMsg)
			if got := lg["linger"]; got != "1h0m0s" {
				t.Errorf("linger log: linger = %q, want 1h0m0s (attrs %v)", got, lg)
			}
			if got := lg["address"]; got != "127.0.0.1:0" {
				t.Errorf("linger log: address = %q, want 127.0.0.1:0 (attrs %v)", got, lg)
			}
			// Reports come before the linger.
			d, err := report.Read(out)
			if err != nil {
				t.Fatalf("report not written before the linger: %v", err)
			}
			var completed, failed int
			for _, r := range d.Runs {
				completed += int(r.Summary.RequestsCompleted)
				failed += int(r.Summary.RequestsFailed)
			}
			if wantRuns := strings.Count(tc.args[2], ",") + 1; len(d.Runs) != wantRuns || completed == 0 || d.Metadata.Interrupted {
				t.Fatalf("report: %d runs (want %d), %d completed, interrupted %v", len(d.Runs), wantRuns, completed, d.Metadata.Interrupted)
			}

			base := "http://" + logs.wait(t, done, "Listening on")["address"]
			byOutcome := scrapeRequests(t, base+"/metrics")
			total := 0.0
			for _, v := range byOutcome {
				total += v
			}
			if byOutcome["success"] != float64(completed) || total != float64(completed+failed) {
				t.Errorf("gpulens_loadgen_requests_total = %v, want success %d and %d in all (report)", byOutcome, completed, completed+failed)
			}
			resp, err := http.Get(base + "/")
			if err != nil {
				t.Fatalf("landing page during the linger: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("landing page during the linger: %s", resp.Status)
			}

			cancel() // Ctrl-C during the linger
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("after Ctrl-C during the linger: %v, want the run's nil", err)
				}
			case <-time.After(returnLimit):
				t.Fatalf("still lingering %v after Ctrl-C", returnLimit)
			}
		})
	}
}

// TestLingerCancel: Ctrl-C during a 1 h linger returns promptly with the
// exit status the run would have had; Ctrl-C during the run itself skips the
// linger.
func TestLingerCancel(t *testing.T) {
	for _, tc := range []struct {
		name       string
		args       func(dir string) []string
		cancelOn   string // log message after which to cancel; "" cancels after a delay, during the run
		wantErr    string // "" for success
		wantLinger bool
	}{
		{"during the linger, run succeeded", func(string) []string { return []string{"--requests", "4"} }, lingerMsg, "", true},
		// A CSV path that passes the checks before the run (a link to a
		// character device, written in place) but fails when written at
		// the end (/dev/full: no space left on device); a missing folder
		// is now refused before the run (TestOutputsCheckedBeforeRun).
		{"during the linger, CSV unwritable", func(dir string) []string {
			csv := filepath.Join(dir, "r.csv")
			if err := os.Symlink("/dev/full", csv); err != nil {
				panic(err)
			}
			return []string{"--requests", "4", "--csv", csv}
		}, lingerMsg, "r.csv", true},
		{"during the run", func(string) []string { return []string{"--duration", "1m"} }, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := startSim(t)
			dir := t.TempDir()
			t.Setenv("TMPDIR", t.TempDir()) // where an unwritable output is saved instead
			out := filepath.Join(dir, "r.json")
			logs := &recordingHandler{}
			args := append([]string{"run", "--concurrency", "2", "--target", target, "--linger", "1h", "--output", out}, tc.args(dir)...)
			c := parseLoadCommand(t, runCommand, args)

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- c.run(ctx, slog.New(logs)) }()
			if tc.cancelOn != "" {
				logs.wait(t, done, tc.cancelOn)
			} else {
				// The 1 min run is under way once a request has finished.
				base := "http://" + logs.wait(t, done, "Listening on")["address"]
				wctx, wcancel := context.WithTimeout(t.Context(), waitLimit)
				defer wcancel()
				testenv.Eventually(wctx, t, 10*time.Millisecond, "a finished request at "+base+"/metrics", func() (bool, string) {
					n := scrapeRequests(t, base+"/metrics")
					return n["success"] > 0, fmt.Sprintf("requests by outcome %v", n)
				})
			}
			cancel()
			var err error
			select {
			case err = <-done:
			case <-time.After(returnLimit):
				t.Fatalf("still running %v after Ctrl-C", returnLimit)
			}
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
			if _, ok := logs.find(lingerMsg); ok != tc.wantLinger {
				t.Errorf("lingered: %v, want %v", ok, tc.wantLinger)
			}
			d, rerr := report.Read(out)
			if rerr != nil {
				t.Fatalf("report: %v", rerr)
			}
			if d.Metadata.Interrupted != !tc.wantLinger || len(d.Runs) != 1 {
				t.Errorf("report: interrupted %v (want %v), %d runs", d.Metadata.Interrupted, !tc.wantLinger, len(d.Runs))
			}
		})
	}
}

// startSim serves a fixed-delay simulator for the test and returns its /v1 URL.
func startSim(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: 5 * time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 1, Seed: 1}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

// simHandler runs a simulator with cfg until the test ends and returns its
// handler, to serve over plain HTTP or TLS.
func simHandler(t *testing.T, cfg simserver.Config) http.Handler {
	t.Helper()
	// The tests that assert round prompt counts use one token per word;
	// tokens_test.go names the sub-word tokenizer.
	if cfg.Tokenizer == "" {
		cfg.Tokenizer = simserver.TokenizerWords
	}
	sim, err := simserver.New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go sim.Run(ctx)
	t.Cleanup(func() {
		sim.Close()
		cancel()
	})
	return sim.Handler()
}

// parseLoadCommand parses a run or sweep command line with the flags every
// test here shares.
func parseLoadCommand(t *testing.T, cmd func(*kingpin.Application) command, args []string) command {
	t.Helper()
	app := kingpin.New("t", "")
	c := cmd(app)
	args = append(args, "--web.listen-address=127.0.0.1:0", "--model", simserver.DefaultModel,
		"--input-tokens", "fixed:16", "--output-tokens", "fixed:8", "--ignore-eos", "--no-progress")
	if _, err := app.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}

// scrapeRequests returns gpulens_loadgen_requests_total by outcome.
func scrapeRequests(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scraping during the linger: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scraping during the linger: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	fam, ok := fams["gpulens_loadgen_requests_total"]
	if !ok {
		t.Fatal("no gpulens_loadgen_requests_total in the scrape")
	}
	out := map[string]float64{}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "outcome" {
				out[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	return out
}

// recordingHandler keeps every log record's message and attributes.
type recordingHandler struct {
	mu   sync.Mutex
	recs []loggedRecord
}

type loggedRecord struct {
	msg   string
	attrs map[string]string
}

func (h *recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *recordingHandler) Handle(_ context.Context, r slog.Record) error {
	rec := loggedRecord{msg: r.Message, attrs: map[string]string{}}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	h.mu.Lock()
	h.recs = append(h.recs, rec)
	h.mu.Unlock()
	return nil
}

func (h *recordingHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordingHandler) WithGroup(string) slog.Handler      { return h }

// find returns the attributes of the first record with message msg.
func (h *recordingHandler) find(msg string) (map[string]string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		if r.msg == msg {
			return r.attrs, true
		}
	}
	return nil, false
}

// count returns how many records were logged.
func (h *recordingHandler) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.recs)
}

// wait polls for a record with message msg; it fails the test if the
// command returns first.
func (h *recordingHandler) wait(t *testing.T, done <-chan error, msg string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitLimit)
	defer cancel()
	var attrs map[string]string
	testenv.Eventually(ctx, t, 10*time.Millisecond, fmt.Sprintf("a %q record", msg), func() (bool, string) {
		var ok bool
		if attrs, ok = h.find(msg); ok {
			return true, ""
		}
		select {
		case err := <-done:
			t.Fatalf("command returned (err %v) before logging %q", err, msg)
		default:
		}
		return false, fmt.Sprintf("%d records, none with that message", h.count())
	})
	return attrs
}
