package campaign

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// server answers every request with two content chunks of two tokens
// each and their usage (or HTTP 500 when fail is set), and records the
// prompts it was sent.
type server struct {
	fail    bool
	mu      sync.Mutex
	prompts []string
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Messages []struct{ Content string } `json:"messages"`
	}
	b, _ := io.ReadAll(r.Body)
	_ = json.Unmarshal(b, &body)
	s.mu.Lock()
	s.prompts = append(s.prompts, body.Messages[0].Content)
	s.mu.Unlock()
	if s.fail {
		http.Error(w, `{"error":{"message":"down"}}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	for _, c := range []string{"a b", "c d"} {
		fmt.Fprintf(w, "data: {\"model\":\"served\",\"choices\":[{\"delta\":{\"content\":%q}}]}\n\n", c)
		w.(http.Flusher).Flush()
	}
	io.WriteString(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":8,\"completion_tokens\":4}}\n\ndata: [DONE]\n\n")
}

func (s *server) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.prompts)
}

// options are the options of a campaign against srv.
func options(t *testing.T, srv http.Handler) Options {
	t.Helper()
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	in, _ := workload.ParseLength("in", "fixed:8")
	out, _ := workload.ParseLength("out", "fixed:4")
	return Options{
		Client:   client.Config{BaseURL: strings.Replace(hs.URL, "http://", "http://user:secret@", 1) + "/v1", Endpoint: client.EndpointChat, Model: "m", Timeout: time.Minute},
		Workload: workload.Config{Seed: 5, Input: in, Output: out},
		Prompts:  report.PromptsDistinct,
		// The test servers count no tokens: calibrate_test.go calibrates.
		Calibrate: CalibrateOff,
		Run:       runner.Config{Requests: 3},
		Prices:    report.CostSettings{GPUHourlyUSD: 1, GPUs: 1},
		Scenario:  "test",
	}
}

func run(t *testing.T, p Plan, o Options, obs Observer) *Result {
	t.Helper()
	c, err := New(p, o)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Run(context.Background(), obs)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// watcher is an Observer that counts.
type watcher struct {
	mu                      sync.Mutex
	runs                    []string
	started, finished, warm int
}

func (w *watcher) Started() { w.mu.Lock(); w.started++; w.mu.Unlock() }
func (w *watcher) Finished(_ *report.Record, warm bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.finished++
	if warm {
		w.warm++
	}
}
func (w *watcher) RunStarted(name string) { w.runs = append(w.runs, "start "+name) }
func (w *watcher) RunEnded(name string)   { w.runs = append(w.runs, "end "+name) }

// TestSweep: levels × repeats run in order, are named, summarised and
// aggregated per level; every run sends prompts of its own; the records
// come back named; the metadata says what ran against what.
func TestSweep(t *testing.T) {
	srv := &server{}
	o := options(t, srv)
	o.KeepRecords = true
	w := &watcher{}
	res := run(t, Plan{Command: "sweep", Mode: report.ModeClosed, Levels: []float64{1, 2}, Repeats: 2}, o, w)
	d := res.Document

	var names []string
	for _, r := range d.Runs {
		names = append(names, r.Name)
		s := r.Summary
		if r.Aggregate {
			if s.RequestsCompleted != 6 || s.Stats["ttft_seconds.p99"].N != 2 || r.Repeat != 0 {
				t.Errorf("%s: %d completed, stats %+v", r.Name, s.RequestsCompleted, s.Stats["ttft_seconds.p99"])
			}
			continue
		}
		if s.RequestsCompleted != 3 || s.RequestsFailed != 0 || s.OutputTokensTotal != 12 || r.Settings.Concurrency != int(r.Level) ||
			r.Settings.Prompts != report.PromptsDistinct || r.Settings.InputTokens != "fixed:8" || r.Settings.Timestamps != "kernel" ||
			r.Settings.Cost.GPUHourlyUSD != 1 || r.Requests != nil {
			t.Errorf("%s: summary %+v settings %+v, %d embedded records", r.Name, s, r.Settings, len(r.Requests))
		}
	}
	want := "concurrency=1 repeat=1,concurrency=1 repeat=2,concurrency=1 (mean of 2),concurrency=2 repeat=1,concurrency=2 repeat=2,concurrency=2 (mean of 2)"
	if got := strings.Join(names, ","); got != want {
		t.Errorf("runs %s\nwant %s", got, want)
	}
	if res.Completed != 12 || res.Failed != 0 || len(res.Records) != 12 {
		t.Errorf("completed %d failed %d, %d records; want 12, 0, 12", res.Completed, res.Failed, len(res.Records))
	}
	perRun := map[string]int{}
	for _, r := range res.Records {
		perRun[fmt.Sprintf("%s|%g|%d", r.Run, r.Level, r.Repeat)]++
	}
	if perRun["concurrency=2 repeat=1|2|1"] != 3 || len(perRun) != 4 {
		t.Errorf("records per run %v", perRun)
	}
	// Distinct prompts: twelve different ones, the three of a run led by
	// a tag of their own.
	prompts := srv.seen()
	tags := map[string]int{}
	for _, p := range prompts {
		tag, _, _ := strings.Cut(p, "-")
		tags[tag]++
	}
	if len(prompts) != 12 || len(slices.Compact(slices.Sorted(slices.Values(prompts)))) != 12 || len(tags) != 4 {
		t.Errorf("%d prompts, tags %v; want 12 different, 4 tags of 3", len(prompts), tags)
	}
	m := d.Metadata
	hex16 := regexp.MustCompile(`^[0-9a-f]{16}$`)
	if m.Command != "sweep" || m.Tool != "gpulens-loadgen" || !hex16.MatchString(m.RunID) || !hex16.MatchString(m.PromptNonce) ||
		strings.Contains(m.Target, "secret") || m.ServerModel != "served" || m.Model != "m" || m.Scenario != "test" || m.Seed != 5 ||
		m.Interrupted || m.Finished.Before(m.Started) || m.Shards != nil {
		t.Errorf("metadata %+v", m)
	}
	wantRuns := []string{"start concurrency=1 repeat=1", "end concurrency=1 repeat=1", "start concurrency=1 repeat=2", "end concurrency=1 repeat=2",
		"start concurrency=2 repeat=1", "end concurrency=2 repeat=1", "start concurrency=2 repeat=2", "end concurrency=2 repeat=2"}
	if !slices.Equal(w.runs, wantRuns) || w.started != 12 || w.finished != 12 || w.warm != 0 {
		t.Errorf("observer saw runs %q, %d started, %d finished", w.runs, w.started, w.finished)
	}
}

// TestReusePrompts: with reuse and no nonce every run sends the seed's
// prompts, and no nonce is recorded.
func TestReusePrompts(t *testing.T) {
	srv := &server{}
	o := options(t, srv)
	o.Prompts = report.PromptsReuse
	res := run(t, Plan{Command: "sweep", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 2}, o, nil)
	p := srv.seen()
	if len(p) != 6 || !slices.Equal(p[:3], p[3:]) || res.Document.Metadata.PromptNonce != "" || !strings.HasPrefix(p[0], "0 ") {
		t.Errorf("prompts %q, nonce %q; want the seed's three twice", p, res.Document.Metadata.PromptNonce)
	}
}

// TestShard: a shard of an open-loop schedule sends its part, at its
// part of the rate, and embeds its records for a merge.
func TestShard(t *testing.T) {
	o := options(t, &server{})
	o.Run.Shard = runner.Shard{Index: 1, Count: 2}
	o.Run.Schedule.Arrival = runner.Constant
	res := run(t, Plan{Command: "run", Mode: report.ModeOpen, Levels: []float64{200}, Repeats: 1}, o, nil)
	r := res.Document.Runs[0]
	var idx []int
	for _, rec := range r.Requests {
		idx = append(idx, rec.Index)
	}
	slices.Sort(idx)
	if r.Name != "rate=200" || r.Settings.Shard != "1/2" || r.Settings.Rate != 200 || r.Settings.Arrival != runner.Constant ||
		r.Summary.TargetRatePerSecond != 100 || !slices.Equal(idx, []int{1, 3, 5}) ||
		!slices.Equal(res.Document.Metadata.Shards, []string{"1/2"}) {
		t.Errorf("run %s settings %+v target %v records %v shards %v", r.Name, r.Settings, r.Summary.TargetRatePerSecond, idx,
			res.Document.Metadata.Shards)
	}
}

// TestAllFailedAndInterrupted: the counts tell a campaign whose every
// request failed; a cancelled context stops it before its next run.
func TestAllFailedAndInterrupted(t *testing.T) {
	o := options(t, &server{fail: true})
	res := run(t, Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o, nil)
	if s := res.Document.Runs[0].Summary; res.Completed != 0 || res.Failed != 3 || s.Errors[report.ErrHTTP5xx] != 3 {
		t.Errorf("completed %d failed %d errors %v; want 0, 3, 3 http_5xx", res.Completed, res.Failed, s.Errors)
	}
	c, err := New(Plan{Command: "sweep", Mode: report.ModeClosed, Levels: []float64{1, 2}, Repeats: 1}, o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = c.Run(ctx, nil)
	if err != nil || !res.Document.Metadata.Interrupted || len(res.Document.Runs) != 0 {
		t.Errorf("cancelled: err %v, interrupted %v, %d runs", err, res.Document.Metadata.Interrupted, len(res.Document.Runs))
	}
}

// TestNewRejects: bad plans and options are refused before anything is
// sent, naming the option.
func TestNewRejects(t *testing.T) {
	closed := Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}
	for _, tc := range []struct {
		name string
		plan Plan
		mod  func(*Options)
		want string
	}{
		{"repeats", Plan{Mode: report.ModeClosed, Levels: []float64{1}}, nil, "Repeats must be at least 1, got 0"},
		{"no levels", Plan{Mode: report.ModeClosed, Repeats: 1}, nil, "Levels: no levels given"},
		{"users", Plan{Mode: report.ModeClosed, Levels: []float64{2, 0.5}, Repeats: 1}, nil, "Concurrency must be at least 1, got 0"},
		{"rate", Plan{Mode: report.ModeOpen, Levels: []float64{-1}, Repeats: 1}, nil, "Rate must be a positive number, got -1"},
		{"mode", Plan{Mode: "sideways", Levels: []float64{1}, Repeats: 1}, nil, `Mode "sideways": want "closed" (set Concurrency) or "open" (set Rate)`},
		{"prices", closed, func(o *Options) { o.Prices.GPUs = 0 }, "GPUs must be at least 1, got 0"},
		{"max tokens", closed, func(o *Options) { o.Workload.MaxTokens = -1 }, "MaxTokens must not be negative, got -1"},
		{"nonce", closed, func(o *Options) { o.Workload.Nonce = "a b" }, `PromptNonce: prompt nonce "a b": ' ' is not a letter, digit, '-' or '_'`},
		{"prompts", closed, func(o *Options) { o.Prompts = "" }, `Prompts "": want "distinct" or "reuse"`},
		{"timeout", closed, func(o *Options) { o.Client.Timeout = 0 }, "Timeout must be positive, got 0s"},
		{"neither duration nor requests", closed, func(o *Options) { o.Run.Requests = 0 }, "set Duration or Requests"},
	} {
		o := options(t, &server{})
		if tc.mod != nil {
			tc.mod(&o)
		}
		if _, err := New(tc.plan, o); err == nil || err.Error() != tc.want {
			t.Errorf("%s: err = %v, want %s", tc.name, err, tc.want)
		}
	}
}

// TestSaturationRule: a level counts when it meets the goodput and error
// thresholds; the search stops at the first level above the error
// threshold or below the best goodput so far.
func TestSaturationRule(t *testing.T) {
	sat := Saturation{MaxErrorRatio: 0.05, MinGoodputRatio: 0.9}
	sum := func(goodput, ratio float64, completed, failed int) report.Summary {
		return report.Summary{GoodputPerSecond: goodput, GoodputRatio: ratio, RequestsCompleted: completed, RequestsFailed: failed}
	}
	for _, tc := range []struct {
		name      string
		levels    []report.Summary
		stopAt    int // index of the level that stops the search; -1: none
		reason    string
		saturated float64 // metadata.saturation_level (levels are 1, 2, 3, …)
	}{
		{"goodput grows", []report.Summary{sum(10, 1, 10, 0), sum(20, 0.95, 20, 0), sum(30, 0.8, 30, 0)}, -1, "", 2},
		{"goodput drops", []report.Summary{sum(10, 1, 10, 0), sum(20, 1, 20, 0), sum(15, 1, 15, 0), sum(40, 1, 40, 0)}, 2,
			"level 3: goodput 15/s below best 20/s", 3},
		{"errors", []report.Summary{sum(10, 1, 10, 0), sum(20, 0.9, 18, 2)}, 1, "level 2: failed share 0.100 above 0.050", 1},
	} {
		c := &Campaign{log: slog.New(slog.DiscardHandler)}
		var meta report.Metadata
		best, stopAt, reason := -1.0, -1, ""
		for i, s := range tc.levels {
			if reason = c.saturated(sat, float64(i+1), s, &best, &meta); reason != "" {
				stopAt = i
				break
			}
		}
		if stopAt != tc.stopAt || reason != tc.reason || meta.SaturationLevel != tc.saturated {
			t.Errorf("%s: stopped at %d (%q), saturation level %v; want %d (%q), %v", tc.name, stopAt, reason, meta.SaturationLevel,
				tc.stopAt, tc.reason, tc.saturated)
		}
	}
}

func TestNamesAndLevels(t *testing.T) {
	for _, tc := range []struct {
		mode   string
		level  float64
		repeat int
		want   string
	}{
		{report.ModeClosed, 8, 0, "concurrency=8"},
		{report.ModeClosed, 8, 2, "concurrency=8 repeat=2"},
		{report.ModeOpen, 2.5, 0, "rate=2.5"},
		{report.ModeOpen, 100, 1, "rate=100 repeat=1"},
	} {
		if got := report.RunName(tc.mode, tc.level, tc.repeat); got != tc.want {
			t.Errorf("report.RunName(%s, %v, %d) = %q, want %q", tc.mode, tc.level, tc.repeat, got, tc.want)
		}
	}
	s := report.Summary{AchievedRatePerSecond: 7.5, ScheduleLag: report.Dist{P50: 0.0012, P99: 0.25}}
	if got, want := RateWarning("rate=10", 10, s), "rate=10: target rate 10/s NOT achieved: sent 7.5/s, schedule lag p50 0.0012s p99 0.25s"; got != want {
		t.Errorf("RateWarning = %q, want %q", got, want)
	}
	doc := &report.Document{}
	one := report.Run{Name: "rate=1", Summary: report.Summary{RequestsCompleted: 2}}
	doc.Runs = append(doc.Runs, one)
	if got := CloseLevel(doc, []report.Run{one}); got.Name != "rate=1" || len(doc.Runs) != 1 {
		t.Errorf("one repeat: %q, %d runs", got.Name, len(doc.Runs))
	}
	reps := []report.Run{{Name: "rate=1 repeat=1", Summary: report.Summary{RequestsCompleted: 2}}, {Name: "rate=1 repeat=2", Summary: report.Summary{RequestsCompleted: 4}}}
	doc.Runs = append(doc.Runs, reps...)
	if got := CloseLevel(doc, reps); got.Name != "rate=1 (mean of 2)" || !got.Aggregate || got.Summary.RequestsCompleted != 6 || len(doc.Runs) != 4 {
		t.Errorf("two repeats: %+v, %d runs", got, len(doc.Runs))
	}
	for in, want := range map[string]string{
		"http://user:pw@host:8000/v1":  "http://host:8000/v1",
		"https://host/v1":              "https://host/v1",
		"http://host/v1/path@x":        "http://host/v1/path@x",
		"http://tok@host:1/v1?q=a@b.c": "http://host:1/v1?q=a@b.c",
	} {
		if got := redactURL(in); got != want {
			t.Errorf("redactURL(%q) = %q, want %q", in, got, want)
		}
	}
}
