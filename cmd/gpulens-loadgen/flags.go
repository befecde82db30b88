package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// loadFlags are the flags shared by run and sweep.
type loadFlags struct {
	web         *web.FlagConfig
	metricsPath string

	target, model, endpoint, apiKeyFile, scenario string
	timeout                                       time.Duration
	continuousUsage                               bool
	timestamps                                    string
	tlsCAFile                                     string
	tlsInsecure                                   bool

	arrival        string
	burstiness     float64
	maxConcurrency int
	duration       time.Duration
	requests       int
	warmup, rampUp time.Duration
	shard          string

	inputTokens, outputTokens, dataset string
	datasetTurns                       string
	calibrate                          string
	calibrateTimeout                   time.Duration
	maxTokens                          int
	ignoreEOS                          bool
	seed                               int64
	prompts, promptNonce               string
	gracePeriod                        time.Duration

	slo                       string
	objectives                []string // level objectives of --slo, for search (searchflags.go)
	gpuHourly, overheadHours  float64
	gpus                      int
	exporterURL               string
	output, saveRequests, csv string
	embedRequests             bool
	progress                  bool
	linger                    time.Duration

	// status is the exit status of the last execute that returned nil.
	status int

	// workload: trace replay, multi-turn, server metrics (workloadflags.go).
	workload *workloadFlags
	prompt   *promptFlags
	// eval: per-run GPU side, manifest, saved responses (evalflags.go).
	eval *evalFlags
	// request: extra body, headers, system prompt (requestflags.go).
	request *requestFlags
}

func (f *loadFlags) exitStatus() int { return f.status }

func addLoadFlags(cmd *kingpin.CmdClause) *loadFlags {
	f := &loadFlags{}
	f.web = kingpinflag.AddFlags(cmd, ":9843")
	cmd.Flag("web.telemetry-path", "Path under which to expose the live load metrics.").Default("/metrics").StringVar(&f.metricsPath)
	cmd.Flag("target", "Base URL of the OpenAI-compatible API, ending in /v1.").Required().StringVar(&f.target)
	cmd.Flag("model", "Model name to request.").Required().StringVar(&f.model)
	cmd.Flag("endpoint", "API to call: chat or completions.").Default("chat").EnumVar(&f.endpoint, "chat", "completions")
	cmd.Flag("api-key-file", "File holding the API key (else $OPENAI_API_KEY). Never logged or reported.").StringVar(&f.apiKeyFile)
	cliflag.Duration(cmd, "timeout", "Timeout of one request, from send to last byte.", "300s", &f.timeout)
	cmd.Flag("continuous-usage", "Ask for usage on every chunk (vLLM stream_options.continuous_usage_stats) for exact per-chunk token counts.").BoolVar(&f.continuousUsage)
	cmd.Flag("tls.ca-file", "PEM file of CA certificates to trust for an https:// target (instead of the system's).").StringVar(&f.tlsCAFile)
	cmd.Flag("tls.insecure-skip-verify", "Do not verify an https:// target's certificate (test servers only).").BoolVar(&f.tlsInsecure)
	cmd.Flag("timestamps", "Token times: kernel (when the bytes arrived: the kernel's receive timestamps, Linux; elsewhere falls back to read; a chunk not read before the next one arrives gets the later time) or read (when the load generator's read returned, which adds its own scheduling delays).").Default("kernel").EnumVar(&f.timestamps, "kernel", "read")
	cmd.Flag("scenario", "Free-form scenario name, a label on every metric.").Default("default").StringVar(&f.scenario)
	cmd.Flag("arrival", "Open-loop arrival process: constant, poisson or gamma.").Default("poisson").EnumVar(&f.arrival, "constant", "poisson", "gamma")
	cmd.Flag("burstiness", "Gamma shape k for --arrival gamma (1 = Poisson, <1 burstier).").Default("1").Float64Var(&f.burstiness)
	cmd.Flag("max-concurrency", "Open loop: cap on requests in flight (0 = none).").Default("0").IntVar(&f.maxConcurrency)
	cliflag.Duration(cmd, "duration", "Measured duration of each run (after warmup).", "", &f.duration)
	cmd.Flag("requests", "Measured requests of each run (after warmup).").IntVar(&f.requests)
	cliflag.Duration(cmd, "grace-period", "With --duration: requests still in flight when it ends get this long to finish, then they are cancelled and counted as failed (error class cancelled_at_end). Set it above the longest request you expect.", "30s", &f.gracePeriod)
	cliflag.Duration(cmd, "warmup", "Requests sent during this initial time are excluded from results.", "0s", &f.warmup)
	cliflag.Duration(cmd, "ramp-up", "Closed loop: start users evenly over this time; open loop: ramp the rate linearly.", "0s", &f.rampUp)
	cmd.Flag("shard", "Run only worker i of N's part (round-robin by request index) of the seeded schedule: i/N.").StringVar(&f.shard)
	cmd.Flag("input-tokens", "Synthetic prompt length: fixed:N, uniform:LO,HI, normal:MEAN,SD or lognormal:MEDIAN,SIGMA, with optional ,min=N,max=N.").Default("fixed:256").StringVar(&f.inputTokens)
	cmd.Flag("input-tokens.calibrate", "Fit the synthetic prompts (--input-tokens, --turns histories, traces) to the server's own token counts before the first run (with --dataset: count its replies, the output lengths, in the server's tokens): tokenize (the server's POST /tokenize, vLLM's: exact, sends no generation), usage (six requests with max_tokens 1, from the prompt_tokens the server reports), auto (tokenize where the server has it, else usage) or off (one word per token asked for). Recorded in metadata.token_calibration; its requests are in no run.").Default("auto").EnumVar(&f.calibrate, "auto", "tokenize", "usage", "off")
	cliflag.Duration(cmd, "input-tokens.calibrate-timeout", "Time limit of the whole calibration (0s: the first run's own bound, --warmup + --duration + --grace-period, or --timeout with --requests). A server that has not answered by then ends the command before its first run (exit status 3), the report saying what did not answer.", "0s", &f.calibrateTimeout)
	cmd.Flag("output-tokens", "Output length (max_tokens) distribution, same syntax as --input-tokens.").Default("fixed:128").StringVar(&f.outputTokens)
	cmd.Flag("dataset", "Prompts from a JSONL file ({\"prompt\": ...}, optional \"output_tokens\" in the server's tokens or a \"completion\"/\"response\" reply) or a ShareGPT JSON file instead of synthetic ones; a reply's length, counted in the server's tokens by --input-tokens.calibrate, is the output length.").StringVar(&f.dataset)
	cmd.Flag("dataset.turns", "Which prompts of a ShareGPT --dataset are sent: first (each conversation's first human turn) or all (every human turn, after the conversation's earlier turns as chat history).").Default(workload.DatasetTurnsFirst).EnumVar(&f.datasetTurns, workload.DatasetTurnsFirst, workload.DatasetTurnsAll)
	cmd.Flag("max-tokens", "Cap on max_tokens of every request (0 = none).").Default("0").IntVar(&f.maxTokens)
	cmd.Flag("ignore-eos", "Send ignore_eos so the server generates exactly max_tokens (vLLM, SGLang).").BoolVar(&f.ignoreEOS)
	cmd.Flag("seed", "Seed of prompts, lengths and arrival schedule.").Default("1").Int64Var(&f.seed)
	cmd.Flag("prompts", "distinct: every level, repeat and invocation sends prompts of its own (a nonce drawn per invocation, recorded as metadata.prompt_nonce), so a server's prefix cache cannot serve one run from another's; reuse: the same prompts at every level and repeat, and in every invocation with the same --seed (and --prompt-nonce), for deliberate cache-warm measurements.").Default(report.PromptsDistinct).EnumVar(&f.prompts, report.PromptsDistinct, report.PromptsReuse)
	cmd.Flag("prompt-nonce", "Nonce of the prompts instead of a random one (1-64 letters, digits, - or _): with a report's metadata.prompt_nonce and the same --seed, replays its prompts byte for byte.").PlaceHolder("NONCE").StringVar(&f.promptNonce)
	cmd.Flag("slo", "Goodput SLOs, e.g. ttft=500ms,tpot=50ms,e2e=10s (what makes a request good). Repeatable. search also takes level objectives, one per flag: ttft:p99<=500ms, goodput>=0.95, errors<=0.01.").SetValue(&sloFlag{perRequest: &f.slo, objectives: &f.objectives})
	cliflag.Price(cmd, "cost.gpu-hourly-usd", "Price of one GPU-hour in USD (0 to 1000; 0: no cost figures).", "0", &f.gpuHourly)
	cmd.Flag("cost.gpus", "GPUs billed.").Default("1").IntVar(&f.gpus)
	cmd.Flag("cost.overhead-hours", "Billed hours that produced no results (setup, retries, idle), added to each run's cost.").Default("0").Float64Var(&f.overheadHours)
	cmd.Flag("exporter.url", "URL of a gpulens exporter's /metrics: records GPU model, driver, MIG profile and, for every run, peak VRAM, mean utilisation and power, energy, output tokens per joule and energy per request.").StringVar(&f.exporterURL)
	cmd.Flag("output", "Write the JSON report to this file.").StringVar(&f.output)
	cmd.Flag("save-requests", "Write one JSON line per measured request to this file.").StringVar(&f.saveRequests)
	cmd.Flag("embed-requests", "Embed every measured request's raw record in the JSON report, as `merge` needs (on with --shard).").BoolVar(&f.embedRequests)
	cmd.Flag("csv", "Write a CSV summary (one row per run) to this file.").StringVar(&f.csv)
	cliflag.Duration(cmd, "linger", "After the run and its reports, keep serving /metrics this long so a last scrape sees the final counts (Ctrl-C ends it).", "0s", &f.linger)
	cmd.Flag("progress", "Show a progress line on stderr (default: when stderr is a terminal).").Default("true").BoolVar(&f.progress)
	f.workload = addWorkloadFlags(cmd)
	f.prompt = addPromptFlags(cmd)
	f.eval = addEvalFlags(cmd)
	f.request = addRequestFlags(cmd)
	return f
}

// parseSLO parses "ttft=500ms,tpot=50ms,e2e=10s".
func parseSLO(s string) (report.SLO, error) {
	var slo report.SLO
	if strings.TrimSpace(s) == "" {
		return slo, nil
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		d, err := time.ParseDuration(v)
		if !ok || err != nil || d <= 0 {
			return slo, fmt.Errorf("--slo %q: %q is not name=duration with a positive duration", s, part)
		}
		switch k {
		case "ttft":
			slo.TTFTSeconds = d.Seconds()
		case "tpot":
			slo.TPOTSeconds = d.Seconds()
		case "e2e":
			slo.E2ESeconds = d.Seconds()
		default:
			return slo, fmt.Errorf("--slo %q: unknown SLO %q (want ttft, tpot or e2e)", s, k)
		}
	}
	return slo, nil
}

// parseLevels parses "1,2,4,8" into positive numbers.
func parseLevels(flag, s string) ([]float64, error) {
	var out []float64
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		v, err := strconv.ParseFloat(p, 64)
		if err != nil || !(v > 0) {
			return nil, fmt.Errorf("%s %q: %q is not a positive number", flag, s, p)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no levels given", flag)
	}
	return out, nil
}

// tlsConfig is the client TLS configuration from --tls.*; nil: defaults.
func (f *loadFlags) tlsConfig() (*tls.Config, error) {
	if f.tlsCAFile == "" && !f.tlsInsecure {
		return nil, nil
	}
	cfg := &tls.Config{InsecureSkipVerify: f.tlsInsecure} //nolint:gosec // asked for by the flag
	if f.tlsCAFile != "" {
		pem, err := os.ReadFile(f.tlsCAFile)
		if err != nil {
			return nil, fmt.Errorf("--tls.ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls.ca-file %s: no PEM certificates in it", f.tlsCAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

func (f *loadFlags) apiKey() (string, error) {
	if f.apiKeyFile != "" {
		b, err := os.ReadFile(f.apiKeyFile)
		if err != nil {
			return "", fmt.Errorf("--api-key-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return os.Getenv("OPENAI_API_KEY"), nil
}

// options are the campaign's options from the flags; the errors are the
// flags' (the campaign checks the rest).
func (f *loadFlags) options() (campaign.Options, error) {
	o := campaign.Options{Calibrate: f.calibrate, CalibrateTimeout: f.calibrateTimeout, Prompts: f.prompts, Scenario: f.scenario, ExporterURL: f.exporterURL, EmbedRequests: f.embedRequests,
		KeepRecords: f.saveRequests != "", Prices: report.CostSettings{GPUHourlyUSD: f.gpuHourly, GPUs: f.gpus, OverheadHours: f.overheadHours}}
	var (
		shard   runner.Shard // zero: not sharded
		in, out workload.Length
		dataset *workload.Dataset
		err     error
	)
	if o.SLO, err = parseSLO(f.slo); err != nil {
		return o, err
	}
	if f.shard != "" {
		if shard, err = runner.ParseShard(f.shard); err != nil {
			return o, err
		}
	}
	if in, err = workload.ParseLength("--input-tokens", f.inputTokens); err != nil {
		return o, err
	}
	if out, err = workload.ParseLength("--output-tokens", f.outputTokens); err != nil {
		return o, err
	}
	if f.dataset != "" {
		if dataset, err = workload.LoadDataset(f.dataset); err != nil {
			return o, err
		}
	}
	if f.linger < 0 {
		return o, fmt.Errorf("--linger must not be negative, got %v", f.linger)
	}
	if f.gracePeriod <= 0 {
		return o, fmt.Errorf("--grace-period must be positive, got %v", f.gracePeriod)
	}
	key, err := f.apiKey()
	if err != nil {
		return o, err
	}
	tlsCfg, err := f.tlsConfig()
	if err != nil {
		return o, err
	}
	o.Client = client.Config{BaseURL: f.target, Endpoint: f.endpoint, Model: f.model, APIKey: key, Timeout: f.timeout,
		ContinuousUsage: f.continuousUsage, ReadTimestamps: f.timestamps == "read", TLS: tlsCfg}
	o.Workload = workload.Config{Seed: f.seed, Input: in, Output: out, Dataset: dataset, DatasetTurns: f.datasetTurns, MaxTokens: f.maxTokens,
		IgnoreEOS: f.ignoreEOS, Nonce: f.promptNonce}
	o.Run = runner.Config{Duration: f.duration, Requests: f.requests, Warmup: f.warmup, RampUp: f.rampUp, GracePeriod: f.gracePeriod,
		MaxConcurrency: f.maxConcurrency, Schedule: runner.ScheduleConfig{Arrival: f.arrival, Burstiness: f.burstiness}, Shard: shard}
	if err := f.request.apply(&o); err != nil {
		return o, err
	}
	if err := f.eval.apply(&o); err != nil {
		return o, err
	}
	if err := f.prompt.apply(&o); err != nil {
		return o, err
	}
	// apply changes o: read it after the call (in one return statement
	// Go may read o first).
	err = f.workload.apply(&o, f.target)
	return o, err
}
