package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/report"
)

// TestEvaluationCampaign: a sweep against the simulator with an exporter,
// a dataset with ids and references, labels and saved responses: every
// run has its GPU side, the manifest says what the server is, and every
// measured request's answer is saved (through a symbolic link, which stays
// one).
func TestEvaluationCampaign(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(simHandler(t, simserver.Config{FixedTTFT: 2 * time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 1, Seed: 1}))
	defer srv.Close()
	// GPU 0's energy counter: +30 J in the first run, +12 J in the second.
	scrapes := []float64{1000, 1030, 1030, 1042}
	var n atomic.Int64
	exporter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		i := int(n.Add(1) - 1)
		if i >= len(scrapes) {
			http.Error(w, "gone", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, "# TYPE gpulens_gpu_info gauge\ngpulens_gpu_info{gpu=\"0\",name=\"NVIDIA H100\",uuid=\"GPU-0\"} 1\n"+
			"# TYPE gpulens_gpu_memory_used_bytes gauge\ngpulens_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0\"} %d\n"+
			"# TYPE gpulens_gpu_energy_joules_total counter\ngpulens_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-0\"} %g\n", (i+1)<<30, scrapes[i])
	}))
	defer exporter.Close()

	dir := t.TempDir()
	dataset := filepath.Join(dir, "qa.jsonl")
	if err := os.WriteFile(dataset, []byte(`{"prompt":"capital of France","id":"q1","reference":"Paris"}`+"\n"+
		`{"prompt":"two plus two","id":"q2","expected":4}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, target, link := filepath.Join(dir, "r.json"), filepath.Join(dir, "kept.jsonl"), filepath.Join(dir, "responses.jsonl")
	if err := os.WriteFile(target, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Skipf("no symbolic links: %v", err)
	}
	c := parseLoadCommand(t, sweepCommand, []string{"sweep", "--target", srv.URL + "/v1", "--concurrency", "1,2", "--requests", "3",
		"--dataset", dataset, "--exporter.url", exporter.URL + "/metrics", "--exporter.poll-interval", "1h", "--exporter.gpus", "GPU-0",
		"--label", "image=vllm@sha256:abc", "--label", "eval.commit=0123abc", "--server-info.timeout", "1m", "--save-responses", link, "--save-responses.prompts", "--output", out})
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	// 3 requests × 8 output tokens per run.
	for i, want := range []struct{ energy, perJoule, peak float64 }{{30, 24.0 / 30, 2 << 30}, {12, 2, 4 << 30}} {
		g := d.Runs[i].GPU
		if g == nil || g.EnergyJoules != want.energy || g.OutputTokensPerJoule != want.perJoule || g.EnergyPerRequestJoules != want.energy/3 ||
			g.PeakMemoryUsedBytes != want.peak || g.Samples != 2 {
			t.Errorf("run %s: GPU side %+v, want %+v", d.Runs[i].Name, g, want)
		}
	}
	m := d.Metadata.Manifest
	if m == nil || m.ServerVersion != simserver.Version || m.ModelRevision != simserver.ModelRevision(simserver.DefaultModel) || len(m.Server) != 8 ||
		m.Labels["image"] != "vllm@sha256:abc" || m.Labels["eval.commit"] != "0123abc" || len(m.SettingsHash) != 64 {
		t.Errorf("manifest %+v", m)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("%s is no longer a symbolic link: %v", link, err)
	}
	f, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := report.ReadResponses(f)
	if err != nil || len(rs) != 6 {
		t.Fatalf("%d responses (%v), want 6", len(rs), err)
	}
	refs := map[string]string{"q1": `"Paris"`, "q2": "4"}
	texts := map[string]string{"q1": "capital of France", "q2": "two plus two"}
	for _, r := range rs {
		sum := sha256.Sum256([]byte(r.Prompt))
		if string(r.Reference) != refs[r.ID] || !strings.HasSuffix(r.Prompt, " "+texts[r.ID]) || hex.EncodeToString(sum[:]) != r.PromptSHA256 ||
			r.Response == "" || r.FinishReason != "length" || r.OutputTokens != 8 || r.ErrorClass != "" || r.Repeat != 1 ||
			!strings.HasPrefix(r.Run, "concurrency=") {
			t.Errorf("response %+v", r)
		}
	}
}

// TestEvaluationFlagErrors: bad evaluation flags are refused before the
// first request, naming the flag, with exit status 2.
func TestEvaluationFlagErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	same := filepath.Join(dir, "same.jsonl")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--label", "novalue"}, `--label "novalue": want key=value`},
		{[]string{"--label", "a=1", "--label", "a=2"}, `--label "a=2": key "a" given twice`},
		{[]string{"--exporter.gpus", "0"}, "--exporter.gpus needs --exporter.url"},
		{[]string{"--exporter.url", "http://127.0.0.1:1/metrics", "--exporter.poll-interval", "1ms"}, "--exporter.poll-interval must be at least 100ms, got 1ms"},
		{[]string{"--exporter.url", "localhost:9842"}, `--exporter.url "localhost:9842": must be an http:// or https:// URL`},
		{[]string{"--save-responses.prompts"}, "--save-responses.prompts needs --save-responses FILE"},
		{[]string{"--server-info.timeout=-1s"}, "--server-info.timeout must not be negative, got -1s"},
		{[]string{"--save-responses", filepath.Join(dir, "missing", "r.jsonl")}, "--save-responses " + filepath.Join(dir, "missing", "r.jsonl") + ": directory"},
		{[]string{"--save-responses", dir}, "--save-responses " + dir + ": " + dir + " is a directory"},
		{[]string{"--save-requests", same, "--save-responses", same}, "--save-requests and --save-responses both write " + same},
	} {
		srv := &recordingServer{}
		c := parseRun(t, runCommand, srv.start(t), append([]string{"run", "--concurrency", "1", "--requests", "2"}, tc.args...)...)
		err := c.run(context.Background(), slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
			continue
		}
		if got := exitStatus(c, err, slog.New(slog.DiscardHandler)); got != exitUsage {
			t.Errorf("%v: exit status %d, want %d", tc.args, got, exitUsage)
		}
		if n := srv.n.Load(); n != 0 {
			t.Errorf("%v: %d requests sent before the error", tc.args, n)
		}
	}
}

// TestNoServerInfo: --no-server-info asks the server nothing beyond the
// requests.
func TestNoServerInfo(t *testing.T) {
	t.Parallel()
	srv := &recordingServer{}
	out := filepath.Join(t.TempDir(), "r.json")
	c := parseRun(t, runCommand, srv.start(t), "run", "--concurrency", "1", "--requests", "2", "--no-server-info", "--output", out)
	if err := c.run(context.Background(), slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	d, err := report.Read(out)
	if err != nil {
		t.Fatal(err)
	}
	if n := srv.n.Load(); n != 2 || d.Metadata.Manifest == nil || d.Metadata.Manifest.Server != nil || d.Metadata.Manifest.SettingsHash == "" {
		t.Errorf("%d requests, manifest %+v; want the 2 requests only", n, d.Metadata.Manifest)
	}
}
