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

	"github.com/gpulens/gpulens/loadgen/simserver"
)

func TestSimFlags(t *testing.T) {
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

// TestServeSimGracefulShutdown cancels the context while a stream is in
// progress: the stream still completes, then serveSim returns.
func TestServeSimGracefulShutdown(t *testing.T) {
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
