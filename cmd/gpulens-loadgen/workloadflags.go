package main

import (
	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/loadgen/campaign"
)

// addWorkloadFlags declares the flags of the workloads the peers have
// (trace replay, multi-turn conversations) and of the server's own
// metrics, for run, sweep and search (docs/loadgen.md).
func addWorkloadFlags(cmd *kingpin.CmdClause, s *campaign.Settings) {
	d := campaign.DefaultSettings()
	cmd.Flag("trace", "Replay a trace: each request at its arrival time (run without --rate or --concurrency), with its input length and its output length as max_tokens. Formats: Mooncake JSONL, Azure LLM inference CSV, BurstGPT CSV (docs/loadgen.md).").PlaceHolder("FILE").StringVar(&s.Trace)
	cmd.Flag("trace.format", "Format of --trace: mooncake, azure or burstgpt (auto: recognised from the first line).").Default(d.TraceFormat).EnumVar(&s.TraceFormat, campaign.Choices("TraceFormat")...)
	cmd.Flag("trace.speedup", "Divide the trace's arrival times by this factor (2: twice the rate). With --rate the times are instead scaled to that mean rate.").Default("1").Float64Var(&s.TraceSpeedup)
	cmd.Flag("trace.max-requests", "Replay only the trace's first N requests (0: all).").Default("0").IntVar(&s.TraceMaxRequests)
	cmd.Flag("turns", "Multi-turn conversations of this many turns: every turn resends the conversation so far (the shared-prefix, KV-cache case). In open loop --rate is conversations per second.").Default("1").IntVar(&s.Turns)
	cliflag.Duration(cmd, "think-time", "With --turns: pause between the end of a turn's answer and the next turn.", "0s", &s.ThinkTime)
	cmd.Flag("server-metrics", "Scrape the server's own /metrics (the --target without /v1, then /metrics) during every run: KV-cache usage, running and waiting requests, preemptions, prefix-cache hits (vLLM, SGLang, TGI).").BoolVar(&s.ServerMetrics)
	cmd.Flag("server-metrics.url", "The server's metrics URL, when not the --target's /metrics (implies --server-metrics).").PlaceHolder("URL").StringVar(&s.ServerMetricsURL)
	cliflag.Duration(cmd, "server-metrics.interval", "Interval between scrapes of the server's metrics.", d.ServerMetricsInterval.String(), &s.ServerMetricsInterval)
}
