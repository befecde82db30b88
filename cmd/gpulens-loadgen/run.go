package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/report"
)

func runCommand(app *kingpin.Application) command {
	cmd := app.Command("run", "Drive load at one concurrency or rate and report latency, throughput and cost. "+exitStatusHelp)
	f := addLoadFlags(cmd)
	concurrency := cmd.Flag("concurrency", "Closed loop: number of concurrent users.").Int()
	rate := cmd.Flag("rate", "Open loop: requests per second from a seeded schedule.").Float64()
	return command{clause: cmd, status: f.exitStatus, run: func(ctx context.Context, logger *slog.Logger) error {
		p := campaign.Plan{Command: "run", Repeats: 1}
		switch {
		case *concurrency > 0 && *rate > 0:
			return usageError{fmt.Errorf("set either --concurrency or --rate, not both")}
		case *rate > 0:
			p.Mode, p.Levels = report.ModeOpen, []float64{*rate}
		case *concurrency > 0:
			p.Mode, p.Levels = report.ModeClosed, []float64{float64(*concurrency)}
		case f.workload.trace != "": // at the trace's own times (workloadflags.go)
			level, err := f.workload.traceLevel()
			if err != nil {
				return usageError{err}
			}
			p.Mode, p.Levels = report.ModeOpen, []float64{level}
		default:
			return usageError{fmt.Errorf("set --concurrency N (closed loop), --rate R (open loop) or --trace FILE (open loop at the trace's times)")}
		}
		return flagged(loadFlagNames, execute(ctx, logger, f, p))
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
		p := campaign.Plan{Command: "sweep", Repeats: *repeats}
		if *saturation {
			p.Saturation = &campaign.Saturation{MaxErrorRatio: *maxErr, MinGoodputRatio: *minGood}
		}
		var err error
		switch {
		case *concurrency != "" && *rate != "":
			return usageError{fmt.Errorf("set either --concurrency or --rate, not both")}
		case *rate != "":
			p.Mode = report.ModeOpen
			p.Levels, err = parseLevels("--rate", *rate)
		case *concurrency != "":
			p.Mode = report.ModeClosed
			p.Levels, err = parseLevels("--concurrency", *concurrency)
		default:
			return usageError{fmt.Errorf("set --concurrency 1,2,4,… or --rate 1,2,5,…")}
		}
		if err != nil {
			return usageError{err}
		}
		return flagged(loadFlagNames, execute(ctx, logger, f, p))
	}}
}
