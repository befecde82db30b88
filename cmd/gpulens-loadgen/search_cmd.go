package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/render"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"golang.org/x/term"
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
		return flagged(names, executeSearch(ctx, logger, f, cfg))
	}}
}

// executeSearch runs the search with the options of the flags, serves the
// live metrics of its runs and writes its report, as execute does for run
// and sweep.
func executeSearch(ctx context.Context, logger *slog.Logger, f *loadFlags, cfg campaign.SearchConfig) error {
	f.status = exitOK
	opt, err := f.options()
	if err != nil {
		return usageError{err}
	}
	opt.Logger = logger
	var doc *report.Document
	var prober *campaign.SearchCampaign
	outputs := []outFile{
		{"--output", f.output, func(w io.Writer) error {
			b, err := doc.Marshal()
			if err == nil {
				_, err = w.Write(b)
			}
			return err
		}},
		{"--csv", f.csv, func(w io.Writer) error { return render.WriteCSV(w, doc) }},
		{"--save-requests", f.saveRequests, func(w io.Writer) error { return report.WriteRecords(w, prober.Records) }},
		{"--save-responses", f.saveResponses, func(w io.Writer) error { return report.WriteResponses(w, prober.Responses) }},
	}
	if err := checkOutputs(outputs); err != nil {
		return usageError{err}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), versioncollector.NewCollector("gpulens_loadgen"))
	obs := &lateObserver{}
	prober, err = campaign.NewSearchCampaign(cfg.Mode, opt, cfg.Start, cfg.Max, obs)
	if err != nil {
		return usageError{err}
	}
	meta := prober.Metadata()
	m := New(reg, Labels{Target: meta.Target, Model: meta.Model, Scenario: meta.Scenario},
		Info{RunID: meta.RunID, Version: meta.Version, Endpoint: meta.Endpoint, Mode: cfg.Mode}, opt.Prices, nil)
	obs.observer = observer{m, newProgress(f.progress && term.IsTerminal(int(os.Stderr.Fd())))}
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	srvErr := serveMetrics(srvCtx, logger, f, reg)

	m.Start()
	res, err := campaign.Search(ctx, cfg, prober)
	if err != nil {
		return err
	}
	doc = prober.Document(res)
	switch {
	case doc.Metadata.Interrupted:
		f.status = exitInterrupted
	case prober.Completed == 0 && prober.Failed > 0:
		f.status = exitAllFailed
		logger.Error("every measured request failed", "failed", prober.Failed)
	}
	logger.Info("search finished", "verdict", campaign.Verdict(res.Search), "pass", res.Search.Pass, "fail", res.Search.Fail,
		"confirmed", res.Search.Confirmed, "probes", len(res.Search.Probes))
	var errs []error
	for _, o := range outputs {
		if o.path != "" {
			if err := writeOutput(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	render.WriteTable(os.Stdout, doc)
	campaign.WriteText(os.Stdout, res.Search)
	serving := true
	select {
	case err := <-srvErr:
		serving = false
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	default:
	}
	if f.linger > 0 && serving && ctx.Err() == nil {
		if err := linger(ctx, logger, f, srvErr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lateObserver passes a campaign's events to an observer set once the
// search's metadata (which labels the metrics) is known.
type lateObserver struct{ observer }
