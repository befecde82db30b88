// Package report defines the load generator's data: the report document
// (Document: metadata, runs, summaries) that a campaign and a merge
// produce and the text and HTML reports render, and the per-request
// record (Record) that the client fills, the runner collects, loadgen/stats
// summarises and a report embeds. Its JSON is the contract with every
// consumer of the results: fields may be added, never renamed.
//
// Units follow Prometheus conventions: durations in seconds, rates per
// second, money in US dollars, ratios 0–1.
//
// The report's files, its reproducibility record and its bill live here
// too. Writing them (outfile.go, fifo*.go): the files a run produces (JSON
// and HTML reports, CSV summaries, raw records) are written without ever
// replacing what is not a regular file: a new path or a regular file is
// written atomically (a temporary file in the same folder, renamed over the
// path), anything else is written in place — a character device such as
// /dev/null, a FIFO, or a symlink (/dev/stdout, a link to a report kept
// elsewhere), which stays a link. Directories, sockets and block devices
// are refused. A FIFO never blocks a write without bound (ReaderWait,
// StallTimeout). Check tells, before any work is done, whether Write will
// be able to write a path, so that a run never measures for an hour to
// lose its results to a missing folder.
//
// What makes a report reproducible and two reports comparable (Manifest;
// manifest_*.go): what the inference server says it is (AskServer: vLLM,
// TGI, llama.cpp, Ollama and SGLang each answer some of the endpoints
// asked), the load generator's host (Host), the user's labels
// (ParseLabels) and a hash of the settings that shape the workload and
// its measurement (SettingsHash).
//
// What an evaluation campaign cost, as the provider bills it (bill.go):
// the instance time of every report (failed, interrupted and repeated runs
// included), setup, retries, storage and egress, rounded to the billing
// increment, divided into a cost per completed sample (Sum, from the
// billing Terms; the result is a Bill). The cost of one run from its
// prices is CostSettings.RunCost. See docs/cost.md, "Campaign cost".
package report

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"strconv"
	"time"

	"github.com/prometheus/common/version"

	"github.com/gpulens/gpulens/internal/pricing"
	"github.com/gpulens/gpulens/loadgen/option"
)

// SchemaVersion is the version of the document layout written by Write.
const SchemaVersion = 1

// Prompt modes (Settings.Prompts).
const (
	// PromptsDistinct: prompts differ across levels, repeats and
	// invocations (Metadata.PromptNonce), so that no prefix cache can serve
	// one run from another's prompts.
	PromptsDistinct = "distinct"
	// PromptsReuse: every level and repeat sends the same prompts, which
	// depend only on the seed, the request index and the nonce if one was
	// given: deliberate reuse, for cache-warm measurements.
	PromptsReuse = "reuse"
)

// Document is one report: what was run, against what, and the results of
// every level and repeat.
type Document struct {
	Metadata Metadata `json:"metadata"`
	Runs     []Run    `json:"runs"`
}

// Metadata records everything needed to reproduce and interpret a report.
type Metadata struct {
	SchemaVersion int    `json:"schema_version"`
	Tool          string `json:"tool"`
	Version       string `json:"version"`
	Revision      string `json:"revision,omitempty"`
	GoVersion     string `json:"go_version,omitempty"`
	// Command is the subcommand that produced the document: run, sweep,
	// search or merge.
	Command  string    `json:"command"`
	RunID    string    `json:"run_id"`
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	// Target is the base URL of the API (ending in /v1), without credentials.
	Target   string `json:"target"`
	Endpoint string `json:"endpoint"`
	// Model is the model requested; ServerModel the one the server reported
	// in its responses (empty when it never said).
	Model       string `json:"model"`
	ServerModel string `json:"server_model,omitempty"`
	Scenario    string `json:"scenario,omitempty"`
	// Dataset is the dataset file name (base name only) and DatasetSHA256 the
	// hex SHA-256 of its bytes; both empty for synthetic prompts.
	Dataset       string `json:"dataset,omitempty"`
	DatasetSHA256 string `json:"dataset_sha256,omitempty"`
	Seed          int64  `json:"seed"`
	// PromptNonce is the nonce that made this invocation's prompts differ
	// from every other invocation's (settings.prompts "distinct"), or the
	// one given to replay or reuse prompts; empty when prompts depend only on
	// the seed and the request index. The same seed and nonce send the same
	// prompts byte for byte.
	PromptNonce string `json:"prompt_nonce,omitempty"`
	// Interrupted is true when the run was stopped early (Ctrl-C); the
	// results cover what was measured until then.
	Interrupted bool `json:"interrupted,omitempty"`
	// Shards lists the shard specs ("i/N") merged into this document.
	Shards []string `json:"shards,omitempty"`
	// Warnings are problems the reader must know about, e.g. a target rate
	// that could not be delivered.
	Warnings []string `json:"warnings,omitempty"`
	// TokenCalibration is how the synthetic prompts' words were fitted to
	// the server's token counts before the first run (absent when not
	// calibrated: a dataset, --input-tokens.calibrate=off, older reports).
	TokenCalibration *TokenCalibration `json:"token_calibration,omitempty"`
	GPU              *GPUInfo          `json:"gpu,omitempty"`
	// SaturationLevel is, after a saturation search, the highest level
	// that met the SLOs; SaturationReason says why the search stopped.
	SaturationLevel  float64 `json:"saturation_level,omitempty"`
	SaturationReason string  `json:"saturation_reason,omitempty"`
	// Search is, for `gpulens-loadgen search`, the bracket around the
	// largest level meeting the objectives and the evidence (search.go).
	Search *Search `json:"search,omitempty"`
	// Manifest records what the server, host and user said about the
	// configuration, and a hash of the settings; see Manifest.
	Manifest *Manifest `json:"manifest,omitempty"`
}

// Stamp marks the metadata as written by this build of gpulens-loadgen:
// the tool's name, version, revision and Go version
// (prometheus/common/version), and a new RunID.
func (m *Metadata) Stamp() {
	m.Tool = "gpulens-loadgen"
	m.Version, m.Revision, m.GoVersion = version.Version, version.Revision, runtime.Version()
	m.RunID = RandomID()
}

// RandomID returns 16 random hex digits (a run ID, a prompt nonce).
func RandomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// GPUInfo is what a gpulens exporter reported during the run.
type GPUInfo struct {
	ExporterURL string        `json:"exporter_url"`
	GPUs        []GPU         `json:"gpus"`
	MIG         []MIGInstance `json:"mig_instances,omitempty"`
	// PeakMemoryUsedBytes is the largest gpulens_gpu_memory_used_bytes seen
	// on any GPU while polling; MeanUtilizationRatio the mean of
	// gpulens_gpu_utilization_ratio over all GPUs and polls.
	PeakMemoryUsedBytes  float64 `json:"peak_memory_used_bytes"`
	MeanUtilizationRatio float64 `json:"mean_utilization_ratio"`
	Samples              int     `json:"samples"`
	// Error is set when the exporter could not be read.
	Error string `json:"error,omitempty"`
}

// GPU mirrors the labels of gpulens_gpu_info.
type GPU struct {
	GPU               string `json:"gpu"`
	UUID              string `json:"uuid"`
	Name              string `json:"name"`
	PCIBusID          string `json:"pci_bus_id,omitempty"`
	Serial            string `json:"serial,omitempty"`
	DriverVersion     string `json:"driver_version,omitempty"`
	CUDADriverVersion string `json:"cuda_driver_version,omitempty"`
	VBIOSVersion      string `json:"vbios_version,omitempty"`
}

// MIGInstance mirrors gpulens_mig_instance_info.
type MIGInstance struct {
	GPU     string            `json:"gpu"`
	Profile string            `json:"profile"`
	Labels  map[string]string `json:"labels,omitempty"`
}

// Run is the result of one level and repeat, or the aggregate of all
// repeats of a level (Aggregate true, Repeat 0).
type Run struct {
	Name      string   `json:"name"`
	Settings  Settings `json:"settings"`
	Summary   Summary  `json:"summary"`
	Level     float64  `json:"level"`
	Repeat    int      `json:"repeat"`
	Aggregate bool     `json:"aggregate"`
	// Requests are the per-request records of the run, embedded when the
	// run was sharded or asked to embed them, so that a merge can
	// recompute every statistic (exact percentiles included) over the
	// union of the shards. Absent from aggregate runs.
	Requests []Record `json:"requests,omitempty"`
	// GPU is the GPU side of this level and repeat (peak VRAM, power,
	// energy, tokens per joule), when an exporter was read; see RunGPU.
	GPU *RunGPU `json:"gpu,omitempty"`
	// ServerMetrics summarises the server's own /metrics during the run,
	// when they were scraped.
	ServerMetrics *ServerMetrics `json:"server_metrics,omitempty"`
	// Turns splits the latencies of a multi-turn run by turn; see
	// TurnSummary.
	Turns *TurnSummary `json:"turns,omitempty"`
	// PrefixCache is what the server said of its prefix cache (cached
	// tokens per request, the hit ratio) and, for a shared-prefix
	// workload, the ratio expected; Images counts the images sent
	// (prompts.go). Absent when there is nothing to say.
	PrefixCache *PrefixCacheSummary `json:"prefix_cache,omitempty"`
	Images      *ImageSummary       `json:"images,omitempty"`
}

// Settings are every knob that shaped a run.
type Settings struct {
	// Mode is ModeClosed (fixed concurrency) or ModeOpen (arrival
	// schedule).
	Mode           string  `json:"mode"`
	Concurrency    int     `json:"concurrency,omitempty"`
	Rate           float64 `json:"rate_per_second,omitempty"`
	Arrival        string  `json:"arrival,omitempty"`
	Burstiness     float64 `json:"burstiness,omitempty"`
	MaxConcurrency int     `json:"max_concurrency,omitempty"`

	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	Requests        int     `json:"requests,omitempty"`
	WarmupSeconds   float64 `json:"warmup_seconds,omitempty"`
	RampUpSeconds   float64 `json:"ramp_up_seconds,omitempty"`
	TimeoutSeconds  float64 `json:"timeout_seconds"`
	// GracePeriodSeconds is how long requests still in flight at the end of
	// DurationSeconds were given to finish before they were cancelled and
	// counted as ErrCancelledAtEnd.
	GracePeriodSeconds float64 `json:"grace_period_seconds,omitempty"`

	Endpoint string `json:"endpoint"`
	// Timestamps is the requested source of token times: "kernel" or
	// "read" (summary.kernel_timestamped_requests says how many got it).
	Timestamps   string `json:"timestamps,omitempty"`
	Model        string `json:"model"`
	InputTokens  string `json:"input_tokens,omitempty"`
	OutputTokens string `json:"output_tokens,omitempty"`
	Dataset      string `json:"dataset,omitempty"`
	// DatasetTurns is "all" when every human turn of a ShareGPT dataset's
	// conversations was sent (empty: each one's first).
	DatasetTurns string `json:"dataset_turns,omitempty"`
	MaxTokens    int    `json:"max_tokens,omitempty"`
	IgnoreEOS    bool   `json:"ignore_eos"`
	Seed         int64  `json:"seed"`
	Shard        string `json:"shard,omitempty"`
	// Prompts is PromptsDistinct or PromptsReuse (empty in reports written
	// before the choice existed, whose prompts were reused).
	Prompts string `json:"prompts,omitempty"`
	// Trace and MultiTurn describe a trace replay or multi-turn
	// conversations (workloads.go); zero (and absent from the JSON) for the
	// other workloads. Values, not pointers: settings compare with ==.
	Trace     TraceSettings     `json:"trace,omitzero"`
	MultiTurn MultiTurnSettings `json:"multi_turn,omitzero"`
	// Request is what every request carried besides its prompt
	// (request.go); zero and absent when nothing was added.
	Request RequestSettings `json:"request,omitzero"`
	// SharedPrefix and Images describe a shared-prefix workload and the
	// images sent with each request (prompts.go).
	SharedPrefix SharedPrefixSettings `json:"shared_prefix,omitzero"`
	Images       ImageSettings        `json:"images,omitzero"`

	SLO  SLO          `json:"slo"`
	Cost CostSettings `json:"cost"`
}

// SLO thresholds for goodput; zero means "not set".
type SLO struct {
	TTFTSeconds float64 `json:"ttft_seconds,omitempty"`
	TPOTSeconds float64 `json:"tpot_seconds,omitempty"`
	E2ESeconds  float64 `json:"e2e_seconds,omitempty"`
}

// Modes of a run (Settings.Mode).
const (
	// ModeClosed: a fixed number of users, each sending its next request
	// when the last ends; a level is a concurrency.
	ModeClosed = "closed"
	// ModeOpen: requests sent on an arrival schedule; a level is a rate
	// (requests/s).
	ModeOpen = "open"
)

// RunName names the run of a level: "concurrency=8" (closed loop) or
// "rate=2.5" (open loop), and " repeat=2" after it for a repeat > 0.
func RunName(mode string, level float64, repeat int) string {
	name := fmt.Sprintf("rate=%g", level)
	if mode == ModeClosed {
		name = fmt.Sprintf("concurrency=%d", int(level))
	}
	if repeat > 0 {
		name += fmt.Sprintf(" repeat=%d", repeat)
	}
	return name
}

// AggregateName names the aggregate of a level's n repeats after its
// first repeat's name: "concurrency=8 (mean of 3)" for "concurrency=8
// repeat=1".
func AggregateName(first string, n int) string {
	const rep1 = " repeat=1"
	if i := len(first) - len(rep1); i > 0 && first[i:] == rep1 {
		first = first[:i]
	}
	return first + " (mean of " + strconv.Itoa(n) + ")"
}

// CostSettings are the prices a run is billed at (RunCost computes its
// Cost; Sum in bill.go sums a campaign).
type CostSettings struct {
	GPUHourlyUSD float64 `json:"gpu_hourly_usd"`
	GPUs         int     `json:"gpus"`
	// OverheadHours are billed hours that produced no results: setup,
	// retries, idle time.
	OverheadHours float64 `json:"overhead_hours"`
}

// Validate checks the prices: the GPU-hour price by the rule every gpulens
// price follows (pricing.CheckPrice: 0 to 1000 USD).
func (p CostSettings) Validate() error {
	if err := pricing.CheckPrice(p.GPUHourlyUSD); err != nil {
		return option.Errorf("%s: %w", option.Name("GPUHourlyUSD"), err)
	}
	if p.GPUs < 1 {
		return option.Errorf("%s must be at least 1, got %d", option.Name("GPUs"), p.GPUs)
	}
	if p.OverheadHours < 0 || math.IsNaN(p.OverheadHours) {
		return option.Errorf("%s must not be negative, got %v", option.Name("OverheadHours"), p.OverheadHours)
	}
	return nil
}

// Total is the billed cost of runHours of measurement plus the overhead.
func (p CostSettings) Total(runHours float64) float64 {
	return p.GPUHourlyUSD * float64(p.GPUs) * (runHours + p.OverheadHours)
}

// Summary holds the measured results of one run. Latencies are measured
// from the intended send time (corrected for coordinated omission; equal to
// the actual send time in closed loop); the *_from_send_seconds
// distributions are measured from the moment the request was actually sent.
// TTFT is the time to the first generated token of any kind, reasoning
// included; the Reasoning side (present when a reasoning model answered)
// holds the time to the first answer token and the answer's own ITL and
// TPOT.
type Summary struct {
	RequestsCompleted int `json:"requests_completed"`
	RequestsFailed    int `json:"requests_failed"`
	WarmupRequests    int `json:"warmup_requests"`
	// RequestsInterrupted counts the measured requests that were in flight
	// when the run was interrupted: neither completed nor failed, and in
	// no latency distribution.
	RequestsInterrupted int            `json:"requests_interrupted,omitempty"`
	Errors              map[string]int `json:"errors"`

	TTFT Dist `json:"ttft_seconds"`
	ITL  Dist `json:"itl_seconds"`
	TPOT Dist `json:"tpot_seconds"`
	E2E  Dist `json:"e2e_seconds"`

	TTFTFromSend Dist `json:"ttft_from_send_seconds"`
	E2EFromSend  Dist `json:"e2e_from_send_seconds"`
	// RequestOutputTokensPerSecond is the per-request output rate
	// output_tokens / (end − actual send).
	RequestOutputTokensPerSecond Dist `json:"request_output_tokens_per_second"`
	InputTokens                  Dist `json:"input_tokens"`
	OutputTokens                 Dist `json:"output_tokens"`
	// InputTokensRequested and OutputTokensRequested are the lengths asked
	// for (Record.RequestedInputTokens, RequestedOutputTokens) of the
	// completed requests that asked for one, to set against InputTokens
	// and OutputTokens, the server's counts (TokenDeviations). Absent in
	// reports before they were recorded, and without such requests.
	InputTokensRequested  *Dist `json:"input_tokens_requested,omitempty"`
	OutputTokensRequested *Dist `json:"output_tokens_requested,omitempty"`

	DurationSeconds       float64 `json:"duration_seconds"`
	InputTokensTotal      int64   `json:"input_tokens_total"`
	OutputTokensTotal     int64   `json:"output_tokens_total"`
	RequestThroughput     float64 `json:"request_throughput_per_second"`
	OutputTokensPerSecond float64 `json:"output_tokens_per_second"`
	TotalTokensPerSecond  float64 `json:"total_tokens_per_second"`
	GoodRequests          int     `json:"good_requests"`
	GoodputPerSecond      float64 `json:"goodput_per_second"`
	GoodputRatio          float64 `json:"goodput_ratio"`
	TargetRatePerSecond   float64 `json:"target_rate_per_second,omitempty"`
	AchievedRatePerSecond float64 `json:"achieved_rate_per_second"`
	RateNotAchieved       bool    `json:"rate_not_achieved"`
	ScheduleLag           Dist    `json:"schedule_lag_seconds"`
	TokensEstimated       bool    `json:"tokens_estimated"`
	UsageMismatches       int     `json:"usage_mismatches"`
	// Reasoning splits the output into reasoning and answer when some
	// completed request reasoned (Record.Reasoned); nil otherwise, when
	// every token was an answer token and TTFT is the answer's.
	Reasoning *ReasoningSummary `json:"reasoning,omitempty"`
	// KernelTimestamped counts the completed requests whose token times
	// are kernel receive times (the rest: when the reads returned).
	KernelTimestamped          int     `json:"kernel_timestamped_requests"`
	Cost                       Cost    `json:"cost"`
	MaxInFlight                int     `json:"max_in_flight"`
	MeasuredConcurrencyAverage float64 `json:"measured_concurrency_average"`

	// Stats is set on aggregate runs: for every metric (keyed like
	// "ttft_seconds.p99" or "output_tokens_per_second") the mean, standard
	// deviation and Student-t 95 % confidence interval across repeats.
	Stats map[string]Stat `json:"stats,omitempty"`
}

// ReasoningSummary is the reasoning side of a run (Summary.Reasoning):
// the reasoning and answer tokens apart, and the latencies of the answer
// alone, over the completed requests (those that did not reason
// included: their answer started with their first token).
type ReasoningSummary struct {
	// Requests counts the completed requests that reasoned.
	Requests int `json:"requests"`
	// ReasoningTokens and AnswerTokens are per request; the totals are
	// over the run (OutputTokensTotal is their sum).
	ReasoningTokens      Dist  `json:"reasoning_tokens"`
	AnswerTokens         Dist  `json:"answer_tokens"`
	ReasoningTokensTotal int64 `json:"reasoning_tokens_total"`
	AnswerTokensTotal    int64 `json:"answer_tokens_total"`
	// AnswerTTFT is the time to the first answer token (from the intended
	// send, as TTFT), of the requests whose answer began; AnswerITL the
	// inter-token latencies between answer tokens and AnswerTPOT (E2E −
	// AnswerTTFT) / (answer tokens − 1), as ITL and TPOT are over all
	// tokens.
	AnswerTTFT Dist `json:"answer_ttft_seconds"`
	AnswerITL  Dist `json:"answer_itl_seconds"`
	AnswerTPOT Dist `json:"answer_tpot_seconds"`
	// NoAnswer counts the completed requests that reasoned but sent no
	// answer token (the output length ran out while reasoning).
	NoAnswer int `json:"requests_without_answer,omitempty"`
}

// Dist summarises a distribution. All fields are zero for an empty one.
type Dist struct {
	Count  int     `json:"count"`
	Mean   float64 `json:"mean"`
	Stddev float64 `json:"stddev"`
	P50    float64 `json:"p50"`
	P90    float64 `json:"p90"`
	P95    float64 `json:"p95"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Stat is a metric across the repeats of one level.
type Stat struct {
	N        int     `json:"n"`
	Mean     float64 `json:"mean"`
	Stddev   float64 `json:"stddev"`
	CI95Low  float64 `json:"ci95_low"`
	CI95High float64 `json:"ci95_high"`
}

// Cost is what the run cost, from the GPU hourly price. See docs/cost.md.
type Cost struct {
	PerRequestUSD             float64 `json:"per_request_usd"`
	Per1kRequestsUSD          float64 `json:"per_1k_requests_usd"`
	PerMillionInputTokensUSD  float64 `json:"per_million_input_tokens_usd"`
	PerMillionOutputTokensUSD float64 `json:"per_million_output_tokens_usd"`
	TotalUSD                  float64 `json:"total_usd"`
	BilledHours               float64 `json:"billed_hours"`
}

// Named is a report and the name (its file) it is known by in errors and
// results: the input of merge, cost and compare.
type Named struct {
	Name string
	Doc  *Document
}

// ReadAll reads the reports at paths, each named by its path; the error
// names the file that could not be read.
func ReadAll(paths []string) ([]Named, error) {
	out := make([]Named, 0, len(paths))
	for _, p := range paths {
		d, err := Read(p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		out = append(out, Named{Name: p, Doc: d})
	}
	return out, nil
}

// Read parses the report at path.
func Read(path string) (*Document, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading report: %w", err)
	}
	return Parse(b, path)
}

// Parse decodes a report; name is used in error messages.
func Parse(b []byte, name string) (*Document, error) {
	var d Document
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&d); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line := 1 + bytes.Count(b[:min(int(se.Offset), len(b))], []byte("\n"))
			return nil, fmt.Errorf("parsing report %s: line %d: %w", name, line, err)
		}
		return nil, fmt.Errorf("parsing report %s: %w", name, err)
	}
	if d.Metadata.SchemaVersion > SchemaVersion {
		return nil, fmt.Errorf("report %s: metadata.schema_version %d is newer than supported %d", name, d.Metadata.SchemaVersion, SchemaVersion)
	}
	return &d, nil
}

// Write writes the document as indented JSON to path (the package's Write: a
// regular file atomically, a device, FIFO or symlink in place). NaN and
// infinite values, which JSON cannot carry, are written as 0.
func (d *Document) Write(path string) error {
	b, err := d.Marshal()
	if err != nil {
		return err
	}
	if err := WriteBytes(path, b); err != nil {
		return fmt.Errorf("writing report %s: %w", path, err)
	}
	return nil
}

// Marshal returns the document as indented JSON with a trailing newline.
func (d *Document) Marshal() ([]byte, error) {
	c := *d
	if c.Metadata.SchemaVersion == 0 {
		c.Metadata.SchemaVersion = SchemaVersion
	}
	c.Runs = make([]Run, len(d.Runs))
	for i, r := range d.Runs {
		r.Summary = r.Summary.sanitized()
		c.Runs[i] = r
	}
	if c.Metadata.GPU != nil {
		g := *c.Metadata.GPU
		g.PeakMemoryUsedBytes = finite(g.PeakMemoryUsedBytes)
		g.MeanUtilizationRatio = finite(g.MeanUtilizationRatio)
		c.Metadata.GPU = &g
	}
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding report: %w", err)
	}
	return append(b, '\n'), nil
}

func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}

func (d Dist) sanitized() Dist {
	return Dist{Count: d.Count, Mean: finite(d.Mean), Stddev: finite(d.Stddev), P50: finite(d.P50), P90: finite(d.P90),
		P95: finite(d.P95), P99: finite(d.P99), Max: finite(d.Max)}
}

func (s Summary) sanitized() Summary {
	if s.Errors == nil {
		s.Errors = map[string]int{}
	} else {
		s.Errors = copyMap(s.Errors)
	}
	for _, d := range []*Dist{&s.TTFT, &s.ITL, &s.TPOT, &s.E2E, &s.TTFTFromSend, &s.E2EFromSend,
		&s.RequestOutputTokensPerSecond, &s.InputTokens, &s.OutputTokens, &s.ScheduleLag} {
		*d = d.sanitized()
	}
	if s.Reasoning != nil {
		r := *s.Reasoning
		for _, d := range []*Dist{&r.ReasoningTokens, &r.AnswerTokens, &r.AnswerTTFT, &r.AnswerITL, &r.AnswerTPOT} {
			*d = d.sanitized()
		}
		s.Reasoning = &r
	}
	for _, f := range []*float64{&s.DurationSeconds, &s.RequestThroughput, &s.OutputTokensPerSecond, &s.TotalTokensPerSecond,
		&s.GoodputPerSecond, &s.GoodputRatio, &s.TargetRatePerSecond, &s.AchievedRatePerSecond, &s.MeasuredConcurrencyAverage,
		&s.Cost.PerRequestUSD, &s.Cost.Per1kRequestsUSD, &s.Cost.PerMillionInputTokensUSD, &s.Cost.PerMillionOutputTokensUSD,
		&s.Cost.TotalUSD, &s.Cost.BilledHours} {
		*f = finite(*f)
	}
	if s.Stats != nil {
		st := make(map[string]Stat, len(s.Stats))
		for k, v := range s.Stats {
			st[k] = Stat{N: v.N, Mean: finite(v.Mean), Stddev: finite(v.Stddev), CI95Low: finite(v.CI95Low), CI95High: finite(v.CI95High)}
		}
		s.Stats = st
	}
	return s
}

func copyMap(m map[string]int) map[string]int {
	c := make(map[string]int, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}
