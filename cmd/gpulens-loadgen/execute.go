package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"golang.org/x/term"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/render"
	"github.com/gpulens/gpulens/loadgen/report"
)

// job is what execute runs: a campaign (run, sweep) or a search.
type job interface {
	// Metadata labels the live metrics.
	Metadata() report.Metadata
	// run runs the job, each run observed by obs.
	run(ctx context.Context, obs campaign.Observer) (outcome, error)
}

// outcome is what a job returned: its report and what it kept.
type outcome struct {
	doc                *report.Document
	records, responses []report.Record
	completed, failed  int
	// noRun: the server answered no calibration request in time.
	noRun bool
	// text is written after the table (nil: nothing).
	text func(io.Writer)
}

// campaignJob is run's and sweep's campaign.
type campaignJob struct{ *campaign.Campaign }

func (c campaignJob) run(ctx context.Context, obs campaign.Observer) (outcome, error) {
	res, err := c.Run(ctx, obs)
	if err != nil {
		return outcome{}, err
	}
	cal := res.Document.Metadata.TokenCalibration
	return outcome{doc: res.Document, records: res.Records, responses: res.Responses, completed: res.Completed, failed: res.Failed,
		noRun: cal != nil && cal.TimedOut}, nil
}

// execute runs the campaign of the plan (of the options of the flags),
// serves its live metrics and writes the reports.
func execute(ctx context.Context, logger *slog.Logger, f *loadFlags, plan func(campaign.Options) (campaign.Plan, error)) error {
	if err := noObjectives(f); err != nil {
		return usageError{err}
	}
	return executeJob(ctx, logger, f, func(opt campaign.Options) (job, string, error) {
		p, err := plan(opt)
		if err != nil {
			return nil, "", err
		}
		c, err := campaign.New(p, opt)
		return campaignJob{c}, p.Mode, err
	})
}

// executeJob runs the job that start makes of the options of the flags (with
// its mode), serves its live metrics and writes the reports. It returns
// an error only for bad setup (a usageError, before any request) or
// unwritable outputs: an interrupted run still writes what it measured.
// A run that returns nil sets f.status: exitInterrupted, exitAllFailed or
// exitOK.
func executeJob(ctx context.Context, logger *slog.Logger, f *loadFlags, start func(campaign.Options) (job, string, error)) error {
	f.status = exitOK
	opt, err := f.options()
	if err != nil {
		return usageError{err}
	}
	opt.Logger = logger
	j, mode, err := start(opt)
	if err != nil {
		return usageError{err}
	}
	var out outcome
	outputs := []outFile{
		{"--output", f.output, func(w io.Writer) error {
			b, err := out.doc.Marshal()
			if err == nil {
				_, err = w.Write(b)
			}
			return err
		}},
		{"--csv", f.csv, func(w io.Writer) error { return render.WriteCSV(w, out.doc) }},
		{"--save-requests", f.saveRequests, func(w io.Writer) error { return report.WriteRecords(w, out.records) }},
		{"--save-responses", f.saveResponses, func(w io.Writer) error { return report.WriteResponses(w, out.responses) }},
	}
	if err := checkOutputs(outputs); err != nil {
		return usageError{err}
	}

	meta := j.Metadata()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), versioncollector.NewCollector("gpulens_loadgen"))
	m := New(reg, Labels{Target: meta.Target, Model: meta.Model, Scenario: meta.Scenario},
		Info{RunID: meta.RunID, Version: meta.Version, Endpoint: meta.Endpoint, Mode: mode}, opt.Prices, nil)
	// The metrics server lives until execute returns: after the reports and
	// any --linger.
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	srvErr := serveMetrics(srvCtx, logger, f, reg)

	m.Start()
	if out, err = j.run(ctx, observer{m, newProgress(f.progress && term.IsTerminal(int(os.Stderr.Fd())))}); err != nil {
		return err
	}
	switch {
	case out.doc.Metadata.Interrupted:
		f.status = exitInterrupted
	case out.completed == 0 && out.failed > 0:
		f.status = exitAllFailed
		logger.Error("every measured request failed", "failed", out.failed)
	case out.noRun:
		f.status = exitAllFailed
		logger.Error("no run started: the server answered no calibration request in time (--input-tokens.calibrate-timeout, --input-tokens.calibrate off to skip it)",
			"err", out.doc.Metadata.TokenCalibration.Error)
	}
	var errs []error
	for _, o := range outputs {
		if o.path != "" {
			if err := writeOutput(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	render.WriteTable(os.Stdout, out.doc)
	if out.text != nil {
		out.text(os.Stdout)
	}
	serving := true
	select {
	case err := <-srvErr:
		serving = false
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	default:
	}
	// Reports are written: linger (unless interrupted already) so a last
	// scrape sees the final counts. Ctrl-C ends the linger at once and the
	// exit status stays the run's.
	if f.linger > 0 && serving && ctx.Err() == nil {
		if err := linger(ctx, logger, f, srvErr); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
