package campaign

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// baseSettings are the defaults with a target, a model and a number of
// requests.
func baseSettings() Settings {
	s := DefaultSettings()
	s.Target, s.Model, s.Requests = "http://127.0.0.1:1/v1", "m", 4
	return s
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSettingsOptions: every setting lands in its option, parsed.
func TestSettingsOptions(t *testing.T) {
	t.Parallel()
	key := writeFile(t, "key", "  sk-secret\n")
	body := writeFile(t, "body.json", "{\"top_k\": 5,\n \"min_p\": 0.1}\n")
	system := writeFile(t, "system.txt", "You are terse.\n")
	s := baseSettings()
	s.APIKeyFile, s.APIKey = key, "from-env"
	s.Timestamps, s.ContinuousUsage = "read", true
	s.SLO = "ttft=500ms,tpot=50ms,e2e=10s"
	s.Shard = "1/3"
	s.InputTokens, s.OutputTokens = "uniform:10,20", "fixed:7"
	s.MaxConcurrency, s.Arrival, s.Burstiness = 8, "gamma", 0.5
	s.Duration, s.Warmup, s.RampUp = time.Minute, 5*time.Second, 2*time.Second
	s.GPUHourlyUSD, s.GPUs, s.OverheadHours = 2.5, 4, 0.25
	s.ExporterGPUs = " 0, GPU-abc "
	s.Labels = []string{"image=sha256:1", "commit=abc"}
	s.SaveResponses, s.ResponsePrompts, s.KeepRecords = true, true, true
	s.Turns, s.ThinkTime = 3, time.Second
	s.ServerMetrics = true
	s.ExtraBody = []string{"@" + body, `{"seed":3}`}
	s.Headers = []string{"X-Tenant: a", "X-Token: t"}
	s.SecretHeaders = []string{"x-tenant"}
	s.SystemPrompt = "@" + system
	s.SystemPromptTokens = 0
	s.MaxTokensField = client.FieldMaxCompletionTokens

	o, err := s.Options()
	if err != nil {
		t.Fatal(err)
	}
	c := o.Client
	if c.BaseURL != s.Target || c.Model != "m" || c.APIKey != "sk-secret" || !c.ReadTimestamps || !c.ContinuousUsage || c.Timeout != 300*time.Second || c.TLS != nil {
		t.Errorf("client %+v", c)
	}
	if string(c.ExtraBody) != `{"min_p":0.1,"seed":3,"top_k":5}` || c.MaxTokensField != client.FieldMaxCompletionTokens {
		t.Errorf("extra body %s, field %s", c.ExtraBody, c.MaxTokensField)
	}
	if len(c.Headers) != 2 || !c.Headers[0].Secret || c.Headers[1].Secret || c.Headers[1].Name != "X-Token" || c.Headers[1].Value != "t" {
		t.Errorf("headers %+v", c.Headers)
	}
	if o.SystemPrompt != "You are terse.\n" {
		t.Errorf("system prompt %q", o.SystemPrompt)
	}
	if o.SLO != (report.SLO{TTFTSeconds: 0.5, TPOTSeconds: 0.05, E2ESeconds: 10}) {
		t.Errorf("SLO %+v", o.SLO)
	}
	r := o.Run
	if r.Shard.Index != 1 || r.Shard.Count != 3 || r.MaxConcurrency != 8 || r.Schedule.Arrival != "gamma" || r.Schedule.Burstiness != 0.5 ||
		r.Duration != time.Minute || r.Requests != 4 || r.Warmup != 5*time.Second || r.RampUp != 2*time.Second || r.GracePeriod != 30*time.Second ||
		r.Turns != 3 || r.ThinkTime != time.Second {
		t.Errorf("run %+v", r)
	}
	w := o.Workload
	if w.Input.String() != "uniform:10,20" || w.Output.String() != "fixed:7" || w.Seed != 1 || w.Turns != 3 {
		t.Errorf("workload %+v", w)
	}
	if o.Prices != (report.CostSettings{GPUHourlyUSD: 2.5, GPUs: 4, OverheadHours: 0.25}) {
		t.Errorf("prices %+v", o.Prices)
	}
	if !slices.Equal(o.ExporterGPUs, []string{"0", "GPU-abc"}) || o.Labels["image"] != "sha256:1" || o.Labels["commit"] != "abc" {
		t.Errorf("exporter GPUs %q, labels %v", o.ExporterGPUs, o.Labels)
	}
	if !o.SaveResponses || !o.ResponsePrompts || !o.KeepRecords || !o.ServerInfo || o.Scenario != "default" || o.Calibrate != CalibrateAuto {
		t.Errorf("options %+v", o)
	}
	if o.ServerMetrics == nil || o.ServerMetrics.URL != "http://127.0.0.1:1/metrics" {
		t.Errorf("server metrics %+v", o.ServerMetrics)
	}

	// Without a key file, the key given.
	s = baseSettings()
	s.APIKey = "from-env"
	if o, err := s.Options(); err != nil || o.Client.APIKey != "from-env" {
		t.Errorf("key %q, %v", o.Client.APIKey, err)
	}
}

// TestSettingsErrors: each setting's error names it (package option), so
// that a command can spell it as its flag.
func TestSettingsErrors(t *testing.T) {
	t.Parallel()
	notPEM := writeFile(t, "not.pem", "hello")
	notImage := writeFile(t, "notes.png", "text")
	trace := filepath.Join("..", "workload", "testdata", "azure.csv")
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name string
		set  func(*Settings)
		want string // the error's text, options by their names
		opt  option.Name
	}{
		{"endpoint", func(s *Settings) { s.Endpoint = "embeddings" }, `Endpoint "embeddings": want one of chat, completions`, "Endpoint"},
		{"trace format", func(s *Settings) { s.TraceFormat = "csv" }, `TraceFormat "csv": want one of auto, mooncake, azure, burstgpt`, "TraceFormat"},
		{"max tokens field", func(s *Settings) { s.MaxTokensField = "n" }, `MaxTokensField "n": want one of auto, max_tokens, max_completion_tokens`, "MaxTokensField"},
		{"slo", func(s *Settings) { s.SLO = "ttft=fast" }, `SLO "ttft=fast": "ttft=fast" is not name=duration with a positive duration`, "SLO"},
		{"slo name", func(s *Settings) { s.SLO = "p99=1s" }, `SLO "p99=1s": unknown SLO "p99" (want ttft, tpot or e2e)`, "SLO"},
		{"shard", func(s *Settings) { s.Shard = "4/2" }, `Shard "4/2": want i/N with 0 ≤ i < N`, "Shard"},
		{"input", func(s *Settings) { s.InputTokens = "zipf:3" }, `InputTokens "zipf:3": unknown distribution "zipf"`, "InputTokens"},
		{"output", func(s *Settings) { s.OutputTokens = "fixed" }, `OutputTokens "fixed": fixed takes 1 number(s), got 0`, "OutputTokens"},
		{"grace", func(s *Settings) { s.GracePeriod = 0 }, "GracePeriod must be positive, got 0s", "GracePeriod"},
		{"key file", func(s *Settings) { s.APIKeyFile = missing }, "APIKeyFile: open " + missing, "APIKeyFile"},
		{"ca file", func(s *Settings) { s.TLSCAFile = missing }, "TLSCAFile: open " + missing, "TLSCAFile"},
		{"ca not pem", func(s *Settings) { s.TLSCAFile = notPEM }, "TLSCAFile " + notPEM + ": no PEM certificates in it", "TLSCAFile"},
		{"header", func(s *Settings) { s.Headers = []string{"nocolon"} }, `Headers "nocolon": want Name: value`, "Headers"},
		{"secret header", func(s *Settings) { s.SecretHeaders = []string{"X-A"} }, `SecretHeaders "X-A": no Headers of that name`, "SecretHeaders"},
		{"extra body", func(s *Settings) { s.ExtraBody = []string{"[1]"} }, `ExtraBody "[1]": want one JSON object`, "ExtraBody"},
		{"extra body twice", func(s *Settings) { s.ExtraBody = []string{`{"a":1}`, `{"a":2}`} }, `ExtraBody: field "a" given twice`, "ExtraBody"},
		{"extra body file", func(s *Settings) { s.ExtraBody = []string{"@" + missing} }, "ExtraBody: open " + missing, "ExtraBody"},
		{"system file", func(s *Settings) { s.SystemPrompt = "@" + missing }, "SystemPrompt: open " + missing, "SystemPrompt"},
		{"label", func(s *Settings) { s.Labels = []string{"novalue"} }, `Labels "novalue": want key=value`, "Labels"},
		{"response prompts", func(s *Settings) { s.ResponsePrompts = true }, "ResponsePrompts needs SaveResponses FILE", "ResponsePrompts"},
		{"prefix groups", func(s *Settings) { s.SharedPrefixGroups = -1 }, "SharedPrefixGroups must not be negative, got -1", "SharedPrefixGroups"},
		{"prefix tokens", func(s *Settings) { s.SharedPrefixGroups, s.SharedPrefixTokens = 2, "fixed" }, `SharedPrefixTokens "fixed"`, "SharedPrefixTokens"},
		{"prefix pick", func(s *Settings) { s.SharedPrefixGroups, s.SharedPrefixPick = 2, "zipf:0.5" }, `SharedPrefixPick "zipf:0.5": Zipf's exponent must be a number above 1`, "SharedPrefixPick"},
		{"image count", func(s *Settings) { s.ImagesPerRequest = -1 }, "ImagesPerRequest must not be negative, got -1", "ImagesPerRequest"},
		{"image size", func(s *Settings) { s.ImagesPerRequest, s.ImageSize = 1, "0x4" }, `ImageSize "0x4": want WIDTHxHEIGHT`, "ImageSize"},
		{"image distinct", func(s *Settings) { s.ImagesPerRequest, s.ImageDistinct = 1, 0 }, "ImageDistinct must be 1 to 4096, got 0", "ImageDistinct"},
		{"image file", func(s *Settings) { s.ImageFiles = []string{notImage} }, "ImageFiles: image " + notImage + ": not a PNG, JPEG or GIF image", "ImageFiles"},
		{"trace", func(s *Settings) { s.Trace = missing }, "Trace: reading trace: open " + missing, "Trace"},
		{"trace speedup", func(s *Settings) { s.Trace, s.TraceSpeedup = trace, -1 }, "Trace: TraceSpeedup must be a positive number, got -1", "Trace"},
		{"turns", func(s *Settings) { s.Turns = 0 }, "Turns must be at least 1, got 0", "Turns"},
		{"think time", func(s *Settings) { s.ThinkTime = time.Second }, "ThinkTime needs Turns above 1", "ThinkTime"},
		{"think time negative", func(s *Settings) { s.Turns, s.ThinkTime = 2, -time.Second }, "ThinkTime must not be negative, got -1s", "ThinkTime"},
		{"server metrics", func(s *Settings) { s.ServerMetricsURL = "ftp://h/metrics" }, `ServerMetricsURL "ftp://h/metrics": must be an http:// or https:// URL`, "ServerMetricsURL"},
	} {
		s := baseSettings()
		tc.set(&s)
		_, err := s.Options()
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want %q…", tc.name, err, tc.want)
			continue
		}
		var oe *option.Error
		if !errors.As(err, &oe) || !slices.Contains(oe.Options(), tc.opt) {
			t.Errorf("%s: %v names no option %s", tc.name, err, tc.opt)
		}
		spelled := option.Rename(err, func(n option.Name) string { return "--" + strings.ToLower(string(n)) }).Error()
		if !strings.HasPrefix(spelled, "--"+strings.ToLower(string(tc.opt))) {
			t.Errorf("%s: renamed %q does not start with the option's spelling", tc.name, spelled)
		}
	}
}

// TestSettingsTrace: a trace replays all its requests unless told
// otherwise, and a run without a level runs at the trace's mean rate.
func TestSettingsTrace(t *testing.T) {
	t.Parallel()
	s := baseSettings()
	s.Requests, s.Trace = 0, filepath.Join("..", "workload", "testdata", "azure.csv")
	o, err := s.Options()
	if err != nil {
		t.Fatal(err)
	}
	n := len(o.Workload.Trace.Requests)
	if n < 2 || o.Run.Requests != n {
		t.Fatalf("trace of %d requests, run of %d", n, o.Run.Requests)
	}
	p, err := RunPlan(0, 0, o)
	if err != nil {
		t.Fatal(err)
	}
	offsets := o.Workload.Trace.Offsets()
	want := float64(n-1) / (offsets[n-1] - offsets[0]).Seconds()
	if p.Mode != report.ModeOpen || len(p.Levels) != 1 || p.Levels[0] <= 0 || diff(p.Levels[0], want) > 1e-9*want {
		t.Errorf("plan %+v, want open loop at %g requests per second", p, want)
	}
	// A duration keeps the requests unset (the trace loops for it).
	s.Duration = time.Minute
	if o, err := s.Options(); err != nil || o.Run.Requests != 0 {
		t.Errorf("with a duration: requests %d, %v", o.Run.Requests, err)
	}
}

func diff(a, b float64) float64 {
	if a > b {
		return a - b
	}
	return b - a
}

func TestRunPlan(t *testing.T) {
	t.Parallel()
	o := Options{}
	for _, tc := range []struct {
		concurrency int
		rate        float64
		mode        string
		levels      []float64
		err         string
	}{
		{4, 0, report.ModeClosed, []float64{4}, ""},
		{0, 2.5, report.ModeOpen, []float64{2.5}, ""},
		{4, 2.5, "", nil, "set either Concurrency or Rate, not both"},
		{0, 0, "", nil, "set Concurrency N (closed loop), Rate R (open loop) or Trace FILE (open loop at the trace's times)"},
	} {
		p, err := RunPlan(tc.concurrency, tc.rate, o)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%d, %g: err %v, want %q", tc.concurrency, tc.rate, err, tc.err)
			}
			continue
		}
		if err != nil || p.Command != "run" || p.Repeats != 1 || p.Mode != tc.mode || !slices.Equal(p.Levels, tc.levels) {
			t.Errorf("%d, %g: plan %+v, %v", tc.concurrency, tc.rate, p, err)
		}
	}
}

func TestSweepPlan(t *testing.T) {
	t.Parallel()
	sat := &Saturation{MaxErrorRatio: 0.05, MinGoodputRatio: 0.9}
	p, err := SweepPlan("1, 2,4,,8", "", 3, sat)
	if err != nil || p.Command != "sweep" || p.Mode != report.ModeClosed || !slices.Equal(p.Levels, []float64{1, 2, 4, 8}) || p.Repeats != 3 || p.Saturation != sat {
		t.Errorf("plan %+v, %v", p, err)
	}
	if p, err := SweepPlan("", "0.5,2", 1, nil); err != nil || p.Mode != report.ModeOpen || !slices.Equal(p.Levels, []float64{0.5, 2}) {
		t.Errorf("plan %+v, %v", p, err)
	}
	for _, tc := range []struct{ concurrency, rate, err string }{
		{"1", "1", "set either Concurrency or Rate, not both"},
		{"", "", "set Concurrency 1,2,4,… or Rate 1,2,5,…"},
		{"1,x", "", `Concurrency "1,x": "x" is not a positive number`},
		{"", "2,0", `Rate "2,0": "0" is not a positive number`},
		{"", " , ", "Rate: no levels given"},
	} {
		if _, err := SweepPlan(tc.concurrency, tc.rate, 1, nil); err == nil || err.Error() != tc.err {
			t.Errorf("%q, %q: err %v, want %q", tc.concurrency, tc.rate, err, tc.err)
		}
	}
}

func TestSearchSettings(t *testing.T) {
	t.Parallel()
	base := SearchSettings{Rate: 2, Max: 64, Growth: 2, Precision: 0.05, MaxProbes: 12, Repeats: 2, Objectives: []string{"ttft:p99<=500ms", "goodput>=95%"}}
	cfg, err := base.Config(Settings{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != report.ModeOpen || cfg.Start != 2 || cfg.Max != 64 || cfg.Growth != 2 || cfg.Precision != 0.05 || cfg.MaxProbes != 12 || cfg.Repeats != 2 ||
		len(cfg.Objectives) != 2 || cfg.Objectives[0].Metric != "ttft" || cfg.Objectives[1].Threshold != 0.95 {
		t.Errorf("config %+v", cfg)
	}
	closed := base
	closed.Rate, closed.Concurrency = 0, 3
	if cfg, err := closed.Config(Settings{}); err != nil || cfg.Mode != report.ModeClosed || cfg.Start != 3 {
		t.Errorf("closed: %+v, %v", cfg, err)
	}
	for _, tc := range []struct {
		set  func(*SearchSettings, *Settings)
		want string
	}{
		{func(s *SearchSettings, _ *Settings) { s.Concurrency = 1 }, "set either Concurrency or Rate, not both"},
		{func(s *SearchSettings, _ *Settings) { s.Rate = 0 }, "set Concurrency N (closed loop, search over users from N) or Rate R (open loop, search over requests per second from R)"},
		{func(_ *SearchSettings, l *Settings) { l.Trace = "t.csv" }, "Trace: a trace replays its own times; a search sets the rate itself"},
		{func(s *SearchSettings, _ *Settings) { s.Objectives = []string{"ttft:p42<=1s"} }, `Objectives "ttft:p42<=1s": unknown statistic`},
		{func(s *SearchSettings, _ *Settings) { s.Objectives = nil }, "Objectives: no objective given"},
		{func(s *SearchSettings, _ *Settings) { s.Max = 1 }, "Max (1) must be at least Start (2)"},
	} {
		s, l := base, Settings{}
		s.Objectives = slices.Clone(base.Objectives)
		tc.set(&s, &l)
		if _, err := s.Config(l); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("err %v, want %q…", err, tc.want)
		}
	}
}

// Every setting of Choices defaults to one of its choices, and every
// choice is accepted.
func TestChoices(t *testing.T) {
	t.Parallel()
	d := reflect.ValueOf(DefaultSettings())
	for _, name := range []option.Name{"Endpoint", "Timestamps", "Arrival", "Calibrate", "DatasetTurns", "Prompts", "TraceFormat", "ImageFormat", "MaxTokensField"} {
		choices := Choices(name)
		if def := d.FieldByName(string(name)).String(); len(choices) < 2 || !slices.Contains(choices, def) {
			t.Errorf("%s: default %q, choices %q", name, def, choices)
		}
		for _, c := range choices {
			s := baseSettings()
			reflect.ValueOf(&s).Elem().FieldByName(string(name)).SetString(c)
			if err := s.checkChoices(); err != nil {
				t.Errorf("%s %q: %v", name, c, err)
			}
		}
	}
	if Choices("Model") != nil {
		t.Error("Model has choices")
	}
}
