package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/report"
)

// searchCommand is `gpulens-loadgen search`: the largest concurrency or
// rate meeting the --slo objectives (loadgen/campaign, search*.go).
func searchCommand(app *kingpin.Application) command {
	cmd := app.Command("search", "Find the largest concurrency or rate that meets percentile objectives (--slo ttft:p99<=500ms --slo goodput>=0.95): "+
		"exponential growth from the start level until a level fails, then bisection to the precision, each probe a full run repeated --repeats times, "+
		"both ends of the bracket measured again; a level passes only when every run at it meets every objective. "+exitStatusHelp)
	f := addLoadFlags(cmd)
	concurrency := cmd.Flag("concurrency", "Closed loop: search over users, starting at this many.").Int()
	rate := cmd.Flag("rate", "Open loop: search over requests per second, starting at this rate.").Float64()
	repeats := cmd.Flag("repeats", "Runs of every probe (and of each confirmation); a level passes only when all of them meet every objective.").Default("2").Int()
	maxLevel := cmd.Flag("search.max", "Highest level the search may probe (users or requests per second).").Default("1024").Float64()
	growth := cmd.Flag("search.growth", "Factor between levels while looking for a failing one (exponential phase).").Default("2").Float64()
	precision := cmd.Flag("search.precision", "Stop bisecting when (fail − pass) ≤ this × pass (closed loop: also when they are 1 user apart).").Default("0.05").Float64()
	maxProbes := cmd.Flag("search.max-probes", "Most levels probed before the confirmation (growth and bisection together).").Default("12").Int()
	return command{clause: cmd, status: f.exitStatus, run: func(ctx context.Context, logger *slog.Logger) error {
		names := searchNames()
		cfg, err := campaign.SearchSettings{Concurrency: *concurrency, Rate: *rate, Max: *maxLevel, Growth: *growth, Precision: *precision,
			MaxProbes: *maxProbes, Repeats: *repeats, Objectives: f.objectives}.Config(f.set)
		if err != nil {
			return usageError{flagged(names, err)}
		}
		return flagged(names, executeJob(ctx, logger, f, func(opt campaign.Options) (job, string, error) {
			late := &lateObserver{}
			prober, err := campaign.NewSearchCampaign(cfg.Mode, opt, cfg.Start, cfg.Max, late)
			return searchJob{cfg, prober, late, logger}, cfg.Mode, err
		}))
	}}
}

// searchJob is search's: every probe a campaign of prober's.
type searchJob struct {
	cfg    campaign.SearchConfig
	prober *campaign.SearchCampaign
	late   *lateObserver
	logger *slog.Logger
}

func (s searchJob) Metadata() report.Metadata { return s.prober.Metadata() }

func (s searchJob) run(ctx context.Context, obs campaign.Observer) (outcome, error) {
	s.late.Observer = obs
	res, err := campaign.Search(ctx, s.cfg, s.prober)
	if err != nil {
		return outcome{}, err
	}
	s.logger.Info("search finished", "verdict", campaign.Verdict(res.Search), "pass", res.Search.Pass, "fail", res.Search.Fail,
		"confirmed", res.Search.Confirmed, "probes", len(res.Search.Probes))
	p := s.prober
	return outcome{doc: p.Document(res), records: p.Records, responses: p.Responses, completed: p.Completed, failed: p.Failed,
		text: func(w io.Writer) { campaign.WriteText(w, res.Search) }}, nil
}

// lateObserver passes a campaign's events to an observer set once the
// search's metadata (which labels the metrics) is known.
type lateObserver struct{ campaign.Observer }
