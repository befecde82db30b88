package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestRunInterruptedWritesReport(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Ctrl-C when the 8th request arrives: with 2 in flight at most, 6 have
	// completed by then, however slowly the machine runs them.
	var received atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if received.Add(1) == 8 {
			cancel()
		}
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		time.Sleep(5 * time.Millisecond) // not a wait: the fake server's answer time
		io.WriteString(w, `data: {"model":"served","choices":[{"delta":{"content":"hi"}}]}`+"\n\n"+
			`data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "r.json")
	app := kingpin.New("t", "")
	c := runCommand(app)
	_, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", "m", "--input-tokens.calibrate=off",
		"--concurrency", "2", "--duration", "1m", "--output", out, "--csv", filepath.Join(dir, "r.csv"),
		"--save-requests", filepath.Join(dir, "r.jsonl"), "--cost.gpu-hourly-usd", "0.6", "--seed", "5"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.run(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Metadata.Interrupted || d.Metadata.ServerModel != "served" || d.Metadata.Seed != 5 || len(d.Runs) != 1 {
		t.Fatalf("metadata = %+v, %d runs", d.Metadata, len(d.Runs))
	}
	s := d.Runs[0].Summary
	if s.RequestsCompleted < 6 || s.RequestsFailed != 0 || s.OutputTokensTotal != int64(s.RequestsCompleted) || s.Cost.TotalUSD <= 0 {
		t.Fatalf("summary = %+v", s)
	}
	if d.Runs[0].Settings.Concurrency != 2 || d.Runs[0].Settings.Cost.GPUHourlyUSD != 0.6 {
		t.Fatalf("settings = %+v", d.Runs[0].Settings)
	}
}

func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--slo", "ttft=fast"}, "--slo"},
		{[]string{"--input-tokens", "zipf:3"}, "--input-tokens"},
		{[]string{"--linger=-1s"}, "--linger"},
		// The libraries' errors name their options; the CLI's name the flags.
		{[]string{"--shard", "4/2"}, `--shard "4/2": want i/N with 0 ≤ i < N`},
		{[]string{"--cost.gpus", "0"}, "--cost.gpus must be at least 1, got 0"},
		{[]string{"--timeout", "0s"}, "--timeout must be positive, got 0s"},
		{[]string{"--endpoint", "chat", "--warmup=-1s"}, "--duration, --requests, --warmup and --ramp-up must not be negative"},
		{[]string{"--max-tokens=-1"}, "--max-tokens must not be negative, got -1"},
		{[]string{"--prompt-nonce", "a b"}, `--prompt-nonce: prompt nonce "a b": ' ' is not a letter, digit, '-' or '_'`},
	} {
		app := kingpin.New("t", "")
		c := runCommand(app)
		args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--concurrency", "1", "--requests", "1"}, tc.args...)
		if _, err := app.Parse(args); err != nil {
			t.Fatal(err)
		}
		err := c.run(context.Background(), slog.New(slog.DiscardHandler))
		if err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want mention of %s", tc.args, err, tc.want)
		}
		if exitStatus(c, err, slog.New(slog.DiscardHandler)) != exitUsage {
			t.Errorf("%v: exit status %d, want %d", tc.args, exitStatus(c, err, slog.New(slog.DiscardHandler)), exitUsage)
		}
	}
	// Open loop: the schedule's options.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--arrival", "gamma", "--burstiness", "0"}, "--burstiness must be positive for gamma arrivals, got 0"},
		{[]string{"--max-concurrency=-1"}, "--max-concurrency must not be negative, got -1"},
	} {
		app := kingpin.New("t", "")
		c := runCommand(app)
		args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--rate", "2", "--requests", "1"}, tc.args...)
		if _, err := app.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err == nil || !contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %s", tc.args, err, tc.want)
		}
	}
	// A sweep's repeats.
	app0 := kingpin.New("t", "")
	sw := sweepCommand(app0)
	if _, err := app0.Parse([]string{"sweep", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m",
		"--concurrency", "1,2", "--requests", "1", "--repeats", "0"}); err != nil {
		t.Fatal(err)
	}
	if err := sw.run(context.Background(), slog.New(slog.DiscardHandler)); err == nil || err.Error() != "--repeats must be at least 1, got 0" ||
		exitStatus(sw, err, slog.New(slog.DiscardHandler)) != exitUsage {
		t.Errorf("--repeats 0: err = %v, want --repeats must be at least 1, got 0 (exit status %d)", err, exitUsage)
	}
	// Neither a duration nor a number of requests.
	app := kingpin.New("t", "")
	c := runCommand(app)
	if _, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://127.0.0.1:1/v1", "--model", "m", "--rate", "2"}); err != nil {
		t.Fatal(err)
	}
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err == nil || err.Error() != "set --duration or --requests" {
		t.Errorf("err = %v, want set --duration or --requests", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
