package main

import (
	"fmt"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/observe"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// workloadFlags are the flags of the workloads the peers have (trace
// replay, multi-turn conversations) and of the server's own metrics, for
// run and sweep (docs/loadgen.md).
type workloadFlags struct {
	trace            string
	traceFormat      string
	traceSpeedup     float64
	traceMaxRequests int
	loaded           *workload.Trace // the trace, once read

	turns     int
	thinkTime time.Duration

	serverMetrics         bool
	serverMetricsURL      string
	serverMetricsInterval time.Duration
}

func addWorkloadFlags(cmd *kingpin.CmdClause) *workloadFlags {
	f := &workloadFlags{}
	cmd.Flag("trace", "Replay a trace: each request at its arrival time (run without --rate or --concurrency), with its input length and its output length as max_tokens. Formats: Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV (docs/loadgen.md).").PlaceHolder("FILE").StringVar(&f.trace)
	cmd.Flag("trace.format", "Format of --trace: mooncake, azure or burstgpt (auto: recognised from the first line).").Default("auto").EnumVar(&f.traceFormat, "auto", workload.TraceMooncake, workload.TraceAzure, workload.TraceBurstGPT)
	cmd.Flag("trace.speedup", "Divide the trace's arrival times by this factor (2: twice the rate). With --rate the times are instead scaled to that mean rate.").Default("1").Float64Var(&f.traceSpeedup)
	cmd.Flag("trace.max-requests", "Replay only the trace's first N requests (0: all).").Default("0").IntVar(&f.traceMaxRequests)
	cmd.Flag("turns", "Multi-turn conversations of this many turns: every turn resends the conversation so far (the shared-prefix, KV-cache case). In open loop --rate is conversations per second.").Default("1").IntVar(&f.turns)
	cliflag.Duration(cmd, "think-time", "With --turns: pause between the end of a turn's answer and the next turn.", "0s", &f.thinkTime)
	cmd.Flag("server-metrics", "Scrape the server's own /metrics (the --target without /v1, then /metrics) during every run: KV-cache usage, running and waiting requests, preemptions, prefix-cache hits (vLLM, SGLang, TGI).").BoolVar(&f.serverMetrics)
	cmd.Flag("server-metrics.url", "The server's metrics URL, when not the --target's /metrics (implies --server-metrics).").PlaceHolder("URL").StringVar(&f.serverMetricsURL)
	cliflag.Duration(cmd, "server-metrics.interval", "Interval between scrapes of the server's metrics.", observe.DefaultInterval.String(), &f.serverMetricsInterval)
	return f
}

// load reads the trace once.
func (f *workloadFlags) load() (*workload.Trace, error) {
	if f.loaded != nil {
		return f.loaded, nil
	}
	format := f.traceFormat
	if format == "auto" {
		format = ""
	}
	t, err := workload.LoadTrace(f.trace, workload.TraceOptions{Format: format, Speedup: f.traceSpeedup, MaxRequests: f.traceMaxRequests})
	if err != nil {
		return nil, flagged(loadFlagNames, fmt.Errorf("--trace: %w", err))
	}
	f.loaded = t
	return t, nil
}

// traceLevel is the level of a run at the trace's own times: its mean
// rate after the speed-up (requests per second), or, for a trace whose
// requests all arrive at once, their number.
func (f *workloadFlags) traceLevel() (float64, error) {
	t, err := f.load()
	if err != nil {
		return 0, err
	}
	if r := runner.MeanRate(t.Offsets()); r > 0 {
		return r, nil
	}
	return float64(len(t.Requests)), nil
}

// apply sets the options of these workloads; target is the API's base URL.
func (f *workloadFlags) apply(o *campaign.Options, target string) error {
	if f.trace != "" {
		t, err := f.load()
		if err != nil {
			return err
		}
		o.Workload.Trace = t
		if o.Run.Requests == 0 && o.Run.Duration == 0 {
			o.Run.Requests = len(t.Requests) // the whole trace, once
		}
	}
	if f.turns < 1 {
		return fmt.Errorf("--turns must be at least 1, got %d", f.turns)
	}
	if f.thinkTime < 0 {
		return fmt.Errorf("--think-time must not be negative, got %v", f.thinkTime)
	}
	if f.thinkTime > 0 && f.turns == 1 {
		return fmt.Errorf("--think-time needs --turns above 1")
	}
	if f.turns > 1 {
		o.Workload.Turns, o.Run.Turns, o.Run.ThinkTime = f.turns, f.turns, f.thinkTime
	}
	if f.serverMetrics || f.serverMetricsURL != "" {
		u := f.serverMetricsURL
		if u == "" {
			u = observe.DefaultURL(target)
		}
		cfg := observe.Config{URL: u, Interval: f.serverMetricsInterval}
		if err := cfg.Validate(); err != nil {
			return flagged(loadFlagNames, err)
		}
		o.ServerMetrics = &cfg
	}
	return nil
}
