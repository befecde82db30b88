package main

import (
	"fmt"
	"os"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/exporter-toolkit/web"
	"github.com/prometheus/exporter-toolkit/web/kingpinflag"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/loadgen/campaign"
)

// loadFlags are the flags shared by run, sweep and search: the campaign's
// settings (campaign.Settings, one field a flag) and what only the
// command does (its listener, the files it writes, the linger, the
// progress line).
type loadFlags struct {
	set campaign.Settings

	web         *web.FlagConfig
	metricsPath string

	objectives                []string // level objectives of --slo, for search (searchflags.go)
	output, saveRequests, csv string
	saveResponses             string
	progress                  bool
	linger                    time.Duration

	// status is the exit status of the last execute that returned nil.
	status int
}

func (f *loadFlags) exitStatus() int { return f.status }

func addLoadFlags(cmd *kingpin.CmdClause) *loadFlags {
	f := &loadFlags{}
	d := campaign.DefaultSettings()
	f.web = kingpinflag.AddFlags(cmd, ":9843")
	cmd.Flag("web.telemetry-path", "Path under which to expose the live load metrics.").Default("/metrics").StringVar(&f.metricsPath)
	cmd.Flag("target", "Base URL of the OpenAI-compatible API, ending in /v1.").Required().StringVar(&f.set.Target)
	cmd.Flag("model", "Model name to request.").Required().StringVar(&f.set.Model)
	cmd.Flag("endpoint", "API to call: chat or completions.").Default(d.Endpoint).EnumVar(&f.set.Endpoint, campaign.Choices("Endpoint")...)
	cmd.Flag("api-key-file", "File holding the API key (else $OPENAI_API_KEY). Never logged or reported.").StringVar(&f.set.APIKeyFile)
	cliflag.Duration(cmd, "timeout", "Timeout of one request, from send to last byte.", "300s", &f.set.Timeout)
	cmd.Flag("continuous-usage", "Ask for usage on every chunk (vLLM stream_options.continuous_usage_stats) for exact per-chunk token counts.").BoolVar(&f.set.ContinuousUsage)
	cmd.Flag("tls.ca-file", "PEM file of CA certificates to trust for an https:// target (instead of the system's).").StringVar(&f.set.TLSCAFile)
	cmd.Flag("tls.insecure-skip-verify", "Do not verify an https:// target's certificate (test servers only).").BoolVar(&f.set.TLSInsecureSkipVerify)
	cmd.Flag("timestamps", "Token times: kernel (when the bytes arrived: the kernel's receive timestamps, Linux; elsewhere falls back to read; a chunk not read before the next one arrives gets the later time) or read (when the load generator's read returned, which adds its own scheduling delays).").Default(d.Timestamps).EnumVar(&f.set.Timestamps, campaign.Choices("Timestamps")...)
	cmd.Flag("scenario", "Free-form scenario name, a label on every metric.").Default("default").StringVar(&f.set.Scenario)
	cmd.Flag("arrival", "Open-loop arrival process: constant, poisson or gamma.").Default(d.Arrival).EnumVar(&f.set.Arrival, campaign.Choices("Arrival")...)
	cmd.Flag("burstiness", "Gamma shape k for --arrival gamma (1 = Poisson, <1 burstier).").Default("1").Float64Var(&f.set.Burstiness)
	cmd.Flag("max-concurrency", "Open loop: cap on requests in flight (0 = none).").Default("0").IntVar(&f.set.MaxConcurrency)
	cliflag.Duration(cmd, "duration", "Measured duration of each run (after warmup).", "", &f.set.Duration)
	cmd.Flag("requests", "Measured requests of each run (after warmup).").IntVar(&f.set.Requests)
	cliflag.Duration(cmd, "grace-period", "With --duration: requests still in flight when it ends get this long to finish, then they are cancelled and counted as failed (error class cancelled_at_end). Set it above the longest request you expect.", "30s", &f.set.GracePeriod)
	cliflag.Duration(cmd, "warmup", "Requests sent during this initial time are excluded from results.", "0s", &f.set.Warmup)
	cliflag.Duration(cmd, "ramp-up", "Closed loop: start users evenly over this time; open loop: ramp the rate linearly.", "0s", &f.set.RampUp)
	cmd.Flag("shard", "Run only worker i of N's part (round-robin by request index) of the seeded schedule: i/N.").StringVar(&f.set.Shard)
	cmd.Flag("input-tokens", "Synthetic prompt length: fixed:N, uniform:LO,HI, normal:MEAN,SD or lognormal:MEDIAN,SIGMA, with optional ,min=N,max=N.").Default("fixed:256").StringVar(&f.set.InputTokens)
	cmd.Flag("input-tokens.calibrate", "Fit the synthetic prompts (--input-tokens, --turns histories, traces) to the server's own token counts before the first run (with --dataset: count its replies, the output lengths, in the server's tokens): tokenize (the server's POST /tokenize, vLLM's: exact, sends no generation), usage (six requests with max_tokens 1, from the prompt_tokens the server reports), auto (tokenize where the server has it, else usage) or off (one word per token asked for). Recorded in metadata.token_calibration; its requests are in no run.").Default(d.Calibrate).EnumVar(&f.set.Calibrate, campaign.Choices("Calibrate")...)
	cliflag.Duration(cmd, "input-tokens.calibrate-timeout", "Time limit of the whole calibration (0s: the first run's own bound, --warmup + --duration + --grace-period, or --timeout with --requests). A server that has not answered by then ends the command before its first run (exit status 3), the report saying what did not answer.", "0s", &f.set.CalibrateTimeout)
	cmd.Flag("output-tokens", "Output length (max_tokens) distribution, same syntax as --input-tokens.").Default("fixed:128").StringVar(&f.set.OutputTokens)
	cmd.Flag("dataset", "Prompts from a JSONL file ({\"prompt\": ...}, optional \"output_tokens\" in the server's tokens or a \"completion\"/\"response\" reply) or a ShareGPT JSON file instead of synthetic ones; a reply's length, counted in the server's tokens by --input-tokens.calibrate, is the output length.").StringVar(&f.set.Dataset)
	cmd.Flag("dataset.turns", "Which prompts of a ShareGPT --dataset are sent: first (each conversation's first human turn) or all (every human turn, after the conversation's earlier turns as chat history).").Default(d.DatasetTurns).EnumVar(&f.set.DatasetTurns, campaign.Choices("DatasetTurns")...)
	cmd.Flag("max-tokens", "Cap on max_tokens of every request (0 = none).").Default("0").IntVar(&f.set.MaxTokens)
	cmd.Flag("ignore-eos", "Send ignore_eos so the server generates exactly max_tokens (vLLM, SGLang).").BoolVar(&f.set.IgnoreEOS)
	cmd.Flag("seed", "Seed of prompts, lengths and arrival schedule.").Default("1").Int64Var(&f.set.Seed)
	cmd.Flag("prompts", "distinct: every level, repeat and invocation sends prompts of its own (a nonce drawn per invocation, recorded as metadata.prompt_nonce), so a server's prefix cache cannot serve one run from another's; reuse: the same prompts at every level and repeat, and in every invocation with the same --seed (and --prompt-nonce), for deliberate cache-warm measurements.").Default(d.Prompts).EnumVar(&f.set.Prompts, campaign.Choices("Prompts")...)
	cmd.Flag("prompt-nonce", "Nonce of the prompts instead of a random one (1-64 letters, digits, - or _): with a report's metadata.prompt_nonce and the same --seed, replays its prompts byte for byte.").PlaceHolder("NONCE").StringVar(&f.set.PromptNonce)
	cmd.Flag("slo", "Goodput SLOs, e.g. ttft=500ms,tpot=50ms,e2e=10s (what makes a request good). Repeatable. search also takes level objectives, one per flag: ttft:p99<=500ms, goodput>=0.95, errors<=0.01.").SetValue(&sloFlag{perRequest: &f.set.SLO, objectives: &f.objectives})
	cliflag.Price(cmd, "cost.gpu-hourly-usd", "Price of one GPU-hour in USD (0 to 1000; 0: no cost figures).", "0", &f.set.GPUHourlyUSD)
	cmd.Flag("cost.gpus", "GPUs billed.").Default("1").IntVar(&f.set.GPUs)
	cmd.Flag("cost.overhead-hours", "Billed hours that produced no results (setup, retries, idle), added to each run's cost.").Default("0").Float64Var(&f.set.OverheadHours)
	cmd.Flag("exporter.url", "URL of a gpulens exporter's /metrics: records GPU model, driver, MIG profile and, for every run, peak VRAM, mean utilisation and power, energy, output tokens per joule and energy per request.").StringVar(&f.set.ExporterURL)
	cmd.Flag("output", "Write the JSON report to this file.").StringVar(&f.output)
	cmd.Flag("save-requests", "Write one JSON line per measured request to this file.").StringVar(&f.saveRequests)
	cmd.Flag("embed-requests", "Embed every measured request's raw record in the JSON report, as `merge` needs (on with --shard).").BoolVar(&f.set.EmbedRequests)
	cmd.Flag("csv", "Write a CSV summary (one row per run) to this file.").StringVar(&f.csv)
	cliflag.Duration(cmd, "linger", "After the run and its reports, keep serving /metrics this long so a last scrape sees the final counts (Ctrl-C ends it).", "0s", &f.linger)
	cmd.Flag("progress", "Show a progress line on stderr (default: when stderr is a terminal).").Default("true").BoolVar(&f.progress)
	addWorkloadFlags(cmd, &f.set)
	addPromptFlags(cmd, &f.set)
	addEvalFlags(cmd, f)
	addRequestFlags(cmd, &f.set)
	return f
}

// options are the campaign's options from the flags, the errors naming
// the flags.
func (f *loadFlags) options() (campaign.Options, error) {
	if f.linger < 0 {
		return campaign.Options{}, fmt.Errorf("--linger must not be negative, got %v", f.linger)
	}
	s := f.set
	s.APIKey = os.Getenv("OPENAI_API_KEY") // without --api-key-file
	s.KeepRecords, s.SaveResponses = f.saveRequests != "", f.saveResponses != ""
	o, err := s.Options()
	return o, flagged(loadFlagNames, err)
}
