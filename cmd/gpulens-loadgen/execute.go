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

// execute runs the campaign of the plan (of the options of the flags),
// serves its live metrics and writes the reports. It returns an error only for bad
// setup (a usageError, before any request) or unwritable outputs: an
// interrupted run still writes what it measured. A run that returns nil
// sets f.status: exitInterrupted, exitAllFailed or exitOK.
func execute(ctx context.Context, logger *slog.Logger, f *loadFlags, plan func(campaign.Options) (campaign.Plan, error)) error {
	f.status = exitOK
	if err := noObjectives(f); err != nil {
		return usageError{err}
	}
	opt, err := f.options()
	if err != nil {
		return usageError{err}
	}
	p, err := plan(opt)
	if err != nil {
		return usageError{err}
	}
	opt.Logger = logger
	c, err := campaign.New(p, opt)
	if err != nil {
		return usageError{err}
	}
	res := &campaign.Result{Document: &report.Document{}}
	outputs := []outFile{
		{"--output", f.output, func(w io.Writer) error {
			b, err := res.Document.Marshal()
			if err == nil {
				_, err = w.Write(b)
			}
			return err
		}},
		{"--csv", f.csv, func(w io.Writer) error { return render.WriteCSV(w, res.Document) }},
		{"--save-requests", f.saveRequests, func(w io.Writer) error { return report.WriteRecords(w, res.Records) }},
		{"--save-responses", f.saveResponses, func(w io.Writer) error { return report.WriteResponses(w, res.Responses) }},
	}
	if err := checkOutputs(outputs); err != nil {
		return usageError{err}
	}

	meta := c.Metadata()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), versioncollector.NewCollector("gpulens_loadgen"))
	m := New(reg, Labels{Target: meta.Target, Model: meta.Model, Scenario: meta.Scenario},
		Info{RunID: meta.RunID, Version: meta.Version, Endpoint: meta.Endpoint, Mode: p.Mode}, opt.Prices, nil)
	// The metrics server lives until execute returns: after the reports and
	// any --linger.
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	srvErr := serveMetrics(srvCtx, logger, f, reg)

	m.Start()
	if res, err = c.Run(ctx, observer{m, newProgress(f.progress && term.IsTerminal(int(os.Stderr.Fd())))}); err != nil {
		return err
	}
	switch {
	case res.Document.Metadata.Interrupted:
		f.status = exitInterrupted
	case res.Completed == 0 && res.Failed > 0:
		f.status = exitAllFailed
		logger.Error("every measured request failed", "failed", res.Failed)
	case res.Document.Metadata.TokenCalibration != nil && res.Document.Metadata.TokenCalibration.TimedOut:
		f.status = exitAllFailed
		logger.Error("no run started: the server answered no calibration request in time (--input-tokens.calibrate-timeout, --input-tokens.calibrate off to skip it)",
			"err", res.Document.Metadata.TokenCalibration.Error)
	}
	var errs []error
	for _, o := range outputs {
		if o.path != "" {
			if err := writeOutput(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	render.WriteTable(os.Stdout, res.Document)
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
