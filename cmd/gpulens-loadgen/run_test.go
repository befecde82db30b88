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
		time.Sleep(5 * time.Millisecond)
		io.WriteString(w, `data: {"model":"served","choices":[{"delta":{"content":"hi"}}]}`+"\n\n"+
			`data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1}}`+"\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	dir := t.TempDir()
	out := filepath.Join(dir, "r.json")
	app := kingpin.New("t", "")
	c := runCommand(app)
	_, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", "m",
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
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--slo", "ttft=fast"}, "--slo"},
		{[]string{"--input-tokens", "zipf:3"}, "--input-tokens"},
		{[]string{"--shard", "4/2"}, "--shard"},
		{[]string{"--cost.gpus", "0"}, "--cost.gpus"},
		{[]string{"--linger=-1s"}, "--linger"},
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
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
