package campaign

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// simTarget serves a simulator of model and returns its API base URL.
func simTarget(t *testing.T, model string) string {
	t.Helper()
	s, err := simserver.New(simserver.Config{FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, Model: model, Seed: 1}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(func() {
		srv.Close()
		cancel()
		<-done
	})
	return srv.URL + "/v1"
}

// TestManifest: the manifest has the host, the labels, the settings hash
// (equal for the same settings whatever the labels, target or nonce;
// different for another seed) and, when asked for, what the server said.
func TestManifest(t *testing.T) {
	base := simTarget(t, "org/llama")
	other := simTarget(t, "org/llama")
	opts := func(target string, seed int64, labels map[string]string, ask bool) Options {
		in, _ := workload.ParseLength("in", "fixed:8")
		out, _ := workload.ParseLength("out", "fixed:4")
		return Options{
			Client:   client.Config{BaseURL: target, Endpoint: client.EndpointChat, Model: "org/llama", Timeout: time.Minute},
			Workload: workload.Config{Seed: seed, Input: in, Output: out}, Prompts: report.PromptsDistinct,
			Run: runner.Config{Requests: 2}, Prices: report.CostSettings{GPUs: 1}, Labels: labels, ServerInfo: ask, ServerInfoTimeout: time.Minute,
		}
	}
	plan := Plan{Command: "sweep", Mode: report.ModeClosed, Levels: []float64{1, 2}, Repeats: 1}
	a := run(t, plan, opts(base, 1, map[string]string{"image": "sha256:1"}, true), nil).Document.Metadata.Manifest
	b := run(t, plan, opts(other, 1, nil, false), nil).Document.Metadata.Manifest
	c := run(t, plan, opts(base, 2, nil, false), nil).Document.Metadata.Manifest
	if a == nil || b == nil || c == nil {
		t.Fatal("no manifest")
	}
	if len(a.SettingsHash) != 64 || a.SettingsHash != b.SettingsHash || a.SettingsHash == c.SettingsHash {
		t.Errorf("settings hashes %s, %s (same settings), %s (another seed)", a.SettingsHash, b.SettingsHash, c.SettingsHash)
	}
	if a.ServerVersion != simserver.Version || a.ModelRevision != simserver.ModelRevision("org/llama") || len(a.Server) != 8 {
		t.Errorf("server %q revision %q, %d facts", a.ServerVersion, a.ModelRevision, len(a.Server))
	}
	for _, f := range a.Server {
		if f.Status != 200 || len(f.Fields) == 0 {
			t.Errorf("fact %+v", f)
		}
	}
	if b.Server != nil || b.ServerVersion != "" || b.Labels != nil {
		t.Errorf("not asked, no labels: %+v", b)
	}
	if a.Labels["image"] != "sha256:1" || a.Host.OS == "" || a.Host.CPUs < 1 {
		t.Errorf("labels %v host %+v", a.Labels, a.Host)
	}
	// An interrupted campaign does not ask the server.
	cx, err := New(plan, opts(base, 1, nil, true))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := cx.Run(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if m := res.Document.Metadata.Manifest; m == nil || m.Server != nil || m.SettingsHash != "" {
		t.Errorf("interrupted before any run: manifest %+v", m)
	}
}
