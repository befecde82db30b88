package main

import (
	"context"
	"encoding/pem"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"net/http/httptest"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestTLSFlags: the --tls.* flags reach the campaign's settings, and
// their errors name the flags (the rules: loadgen/campaign's
// TestSettingsTLS).
func TestTLSFlags(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		args     []string
		wantErr  string
		wantNil  bool
		insecure bool
	}{
		{name: "none", wantNil: true},
		{name: "missing CA file", args: []string{"--tls.ca-file", filepath.Join(dir, "nope.pem")}, wantErr: "--tls.ca-file: open " + filepath.Join(dir, "nope.pem")},
		{name: "CA file without PEM", args: []string{"--tls.ca-file", notPEM}, wantErr: "--tls.ca-file " + notPEM + ": no PEM certificates"},
		{name: "insecure", args: []string{"--tls.insecure-skip-verify"}, insecure: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := kingpin.New("t", "")
			f := addLoadFlags(app.Command("run", ""))
			if _, err := app.Parse(append([]string{"run", "--target", "http://127.0.0.1:1/v1", "--model", "m"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			o, err := f.options()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			cfg := o.Client.TLS
			if (cfg == nil) != tc.wantNil {
				t.Fatalf("config %+v, want nil: %v", cfg, tc.wantNil)
			}
			if cfg != nil && cfg.InsecureSkipVerify != tc.insecure {
				t.Errorf("InsecureSkipVerify = %v", cfg.InsecureSkipVerify)
			}
		})
	}
}

// A run against an https simulator whose certificate only --tls.ca-file
// makes trusted: without the flag every request fails to connect; with it
// they all complete, with kernel receive timestamps on Linux.
func TestRunHTTPSWithCAFile(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.DiscardHandler)
	ctx := context.Background()
	srv := httptest.NewTLSServer(simHandler(t, simserver.Config{FixedTTFT: 5 * time.Millisecond, FixedITL: time.Millisecond,
		TokensPerChunk: 1, RoleChunk: true, Seed: 1}))
	defer srv.Close()
	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		extra     []string
		completed int
	}{
		{"untrusted certificate", nil, 0},
		{"trusted with --tls.ca-file", []string{"--tls.ca-file", ca}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
			app := kingpin.New("t", "")
			c := runCommand(app)
			args := append([]string{"run", "--web.listen-address=127.0.0.1:0", "--target", srv.URL + "/v1", "--model", simserver.DefaultModel,
				"--concurrency", "2", "--requests", "6", "--output-tokens", "fixed:4", "--ignore-eos", "--output", out, "--no-progress"}, tc.extra...)
			if _, err := app.Parse(args); err != nil {
				t.Fatal(err)
			}
			_ = c.run(ctx, logger) // a run whose requests all fail still writes its report
			d, err := report.Read(out)
			if err != nil {
				t.Fatal(err)
			}
			s := d.Runs[0].Summary
			if s.RequestsCompleted != tc.completed || s.RequestsCompleted+s.RequestsFailed != 6 {
				t.Fatalf("completed %d failed %d (%v), want %d completed", s.RequestsCompleted, s.RequestsFailed, s.Errors, tc.completed)
			}
			if tc.completed == 0 && s.Errors["connect"] != 6 {
				t.Errorf("errors %v, want 6 connect errors", s.Errors)
			}
			if tc.completed > 0 && d.Runs[0].Settings.Timestamps != "kernel" {
				t.Errorf("settings timestamps %q", d.Runs[0].Settings.Timestamps)
			}
			// The first segments after the kernel turns timestamping on
			// may carry none (internal/rxstamp); the rest do.
			if tc.completed > 0 && runtime.GOOS == "linux" && s.KernelTimestamped == 0 {
				t.Errorf("no request had kernel timestamps through TLS")
			}
		})
	}
}
