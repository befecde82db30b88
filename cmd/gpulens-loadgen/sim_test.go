package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
)

func TestSimFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want func(c *simserver.Config)
	}{
		{"defaults", nil, func(*simserver.Config) {}},
		{"fixed mode and faults", []string{"--sim.ttft=50ms", "--sim.itl=5ms", "--sim.tokens-per-chunk=4", "--no-sim.role-chunk",
			"--sim.continuous-usage", "--sim.error-rate=0.1", "--sim.disconnect-rate=0.2", "--sim.stall-rate=0.3", "--sim.stall-duration=2s",
			"--sim.seed=42", "--sim.model=llama", "--sim.max-batch=0", "--sim.max-queue=10"}, func(c *simserver.Config) {
			c.FixedTTFT, c.FixedITL, c.TokensPerChunk, c.RoleChunk, c.ContinuousUsage = 50*time.Millisecond, 5*time.Millisecond, 4, false, true
			c.ErrorRate, c.DisconnectRate, c.StallRate, c.StallDuration = 0.1, 0.2, 0.3, 2*time.Second
			c.Seed, c.Model, c.MaxBatch, c.MaxQueue = 42, "llama", 0, 10
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := kingpin.New("test", "")
			cmd := app.Command("sim", "")
			f := addSimFlags(cmd)
			if _, err := app.Parse(append([]string{"sim"}, tc.args...)); err != nil {
				t.Fatal(err)
			}
			want := simserver.DefaultConfig()
			tc.want(&want)
			if f.cfg != want {
				t.Errorf("config\n got %+v\nwant %+v", f.cfg, want)
			}
			if f.listenAddress != "127.0.0.1:8000" {
				t.Errorf("listen address %q", f.listenAddress)
			}
		})
	}
}

// TestSimConfigErrors: the simulator's configuration errors name its
// flags.
func TestSimConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--sim.jitter=2"}, "invalid simulator config: --sim.jitter must be in [0, 1), got 2"},
		{[]string{"--sim.ttft=-1ms"}, "invalid simulator config: --sim.ttft must not be negative, got -1ms"},
		{[]string{"--sim.decode-base=0", "--sim.decode-per-seq=0"},
			"invalid simulator config: --sim.decode-base and --sim.decode-per-seq are both zero: set one, or use fixed mode (--sim.ttft/--sim.itl)"},
		{[]string{"--sim.error-rate=2", "--sim.max-queue=-1"},
			"invalid simulator config: --sim.max-queue must not be negative, got -1\n--sim.error-rate must be a probability in [0, 1], got 2"},
	} {
		app := kingpin.New("t", "")
		c := simCommand(app)
		if _, err := app.Parse(append([]string{"sim", "--sim.listen-address=127.0.0.1:0"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err == nil || err.Error() != tc.want {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestServeSimGracefulShutdown cancels the context while a stream is in
// progress: the stream still completes, then serveSim returns.
func TestServeSimGracefulShutdown(t *testing.T) {
	t.Parallel()
	s, err := simserver.New(simserver.Config{FixedTTFT: 10 * time.Millisecond, FixedITL: 10 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The grace period and the wait below only stop a broken test from
	// hanging: the stream takes about 0.2 s.
	go func() { done <- serveSim(ctx, ln, s, time.Minute, slog.New(slog.DiscardHandler)) }()
	url := "http://" + ln.Addr().String()
	resp, err := http.Post(url+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"gpulens-sim","prompt":"x","max_tokens":20,"ignore_eos":true,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	cancel()
	body, err := io.ReadAll(resp.Body)
	if err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Errorf("stream during shutdown: err %v, body ends %q", err, body[max(0, len(body)-20):])
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serveSim: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("serveSim did not return after shutdown")
	}
	if _, err := http.Get(url + "/health"); err == nil {
		t.Error("server still accepting after shutdown")
	}
}
