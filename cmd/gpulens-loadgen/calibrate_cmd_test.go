package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestRunEndsAgainstSilentServer is issue 29's regression: against a
// server that accepts connections and never answers, `run --duration 1s
// --grace-period 1s` ends (it waited forever: ten seconds on /tokenize,
// then each usage request up to --timeout, 300 s) within the calibration's
// default limit (duration + grace), with exit status 3, an error naming
// what did not answer, and a report whose calibration says it failed.
// The minute bound is far above the two seconds it takes.
func TestRunEndsAgainstSilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(done); ln.Close(); wg.Wait() }()
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
	out := filepath.Join(t.TempDir(), "r.json")
	app := kingpin.New("t", "")
	c := runCommand(app)
	if _, err := app.Parse([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", "http://" + ln.Addr().String() + "/v1", "--model", "m",
		"--concurrency", "1", "--duration", "1s", "--grace-period", "1s", "--output", out, "--no-progress"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var log bytes.Buffer
	if err := c.run(ctx, slog.New(slog.NewTextHandler(&log, nil))); err != nil {
		t.Fatal(err)
	}
	if ctx.Err() != nil {
		t.Fatal("still running after a minute")
	}
	if c.status() != exitAllFailed {
		t.Errorf("exit status %d, want %d", c.status(), exitAllFailed)
	}
	for _, w := range []string{"no run started: the server answered no calibration request in time", "POST http://" + ln.Addr().String() + "/tokenize",
		"POST http://" + ln.Addr().String() + "/v1/chat/completions", "time limit of 2s"} {
		if !strings.Contains(log.String(), w) {
			t.Errorf("log does not say %q:\n%s", w, log.String())
		}
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if cal := d.Metadata.TokenCalibration; cal == nil || !cal.TimedOut || cal.Error == "" || len(d.Runs) != 0 {
		t.Errorf("calibration %+v, %d runs", cal, len(d.Runs))
	}
}
