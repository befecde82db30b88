package campaign

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/observe"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// Settings are a campaign's options as a person gives them: text still to
// parse (lengths, SLOs, headers, labels), files still to read (the API
// key, CA certificates, a dataset, a trace, images, an extra body) and
// switches. Settings.Options parses, reads and checks them into the
// Options New takes; every error names the setting at fault by its field
// (package option), which a command spells as its flag. A command line
// fills Settings and nothing more (cmd/gpulens-loadgen binds each flag to
// a field, with DefaultSettings' values as defaults and Choices' as its
// enumerations); Options stays open to a program that builds its own.
type Settings struct {
	// The server and how requests reach it (client.Config).
	Target, Model string
	Endpoint      string // "chat" or "completions"
	// APIKeyFile holds the API key; without it, APIKey is the key.
	APIKeyFile, APIKey string
	Timeout            time.Duration
	ContinuousUsage    bool
	Timestamps         string // "kernel" (or empty) or "read"
	// TLSCAFile is a PEM file of the CA certificates to trust for an
	// https:// target instead of the system's.
	TLSCAFile             string
	TLSInsecureSkipVerify bool
	// Scenario is a free-form name, recorded in the metadata.
	Scenario string

	// Every run (runner.Config).
	Arrival        string // constant, poisson or gamma
	Burstiness     float64
	MaxConcurrency int
	Duration       time.Duration
	Requests       int
	Warmup, RampUp time.Duration
	GracePeriod    time.Duration
	Shard          string // "i/N", empty: not sharded

	// The prompts (workload.Config).
	InputTokens, OutputTokens string // workload.ParseLength's specs
	Dataset                   string // a JSONL or ShareGPT file
	DatasetTurns              string // workload.DatasetTurnsFirst (or empty) or workload.DatasetTurnsAll
	Calibrate                 string
	CalibrateTimeout          time.Duration
	MaxTokens                 int
	IgnoreEOS                 bool
	Seed                      int64
	Prompts, PromptNonce      string

	// SLO is the per-request goodput thresholds, "ttft=500ms,tpot=50ms,e2e=10s".
	SLO string
	// The prices (report.CostSettings).
	GPUHourlyUSD, OverheadHours float64
	GPUs                        int

	// What is kept and recorded.
	ExporterURL                    string
	ExporterInterval               time.Duration
	ExporterGPUs                   string   // indexes or UUIDs, comma-separated; empty: all
	Labels                         []string // key=value
	ServerInfo                     bool
	ServerInfoTimeout              time.Duration
	EmbedRequests, KeepRecords     bool
	SaveResponses, ResponsePrompts bool

	// Trace replay and multi-turn conversations.
	Trace            string // a trace file
	TraceFormat      string // "auto" (or empty), workload.TraceMooncake, TraceAzure or TraceBurstGPT
	TraceSpeedup     float64
	TraceMaxRequests int
	Turns            int // 0 or 1: single requests
	ThinkTime        time.Duration
	// The server's own metrics: scraped when ServerMetrics or
	// ServerMetricsURL is set (default URL: the target's /metrics).
	ServerMetrics         bool
	ServerMetricsURL      string
	ServerMetricsInterval time.Duration

	// Shared prefixes (with SharedPrefixGroups above 0) and images.
	SharedPrefixGroups int
	SharedPrefixTokens string // a length spec
	SharedPrefixPick   string // workload.ParsePick's spec
	// ImagesPerRequest images in each chat request (0 with ImageFiles: 1),
	// ImageDistinct generated ones of ImageSize ("WxH") and ImageFormat,
	// or the ImageFiles in turn.
	ImagesPerRequest int
	ImageSize        string
	ImageFormat      string
	ImageDistinct    int
	ImageFiles       []string

	// What every request carries besides its prompt. ExtraBody are JSON
	// objects (or @FILE holding one) merged into every body; Headers are
	// "Name: value", of which SecretHeaders' values are never reported;
	// SystemPrompt is text (or @FILE holding it).
	ExtraBody          []string
	Headers            []string
	SecretHeaders      []string
	SystemPrompt       string
	SystemPromptTokens int
	MaxTokensField     string
}

// DefaultSettings are the settings of a campaign nobody tuned (without
// its Target and Model, which have none, and a Duration or Requests):
// gpulens-loadgen's flags default to them (TestFlagDefaultsAreTheLibrarys).
func DefaultSettings() Settings {
	return Settings{
		Endpoint: client.EndpointChat, Timeout: 300 * time.Second, Timestamps: "kernel", Scenario: "default",
		Arrival: runner.Poisson, Burstiness: 1, GracePeriod: runner.DefaultGracePeriod,
		InputTokens: "fixed:256", OutputTokens: "fixed:128", DatasetTurns: workload.DatasetTurnsFirst, Calibrate: CalibrateAuto,
		Seed: 1, Prompts: report.PromptsDistinct, GPUs: 1,
		ExporterInterval: observe.DefaultPollInterval, ServerInfo: true, ServerInfoTimeout: report.DefaultTimeout,
		TraceFormat: "auto", TraceSpeedup: 1, Turns: 1, ServerMetricsInterval: observe.DefaultInterval,
		SharedPrefixTokens: "fixed:1000", SharedPrefixPick: workload.PickUniform,
		ImageSize: "512x512", ImageFormat: workload.ImagePNG, ImageDistinct: 16,
		MaxTokensField: client.MaxTokensAuto,
	}
}

// Choices are the values a setting that takes one of a few may have (nil
// for any other setting), the first its default where it has one.
func Choices(setting option.Name) []string {
	switch setting {
	case "Endpoint":
		return []string{client.EndpointChat, client.EndpointCompletions}
	case "Timestamps":
		return []string{"kernel", "read"}
	case "Arrival":
		return []string{runner.Constant, runner.Poisson, runner.Gamma}
	case "Calibrate":
		return []string{CalibrateAuto, CalibrateTokenize, CalibrateUsage, CalibrateOff}
	case "DatasetTurns":
		return []string{workload.DatasetTurnsFirst, workload.DatasetTurnsAll}
	case "Prompts":
		return []string{report.PromptsDistinct, report.PromptsReuse}
	case "TraceFormat":
		return append([]string{"auto"}, workload.TraceFormats...)
	case "ImageFormat":
		return []string{workload.ImagePNG, workload.ImageJPEG}
	case "MaxTokensField":
		return []string{client.MaxTokensAuto, client.FieldMaxTokens, client.FieldMaxCompletionTokens}
	}
	return nil
}

// checkChoices rejects a setting of Choices set to none of them (empty:
// the library's own default).
func (s Settings) checkChoices() error {
	for _, c := range []struct {
		name  option.Name
		value string
	}{
		{"Endpoint", s.Endpoint}, {"Timestamps", s.Timestamps}, {"Arrival", s.Arrival}, {"Calibrate", s.Calibrate},
		{"DatasetTurns", s.DatasetTurns}, {"Prompts", s.Prompts}, {"TraceFormat", s.TraceFormat},
		{"ImageFormat", s.ImageFormat}, {"MaxTokensField", s.MaxTokensField},
	} {
		if choices := Choices(c.name); c.value != "" && !slices.Contains(choices, c.value) {
			return option.Errorf("%s %q: want one of %s", c.name, c.value, strings.Join(choices, ", "))
		}
	}
	return nil
}

// Options parses, reads and checks s into a campaign's Options (New
// checks the rest). Every error names the setting at fault (package
// option).
func (s Settings) Options() (Options, error) {
	o := Options{Calibrate: s.Calibrate, CalibrateTimeout: s.CalibrateTimeout, Prompts: s.Prompts, Scenario: s.Scenario,
		ExporterURL: s.ExporterURL, ExporterInterval: s.ExporterInterval, EmbedRequests: s.EmbedRequests, KeepRecords: s.KeepRecords,
		ServerInfo: s.ServerInfo, ServerInfoTimeout: s.ServerInfoTimeout, SystemPromptTokens: s.SystemPromptTokens,
		Prices: report.CostSettings{GPUHourlyUSD: s.GPUHourlyUSD, GPUs: s.GPUs, OverheadHours: s.OverheadHours}}
	var (
		shard   runner.Shard // zero: not sharded
		in, out workload.Length
		dataset *workload.Dataset
		err     error
	)
	if err := s.checkChoices(); err != nil {
		return o, err
	}
	if o.SLO, err = ParseSLO(s.SLO); err != nil {
		return o, err
	}
	if s.Shard != "" {
		if shard, err = runner.ParseShard(s.Shard); err != nil {
			return o, err
		}
	}
	if in, err = workload.ParseLength(option.Name("InputTokens"), s.InputTokens); err != nil {
		return o, err
	}
	if out, err = workload.ParseLength(option.Name("OutputTokens"), s.OutputTokens); err != nil {
		return o, err
	}
	if s.Dataset != "" {
		if dataset, err = workload.LoadDataset(s.Dataset); err != nil {
			return o, err
		}
	}
	if s.GracePeriod <= 0 {
		return o, option.Errorf("%s must be positive, got %v", option.Name("GracePeriod"), s.GracePeriod)
	}
	key, err := s.apiKey()
	if err != nil {
		return o, err
	}
	tlsCfg, err := s.tlsConfig()
	if err != nil {
		return o, err
	}
	o.Client = client.Config{BaseURL: s.Target, Endpoint: s.Endpoint, Model: s.Model, APIKey: key, Timeout: s.Timeout,
		ContinuousUsage: s.ContinuousUsage, ReadTimestamps: s.Timestamps == "read", TLS: tlsCfg}
	o.Workload = workload.Config{Seed: s.Seed, Input: in, Output: out, Dataset: dataset, DatasetTurns: s.DatasetTurns, MaxTokens: s.MaxTokens,
		IgnoreEOS: s.IgnoreEOS, Nonce: s.PromptNonce}
	o.Run = runner.Config{Duration: s.Duration, Requests: s.Requests, Warmup: s.Warmup, RampUp: s.RampUp, GracePeriod: s.GracePeriod,
		MaxConcurrency: s.MaxConcurrency, Schedule: runner.ScheduleConfig{Arrival: s.Arrival, Burstiness: s.Burstiness}, Shard: shard}
	for _, step := range []func(*Options) error{s.request, s.evaluation, s.prompts, s.workloads} {
		if err := step(&o); err != nil {
			return o, err
		}
	}
	return o, nil
}

// ParseSLO parses the per-request goodput thresholds "ttft=500ms,tpot=50ms,e2e=10s"
// (empty: none).
func ParseSLO(s string) (report.SLO, error) {
	var slo report.SLO
	if strings.TrimSpace(s) == "" {
		return slo, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d <= 0 {
			return slo, option.Errorf("%s %q: %q is not name=duration with a positive duration", option.Name("SLO"), s, part)
		}
		switch k {
		case "ttft":
			slo.TTFTSeconds = d.Seconds()
		case "tpot":
			slo.TPOTSeconds = d.Seconds()
		case "e2e":
			slo.E2ESeconds = d.Seconds()
		default:
			return slo, option.Errorf("%s %q: unknown SLO %q (want ttft, tpot or e2e)", option.Name("SLO"), s, k)
		}
	}
	return slo, nil
}

// tlsConfig is the client TLS configuration of TLSCAFile and
// TLSInsecureSkipVerify; nil: the defaults.
func (s Settings) tlsConfig() (*tls.Config, error) {
	if s.TLSCAFile == "" && !s.TLSInsecureSkipVerify {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: s.TLSInsecureSkipVerify} //nolint:gosec // asked for by the setting
	if s.TLSCAFile != "" {
		pem, err := os.ReadFile(s.TLSCAFile)
		if err != nil {
			return nil, option.Errorf("%s: %w", option.Name("TLSCAFile"), err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, option.Errorf("%s %s: no PEM certificates in it", option.Name("TLSCAFile"), s.TLSCAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// apiKey is the content of APIKeyFile (trimmed), else APIKey.
func (s Settings) apiKey() (string, error) {
	if s.APIKeyFile == "" {
		return s.APIKey, nil
	}
	b, err := os.ReadFile(s.APIKeyFile)
	if err != nil {
		return "", option.Errorf("%s: %w", option.Name("APIKeyFile"), err)
	}
	return strings.TrimSpace(string(b)), nil
}

// request sets o's request options (o.Client is set already).
func (s Settings) request(o *Options) error {
	body, err := mergeExtraBodies(s.ExtraBody)
	if err != nil {
		return err
	}
	o.Client.ExtraBody, o.Client.MaxTokensField = body, s.MaxTokensField
	secret := map[string]bool{}
	for _, n := range s.SecretHeaders {
		secret[http.CanonicalHeaderKey(strings.TrimSpace(n))] = true
	}
	named := map[string]bool{}
	for _, text := range s.Headers {
		h, err := client.ParseHeader(text)
		if err != nil {
			return option.Errorf("%s %w", option.Name("Headers"), err)
		}
		canon := http.CanonicalHeaderKey(h.Name)
		h.Secret, named[canon] = secret[canon], true
		o.Client.Headers = append(o.Client.Headers, h)
	}
	for _, n := range s.SecretHeaders {
		if !named[http.CanonicalHeaderKey(strings.TrimSpace(n))] {
			return option.Errorf("%s %q: no %s of that name", option.Name("SecretHeaders"), n, option.Name("Headers"))
		}
	}
	o.SystemPrompt, err = textOrFile(option.Name("SystemPrompt"), s.SystemPrompt)
	return err
}

// textOrFile is s, or the content of the file @s names.
func textOrFile(name option.Name, s string) (string, error) {
	path, ok := strings.CutPrefix(s, "@")
	if !ok {
		return s, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", option.Errorf("%s: %w", name, err)
	}
	return string(b), nil
}

// mergeExtraBodies merges the ExtraBody objects into one.
func mergeExtraBodies(specs []string) (json.RawMessage, error) {
	if len(specs) == 0 {
		return nil, nil
	}
	all := map[string]json.RawMessage{}
	for _, s := range specs {
		text, err := textOrFile(option.Name("ExtraBody"), s)
		if err != nil {
			return nil, err
		}
		var m map[string]json.RawMessage
		dec := json.NewDecoder(strings.NewReader(text))
		if err := dec.Decode(&m); err != nil || m == nil || dec.More() {
			if err == nil {
				err = fmt.Errorf("not one JSON object")
			}
			return nil, option.Errorf("%s %s: want one JSON object: %v", option.Name("ExtraBody"), quoteShort(s), err)
		}
		for k, v := range m {
			if _, dup := all[k]; dup {
				return nil, option.Errorf("%s: field %q given twice", option.Name("ExtraBody"), k)
			}
			var c bytes.Buffer
			_ = json.Compact(&c, v)
			all[k] = c.Bytes()
		}
	}
	return json.Marshal(all)
}

// quoteShort quotes s, cut to 80 bytes.
func quoteShort(s string) string {
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return strconv.Quote(s)
}

// evaluation sets what an evaluation campaign records beyond latency and
// throughput: the GPUs served, the labels, the saved responses.
func (s Settings) evaluation(o *Options) error {
	if t := strings.TrimSpace(s.ExporterGPUs); t != "" {
		for _, g := range strings.Split(t, ",") {
			o.ExporterGPUs = append(o.ExporterGPUs, strings.TrimSpace(g))
		}
	}
	labels, err := report.ParseLabels(s.Labels)
	if err != nil {
		return option.Errorf("%s %w", option.Name("Labels"), err)
	}
	o.Labels = labels
	if s.ResponsePrompts && !s.SaveResponses {
		return option.Errorf("%s needs %s FILE", option.Name("ResponsePrompts"), option.Name("SaveResponses"))
	}
	o.SaveResponses, o.ResponsePrompts = s.SaveResponses, s.ResponsePrompts
	return nil
}

// prompts sets the shared prefixes and images of o.Workload.
func (s Settings) prompts(o *Options) error {
	if s.SharedPrefixGroups < 0 {
		return option.Errorf("%s must not be negative, got %d", option.Name("SharedPrefixGroups"), s.SharedPrefixGroups)
	}
	if s.SharedPrefixGroups > 0 {
		l, err := workload.ParseLength(option.Name("SharedPrefixTokens"), s.SharedPrefixTokens)
		if err != nil {
			return err
		}
		p, err := workload.ParsePick(option.Name("SharedPrefixPick"), s.SharedPrefixPick)
		if err != nil {
			return err
		}
		o.Workload.SharedPrefix = &workload.SharedPrefix{Groups: s.SharedPrefixGroups, Tokens: l, Pick: p}
	}
	if s.ImagesPerRequest < 0 {
		return option.Errorf("%s must not be negative, got %d", option.Name("ImagesPerRequest"), s.ImagesPerRequest)
	}
	count := s.ImagesPerRequest
	if count == 0 && len(s.ImageFiles) > 0 {
		count = 1
	}
	if count == 0 {
		return nil
	}
	var (
		im  *workload.Images
		err error
	)
	if len(s.ImageFiles) > 0 {
		if im, err = workload.NewFileImages(s.ImageFiles, count); err != nil {
			return option.Errorf("%s: %w", option.Name("ImageFiles"), err)
		}
	} else {
		w, h, err := workload.ParseImageSize(option.Name("ImageSize"), s.ImageSize)
		if err != nil {
			return err
		}
		if im, err = workload.NewGeneratedImages(workload.ImageSpec{Width: w, Height: h, Format: s.ImageFormat,
			Distinct: s.ImageDistinct, Seed: o.Workload.Seed}, count); err != nil {
			return err
		}
	}
	o.Workload.Images = im
	return nil
}

// workloads sets the trace, the conversations and the server's metrics.
func (s Settings) workloads(o *Options) error {
	if s.Trace != "" {
		format := s.TraceFormat
		if format == "auto" {
			format = ""
		}
		t, err := workload.LoadTrace(s.Trace, workload.TraceOptions{Format: format, Speedup: s.TraceSpeedup, MaxRequests: s.TraceMaxRequests})
		if err != nil {
			return option.Errorf("%s: %w", option.Name("Trace"), err)
		}
		o.Workload.Trace = t
		if o.Run.Requests == 0 && o.Run.Duration == 0 {
			o.Run.Requests = len(t.Requests) // the whole trace, once
		}
	}
	if s.Turns < 1 {
		return option.Errorf("%s must be at least 1, got %d", option.Name("Turns"), s.Turns)
	}
	if s.ThinkTime < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("ThinkTime"), s.ThinkTime)
	}
	if s.ThinkTime > 0 && s.Turns == 1 {
		return option.Errorf("%s needs %s above 1", option.Name("ThinkTime"), option.Name("Turns"))
	}
	if s.Turns > 1 {
		o.Workload.Turns, o.Run.Turns, o.Run.ThinkTime = s.Turns, s.Turns, s.ThinkTime
	}
	if s.ServerMetrics || s.ServerMetricsURL != "" {
		u := s.ServerMetricsURL
		if u == "" {
			u = observe.DefaultURL(s.Target)
		}
		cfg := observe.Config{URL: u, Interval: s.ServerMetricsInterval}
		if err := cfg.Validate(); err != nil {
			return err
		}
		o.ServerMetrics = &cfg
	}
	return nil
}

// RunPlan is the plan of one run: Concurrency users (closed loop), Rate
// requests per second (open loop) or, with neither, o's trace at its own
// times (open loop at its mean rate; a trace whose requests all arrive at
// once: at their number).
func RunPlan(concurrency int, rate float64, o Options) (Plan, error) {
	p := Plan{Command: "run", Repeats: 1}
	switch {
	case concurrency > 0 && rate > 0:
		return p, option.Errorf("set either %s or %s, not both", option.Name("Concurrency"), option.Name("Rate"))
	case rate > 0:
		p.Mode, p.Levels = report.ModeOpen, []float64{rate}
	case concurrency > 0:
		p.Mode, p.Levels = report.ModeClosed, []float64{float64(concurrency)}
	case o.Workload.Trace != nil:
		p.Mode, p.Levels = report.ModeOpen, []float64{traceLevel(o.Workload.Trace)}
	default:
		return p, option.Errorf("set %s N (closed loop), %s R (open loop) or %s FILE (open loop at the trace's times)",
			option.Name("Concurrency"), option.Name("Rate"), option.Name("Trace"))
	}
	return p, nil
}

// traceLevel is the level of a run at t's own times: its mean rate
// (requests per second), or, for a trace whose requests all arrive at
// once, their number.
func traceLevel(t *workload.Trace) float64 {
	if r := runner.MeanRate(t.Offsets()); r > 0 {
		return r
	}
	return float64(len(t.Requests))
}

// SweepPlan is the plan of a sweep over the levels of concurrency (closed
// loop) or rate (open loop), each a comma-separated list of positive
// numbers ("1,2,4,8"), one of them set; saturation, when not nil, is its
// stopping rule.
func SweepPlan(concurrency, rate string, repeats int, saturation *Saturation) (Plan, error) {
	p := Plan{Command: "sweep", Repeats: repeats, Saturation: saturation}
	var err error
	switch {
	case concurrency != "" && rate != "":
		return p, option.Errorf("set either %s or %s, not both", option.Name("Concurrency"), option.Name("Rate"))
	case rate != "":
		p.Mode = report.ModeOpen
		p.Levels, err = ParseLevels(option.Name("Rate"), rate)
	case concurrency != "":
		p.Mode = report.ModeClosed
		p.Levels, err = ParseLevels(option.Name("Concurrency"), concurrency)
	default:
		return p, option.Errorf("set %s 1,2,4,… or %s 1,2,5,…", option.Name("Concurrency"), option.Name("Rate"))
	}
	return p, err
}

// ParseLevels parses "1,2,4,8" into positive numbers; name names the
// option in errors.
func ParseLevels(name option.Name, s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v > 0) {
			return nil, option.Errorf("%s %q: %q is not a positive number", name, s, p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, option.Errorf("%s: no levels given", name)
	}
	return out, nil
}
