package main

import (
	"context"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
)

func runCommand(app *kingpin.Application) command {
	cmd := app.Command("run", "Drive load at one concurrency or rate and report latency, throughput and cost. "+exitStatusHelp)
	f := addLoadFlags(cmd)
	concurrency := cmd.Flag("concurrency", "Closed loop: number of concurrent users.").Int()
	rate := cmd.Flag("rate", "Open loop: requests per second from a seeded schedule.").Float64()
	return command{clause: cmd, status: f.exitStatus, run: func(ctx context.Context, logger *slog.Logger) error {
		return flagged(loadFlagNames, execute(ctx, logger, f, func(o campaign.Options) (campaign.Plan, error) {
			return campaign.RunPlan(*concurrency, *rate, o)
		}))
	}}
}

func sweepCommand(app *kingpin.Application) command {
	cmd := app.Command("sweep", "Run the same workload at several concurrency or rate levels, with repeats and an optional saturation search. "+exitStatusHelp)
	f := addLoadFlags(cmd)
	concurrency := cmd.Flag("concurrency", "Closed-loop levels, e.g. 1,2,4,8,16.").String()
	rate := cmd.Flag("rate", "Open-loop levels in requests per second, e.g. 1,2,5,10.").String()
	repeats := cmd.Flag("repeats", "Runs per level; with more than one, the report adds mean, stddev and 95% CI.").Default("1").Int()
	saturation := cmd.Flag("saturation", "Stop when goodput drops or the failed share passes --saturation.max-error-ratio; name the highest level meeting the SLOs.").Bool()
	maxErr := cmd.Flag("saturation.max-error-ratio", "Saturation search: stop above this share of failed requests.").Default("0.05").Float64()
	minGood := cmd.Flag("saturation.min-goodput-ratio", "Saturation search: a level meets the SLOs when at least this share of requests is good.").Default("0.9").Float64()
	return command{clause: cmd, status: f.exitStatus, run: func(ctx context.Context, logger *slog.Logger) error {
		var sat *campaign.Saturation
		if *saturation {
			sat = &campaign.Saturation{MaxErrorRatio: *maxErr, MinGoodputRatio: *minGood}
		}
		return flagged(loadFlagNames, execute(ctx, logger, f, func(campaign.Options) (campaign.Plan, error) {
			return campaign.SweepPlan(*concurrency, *rate, *repeats, sat)
		}))
	}}
}
