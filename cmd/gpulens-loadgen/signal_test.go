//go:build unix

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/loadgen/report"
)

// exitCode is a finished binary's exit status (-1: it did not exit).
func exitCode(p *testenv.Process) int {
	var ee *exec.ExitError
	if err := p.Err(); err == nil {
		return 0
	} else if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

func fifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "report.fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	return p
}

// TestFIFOOutputNoReader: `run --output FIFO` with nobody reading the FIFO
// ends within seconds (report.ReaderWait), exit status 1, naming the flag
// and where the report was saved instead.
func TestFIFOOutputNoReader(t *testing.T) {
	// Parallel: it idles out the reader wait, and its only bound on time is
	// a lower one (load only lengthens it).
	t.Parallel()
	bin := testenv.Binary(t, "gpulens-loadgen")
	out := fifo(t)
	srv := &recordingServer{}
	start := time.Now()
	p := testenv.Run(t, bin, "run", "--target", srv.start(t), "--model", "m", "--concurrency", "1", "--requests", "2",
		"--web.listen-address=127.0.0.1:0", "--no-progress", "--no-server-info", "--input-tokens.calibrate=off", "--input-tokens", "fixed:6", "--output-tokens", "fixed:4",
		"--output", out)
	select {
	case <-p.Done():
	case <-time.After(report.ReaderWait + 20*time.Second):
		t.Fatalf("still running %v after the start with an unread FIFO output", time.Since(start))
	}
	took := time.Since(start)
	if c := exitCode(p); c != exitError {
		t.Errorf("exit status %d, want %d", c, exitError)
	}
	log := p.Log()
	for _, want := range []string{"--output: writing " + out, "is a FIFO that no reader opened within " + report.ReaderWait.String(), "saved to "} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q", want)
		}
	}
	if took < report.ReaderWait {
		t.Errorf("ended after %v, before the reader wait %v", took, report.ReaderWait)
	}
	if n := srv.n.Load(); n != 2 {
		t.Errorf("%d requests, want 2 (the run is measured before the output is written)", n)
	}
	// The saved copy is a readable report.
	i := strings.Index(log, "saved to ")
	saved := strings.Fields(log[i+len("saved to "):])[0]
	saved = strings.Trim(saved, `"\`)
	defer os.Remove(saved)
	if b, err := os.ReadFile(saved); err != nil || !strings.Contains(string(b), `"runs"`) {
		t.Errorf("saved copy %s: %v %.100q", saved, err, b)
	}
}

// TestSecondSignalExitsAtOnce: the first SIGINT or SIGTERM starts the
// graceful stop (here: stuck waiting for a reader of the FIFO output);
// the second ends the process at once with 128 + the signal's number.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	// Serial: the graceful stop's reader wait must not run out before the
	// second signal.
	bin := testenv.Binary(t, "gpulens-loadgen")
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			out := fifo(t)
			srv := &recordingServer{hang: true, arrived: make(chan struct{}, 4)}
			p := testenv.Run(t, bin, "run", "--target", srv.start(t), "--model", "m", "--concurrency", "1", "--duration", "60s",
				"--web.listen-address=127.0.0.1:0", "--no-progress", "--no-server-info", "--input-tokens.calibrate=off", "--input-tokens", "fixed:6", "--output-tokens", "fixed:4",
				"--output", out)
			select {
			case <-srv.arrived:
			case <-p.Done():
				t.Fatalf("ended before the first request: %v", p.Err())
			case <-time.After(30 * time.Second):
				t.Fatal("no request arrived")
			}
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			// The graceful stop: the run ends, the report waits for the
			// FIFO's reader.
			if !testenv.Poll(t.Context(), 20*time.Millisecond, func() bool { return strings.Contains(p.Log(), "send the signal again to exit at once") }) {
				t.Fatal("no graceful stop logged")
			}
			// Not a wait for a condition: the program must stay up for
			// this whole window (it must not end before the reader came).
			select {
			case <-p.Done():
				t.Fatalf("ended %v before the second signal; the graceful stop should still wait for the FIFO's reader", p.Err())
			case <-time.After(500 * time.Millisecond):
			}
			if err := p.Signal(sig); err != nil {
				t.Fatal(err)
			}
			// "At once" is checked causally, not on the wall clock (a
			// loaded machine stretches any bound): the process ended
			// before the graceful stop's reader wait did, which would have
			// logged the missing reader and saved the report elsewhere.
			// The timeout only stops a broken test from hanging.
			select {
			case <-p.Done():
			case <-time.After(report.ReaderWait + 20*time.Second):
				t.Fatal("still running long after the second signal")
			}
			if c, want := exitCode(p), exitSignalBase+int(sig); c != want {
				t.Errorf("exit status %d, want %d", c, want)
			}
			log := p.Log()
			if !strings.Contains(log, "second signal: exiting at once") {
				t.Error("the forced exit is not logged")
			}
			for _, graceful := range []string{"is a FIFO that no reader opened within", "saved to "} {
				if strings.Contains(log, graceful) {
					t.Errorf("log has %q: the process waited out the graceful stop instead of exiting at once", graceful)
				}
			}
		})
	}
}
