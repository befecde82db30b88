package report

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// The fields below are what an evaluation campaign records beyond latency
// and throughput (docs/loadgen.md, "Evaluation campaigns"): the GPU side of
// every level and repeat, what the server said it is, and the server's own
// metrics during the run. They hang off Run and Metadata as optional
// pointers so that reports written before they existed still read back.

// RunGPU is what the gpulens exporter reported while one level and repeat
// ran (Run.GPU): the GPUs serving the model, polled every few seconds.
// Energy comes from the GPUs' energy counters (the increase over the run),
// falling back to mean power × duration when a counter is missing
// (EnergyFromPower then says so).
type RunGPU struct {
	// GPUs holds one entry per GPU serving, in exporter order.
	GPUs []RunGPUDevice `json:"gpus"`
	// PeakMemoryUsedBytes is the peak, over the polls, of the memory used
	// summed over the GPUs serving.
	PeakMemoryUsedBytes float64 `json:"peak_memory_used_bytes"`
	// MeanUtilizationRatio is the mean over GPUs and polls (0–1).
	MeanUtilizationRatio float64 `json:"mean_utilization_ratio"`
	// MeanPowerWatts is the mean of the summed power draw over the polls.
	MeanPowerWatts float64 `json:"mean_power_watts"`
	// EnergyJoules is the energy the GPUs used during the run, summed.
	EnergyJoules    float64 `json:"energy_joules"`
	EnergyFromPower bool    `json:"energy_from_power,omitempty"`
	// OutputTokensPerJoule is Summary.OutputTokensTotal / EnergyJoules and
	// EnergyPerRequestJoules EnergyJoules / Summary.RequestsCompleted; zero
	// when undefined.
	OutputTokensPerJoule   float64 `json:"output_tokens_per_joule"`
	EnergyPerRequestJoules float64 `json:"energy_per_request_joules"`
	Samples                int     `json:"samples"`
	// Error is set when the exporter could not be read during the run.
	Error string `json:"error,omitempty"`
	// DurationSeconds is the span the energy covers: from the scrape
	// before the run's first request to the one after its end (absent in
	// reports before it was recorded).
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	// EnergyExtrapolatedRatio is the share of EnergyJoules estimated from
	// the power draw beyond the energy counter's readings (the exporter
	// reads it once per sampler interval) rather than interpolated
	// between two of them: near 1 for a run shorter than the interval.
	EnergyExtrapolatedRatio float64 `json:"energy_extrapolated_ratio,omitempty"`
	// Warning says when the run is too short for a trustworthy energy
	// figure (EnergyExtrapolatedRatio above one half).
	Warning string `json:"warning,omitempty"`
}

// RunGPUDevice is one GPU's share of RunGPU.
type RunGPUDevice struct {
	GPU                  string  `json:"gpu"`
	UUID                 string  `json:"uuid"`
	Name                 string  `json:"name,omitempty"`
	PeakMemoryUsedBytes  float64 `json:"peak_memory_used_bytes"`
	MeanUtilizationRatio float64 `json:"mean_utilization_ratio"`
	MeanPowerWatts       float64 `json:"mean_power_watts"`
	EnergyJoules         float64 `json:"energy_joules"`
}

// Manifest is what makes a report reproducible and two reports comparable
// (Metadata.Manifest).
type Manifest struct {
	// Server holds what the server said about itself, one entry per
	// endpoint asked (answered or not).
	Server []ServerFact `json:"server,omitempty"`
	// ServerVersion and ModelRevision are the server's version and the
	// model revision (commit, sha, digest) when an endpoint told them.
	ServerVersion string `json:"server_version,omitempty"`
	ModelRevision string `json:"model_revision,omitempty"`
	// Host is the load generator's host.
	Host HostFacts `json:"host"`
	// Labels are the user's key=value labels (container image digest,
	// framework version, evaluation code commit…).
	Labels map[string]string `json:"labels,omitempty"`
	// SettingsHash is the hex SHA-256 of the canonical JSON of everything
	// that shapes the workload and its measurement (the run settings, the
	// dataset hash, the model, the endpoint kind; not the run ID, times,
	// nonce or target host): equal hashes mean "same configuration".
	SettingsHash string `json:"settings_hash"`
}

// ServerFact is one endpoint's answer, e.g. vLLM's GET /version.
type ServerFact struct {
	// Endpoint is the method and path asked, e.g. "GET /version".
	Endpoint string `json:"endpoint"`
	// Status is the HTTP status (0 when the request failed).
	Status int `json:"status"`
	// Fields are the answer's scalar fields worth keeping (strings and
	// numbers as text), e.g. {"version": "0.11.0"}.
	Fields map[string]string `json:"fields,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// HostFacts describe the machine the load generator ran on.
type HostFacts struct {
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Kernel   string `json:"kernel,omitempty"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	Hostname string `json:"hostname,omitempty"`
}

// ServerMetrics summarises the inference server's own Prometheus metrics
// scraped during one level and repeat (Run.ServerMetrics).
type ServerMetrics struct {
	// URL is the scraped /metrics URL, without credentials; Flavor the
	// server kind recognised from the metric names ("vllm", "tgi",
	// "sglang", or "" when none was).
	URL     string `json:"url"`
	Flavor  string `json:"flavor,omitempty"`
	Samples int    `json:"samples"`
	// Series maps a normalised name to its summary over the run. Names:
	// "kv_cache_usage_ratio", "requests_running", "requests_waiting"
	// (gauges: mean, max, last), "preemptions" (a counter: Increase) and
	// "prefix_cache_hit_ratio" (the share of prompt tokens served from the
	// prefix cache: Mean over the run, Max and Last per scrape interval).
	Series map[string]SeriesSummary `json:"series,omitempty"`
	Error  string                   `json:"error,omitempty"`
	// Timeline holds every scrape, in order (the HTML report's timeline).
	Timeline []ServerSample `json:"timeline,omitempty"`
}

// SeriesSummary is one server metric over a run.
type SeriesSummary struct {
	// Source is the server's own metric name it came from.
	Source   string  `json:"source"`
	Mean     float64 `json:"mean"`
	Max      float64 `json:"max"`
	Last     float64 `json:"last"`
	Increase float64 `json:"increase,omitempty"`
}

// SetWork derives the per-work figures from what the run did:
// OutputTokensPerJoule = outputTokens / EnergyJoules and
// EnergyPerRequestJoules = EnergyJoules / completed, each zero when its
// divisor is.
func (g *RunGPU) SetWork(outputTokens int64, completed int) {
	g.OutputTokensPerJoule, g.EnergyPerRequestJoules = 0, 0
	if g.EnergyJoules > 0 {
		g.OutputTokensPerJoule = float64(outputTokens) / g.EnergyJoules
	}
	if completed > 0 {
		g.EnergyPerRequestJoules = g.EnergyJoules / float64(completed)
	}
}

// Answer is what the server answered to one measured request, for an
// evaluation harness to score apart from the timing: optional text on the
// request's Record (Record.Answer, kept when responses are saved), written
// with the record's name and outcome as one line of the saved-responses
// file (WriteResponses; docs/loadgen.md, "Saved responses"). Nothing here
// is scored.
type Answer struct {
	// DatasetRow is where the prompt is in the dataset file: its line
	// (JSONL) or its position in the array (ShareGPT), counted from 1; 0
	// (absent) for synthetic prompts. ID and Reference are the dataset
	// row's "id" and "reference" (or "expected") fields, copied through.
	DatasetRow int             `json:"dataset_row,omitempty"`
	ID         string          `json:"id,omitempty"`
	Reference  json.RawMessage `json:"reference,omitempty"`
	// PromptSHA256 is the hex SHA-256 of the prompt exactly as sent (with
	// its leading tag when prompts are distinct); Prompt is its text, when
	// asked for.
	PromptSHA256 string `json:"prompt_sha256"`
	Prompt       string `json:"prompt,omitempty"`
	// Response is the generated text (content, or text for completions);
	// Reasoning the reasoning text a server streamed apart from it
	// (reasoning_content, reasoning).
	Response     string `json:"response"`
	Reasoning    string `json:"reasoning,omitempty"`
	FinishReason string `json:"finish_reason,omitempty"`
}

// responseLine is one line of the saved-responses file: the record's run,
// index and outcome around its Answer. The layout is the file's format
// (docs/loadgen.md), unchanged since the file was first written.
type responseLine struct {
	Run    string  `json:"run"`
	Level  float64 `json:"level"`
	Repeat int     `json:"repeat"`
	Index  int     `json:"index"`
	*Answer
	PromptTokens    int    `json:"prompt_tokens"`
	OutputTokens    int    `json:"output_tokens"`
	TokensEstimated bool   `json:"tokens_estimated,omitempty"`
	ErrorClass      string `json:"error_class,omitempty"`
}

// WriteResponses writes the answer of every record that has one, one per
// line as JSON, HTML characters unescaped: the record's Run, Level,
// Repeat, Index, token counts and error class with its Answer.
func WriteResponses(w io.Writer, recs []Record) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range recs {
		r := &recs[i]
		if r.Answer == nil {
			continue
		}
		line := responseLine{Run: r.Run, Level: r.Level, Repeat: r.Repeat, Index: r.Index, Answer: r.Answer,
			PromptTokens: r.PromptTokens, OutputTokens: r.OutputTokens, TokensEstimated: r.TokensEstimated, ErrorClass: r.ErrorClass}
		if err := enc.Encode(&line); err != nil {
			return err
		}
	}
	return nil
}

// ReadResponses reads what WriteResponses wrote: one record per line, with
// its Answer and the fields the line holds.
func ReadResponses(r io.Reader) ([]Record, error) {
	var recs []Record
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 256<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		x := responseLine{Answer: &Answer{}}
		if err := json.Unmarshal(sc.Bytes(), &x); err != nil {
			return recs, fmt.Errorf("response on line %d: %w", line, err)
		}
		recs = append(recs, Record{Run: x.Run, Level: x.Level, Repeat: x.Repeat, Index: x.Index, Answer: x.Answer,
			PromptTokens: x.PromptTokens, OutputTokens: x.OutputTokens, TokensEstimated: x.TokensEstimated, ErrorClass: x.ErrorClass})
	}
	return recs, sc.Err()
}
