package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/version"
	"github.com/prometheus/exporter-toolkit/web"
	"golang.org/x/term"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/gpuinfo"
	"github.com/gpulens/gpulens/loadgen/metrics"
	"github.com/gpulens/gpulens/loadgen/output"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/schedule"
)

// plan is what run and sweep ask execute to do.
type plan struct {
	command    string // run or sweep
	mode       string // runner.Closed or runner.Open
	levels     []float64
	repeats    int
	saturation bool
	maxErrors  float64 // saturation: stop when the failed share passes this
	minGood    float64 // saturation: a level meets the SLOs at this goodput ratio
}

// execute runs every level and repeat of p and writes the reports. It
// returns an error only for bad setup (a usageError, before any request)
// or unwritable outputs: an interrupted run still writes what it measured.
// A run that returns nil sets f.status: exitInterrupted, exitAllFailed or
// exitOK.
func execute(ctx context.Context, logger *slog.Logger, f *loadFlags, p plan) error {
	f.status = exitOK
	maxConns := f.maxConcurrency
	for _, l := range p.levels {
		if p.mode == runner.Closed {
			maxConns = max(maxConns, int(l))
		}
	}
	if maxConns == 0 {
		maxConns = 1024
	}
	s, err := f.build(maxConns)
	if err != nil {
		return usageError{err}
	}
	cl, err := client.New(s.client)
	if err != nil {
		return usageError{err}
	}
	var (
		doc      = &report.Document{}
		requests []report.Request
	)
	outputs := []outFile{
		{"--output", f.output, func(w io.Writer) error {
			b, err := doc.Marshal()
			if err == nil {
				_, err = w.Write(b)
			}
			return err
		}},
		{"--csv", f.csv, func(w io.Writer) error { return output.WriteCSV(w, doc) }},
		{"--save-requests", f.saveRequests, func(w io.Writer) error { return writeRequests(w, requests) }},
	}
	if err := checkOutputs(outputs); err != nil {
		return usageError{err}
	}
	for _, level := range p.levels {
		rc := f.runConfig(p, s, level)
		if err := rc.Validate(); err != nil {
			return usageError{err}
		}
	}
	runID := newRunID()
	meta := report.Metadata{
		Tool: "gpulens-loadgen", Version: version.Version, Revision: version.Revision, GoVersion: runtime.Version(),
		Command: p.command, RunID: runID, Started: time.Now().UTC(), Target: redactURL(f.target), Endpoint: f.endpoint,
		Model: f.model, Scenario: f.scenario, Seed: f.seed, PromptNonce: s.nonce,
	}
	if s.dataset != nil {
		meta.Dataset, meta.DatasetSHA256 = s.dataset.Name, s.dataset.SHA256
	}
	if s.shard.Count > 1 {
		meta.Shards = []string{s.shard.String()}
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), versioncollector.NewCollector("gpulens_loadgen"))
	m := metrics.New(reg, metrics.Labels{Target: meta.Target, Model: f.model, Scenario: f.scenario},
		metrics.Info{RunID: runID, Version: version.Version, Endpoint: f.endpoint, Mode: p.mode}, s.prices, nil)
	// The metrics server lives until execute returns: after the reports and
	// any --linger.
	srvCtx, stopServer := context.WithCancel(ctx)
	defer stopServer()
	srvErr := serveMetrics(srvCtx, logger, f, reg)

	var poller *gpuinfo.Poller
	if f.exporterURL != "" {
		poller = gpuinfo.NewPoller(f.exporterURL, 2*time.Second, logger)
		go poller.Run(ctx)
	}

	prog := newProgress(f.progress && term.IsTerminal(int(os.Stderr.Fd())))
	obs := multiObserver{m, prog}
	var (
		bestGood          = -1.0
		completed, failed int
	)
	m.Start()
levels:
	for _, level := range p.levels {
		var reps []report.Run
		for rep := 1; rep <= p.repeats; rep++ {
			if ctx.Err() != nil {
				meta.Interrupted = true // stopped between runs
				break levels
			}
			rcfg := f.runConfig(p, s, level)
			settings := report.Settings{Mode: p.mode, DurationSeconds: f.duration.Seconds(), Requests: f.requests,
				WarmupSeconds: f.warmup.Seconds(), RampUpSeconds: f.rampUp.Seconds(), TimeoutSeconds: f.timeout.Seconds(),
				Endpoint: f.endpoint, Timestamps: f.timestamps, Model: f.model, InputTokens: f.inputTokens, OutputTokens: f.outputTokens,
				Dataset: meta.Dataset, MaxTokens: f.maxTokens, IgnoreEOS: f.ignoreEOS, Seed: f.seed, Shard: f.shard, Prompts: f.prompts,
				SLO: s.slo, Cost: report.CostSettings{GPUHourlyUSD: f.gpuHourly, GPUs: f.gpus, OverheadHours: f.overheadHours}}
			if f.duration > 0 {
				settings.GracePeriodSeconds = f.gracePeriod.Seconds()
			}
			name := ""
			target := 0.0
			if p.mode == runner.Closed {
				settings.Concurrency = int(level)
				name = fmt.Sprintf("concurrency=%d", int(level))
			} else {
				settings.Rate, settings.Arrival, settings.Burstiness, settings.MaxConcurrency = level, f.arrival, f.burstiness, f.maxConcurrency
				name = fmt.Sprintf("rate=%g", level)
				// A shard sends its 1/N of the schedule.
				target = level / float64(s.shard.Count)
			}
			// Distinct prompts: every level and repeat leads its prompts
			// with a tag of its own (the variant is the same in a replay).
			work := s.work
			if f.prompts == report.PromptsDistinct {
				work = s.work.WithVariant(fmt.Sprintf("%s repeat=%d", name, rep))
			}
			if p.repeats > 1 {
				name += fmt.Sprintf(" repeat=%d", rep)
			}
			prog.begin(name)
			out, err := runner.Run(ctx, rcfg, cl, work, obs)
			prog.end()
			if err != nil {
				return err
			}
			// The requests in flight when the run was interrupted are
			// summarised (as interrupted) and recorded with the rest.
			all := append(out.Results[:len(out.Results):len(out.Results)], out.InFlight...)
			sum := runner.Summarize(all, runner.SummaryConfig{SLO: s.slo, Prices: s.prices, TargetRate: target, MeasureStart: out.MeasureStart})
			sum.WarmupRequests = out.Warmup
			sum.MaxInFlight = out.MaxInFlight
			completed += sum.RequestsCompleted
			failed += sum.RequestsFailed
			for _, r := range out.Results {
				if meta.ServerModel == "" && r.Model != "" {
					meta.ServerModel = r.Model
				}
			}
			run := report.Run{Name: name, Settings: settings, Summary: sum, Level: level, Repeat: rep}
			if f.saveRequests != "" || f.embedRequests || s.shard.Count > 1 {
				recs := make([]report.Request, len(all))
				for i := range all {
					recs[i] = runner.Record(&all[i], out.Start)
				}
				if f.embedRequests || s.shard.Count > 1 {
					run.Requests = recs
				}
				if f.saveRequests != "" {
					for _, r := range recs {
						r.Run, r.Level, r.Repeat = name, level, rep
						requests = append(requests, r)
					}
				}
			}
			doc.Runs = append(doc.Runs, run)
			reps = append(reps, run)
			logger.Info("run finished", "run", name, "completed", sum.RequestsCompleted, "failed", sum.RequestsFailed,
				"ttft_p50_seconds", sum.TTFT.P50, "itl_p50_seconds", sum.ITL.P50, "output_tokens_per_second", sum.OutputTokensPerSecond,
				"goodput_per_second", sum.GoodputPerSecond)
			if sum.RateNotAchieved {
				msg := fmt.Sprintf("%s: target rate %.4g/s NOT achieved: sent %.4g/s, schedule lag p50 %.3gs p99 %.3gs", name, target,
					sum.AchievedRatePerSecond, sum.ScheduleLag.P50, sum.ScheduleLag.P99)
				logger.Warn("target rate not achieved", "run", name, "target_rate_per_second", target,
					"achieved_rate_per_second", sum.AchievedRatePerSecond, "schedule_lag_p99_seconds", sum.ScheduleLag.P99)
				meta.Warnings = append(meta.Warnings, msg)
			}
			if out.Interrupted {
				meta.Interrupted = true
			}
		}
		agg := reps[len(reps)-1]
		if len(reps) > 1 {
			agg = output.Aggregate(reps)
			doc.Runs = append(doc.Runs, agg)
		}
		if p.saturation {
			sum := agg.Summary
			failed := 0.0
			if n := sum.RequestsCompleted + sum.RequestsFailed; n > 0 {
				failed = float64(sum.RequestsFailed) / float64(n)
			}
			if sum.GoodputRatio >= p.minGood && failed <= p.maxErrors {
				meta.SaturationLevel = level
			}
			if failed > p.maxErrors {
				logger.Info("saturation: error share above threshold, stopping", "level", level, "failed_ratio", failed)
				meta.SaturationReason = fmt.Sprintf("level %g: failed share %.3f above %.3f", level, failed, p.maxErrors)
				break
			}
			if bestGood >= 0 && sum.GoodputPerSecond < bestGood {
				logger.Info("saturation: goodput dropped, stopping", "level", level, "goodput_per_second", sum.GoodputPerSecond, "best", bestGood)
				meta.SaturationReason = fmt.Sprintf("level %g: goodput %.4g/s below best %.4g/s", level, sum.GoodputPerSecond, bestGood)
				break
			}
			bestGood = max(bestGood, sum.GoodputPerSecond)
		}
	}
	meta.Finished = time.Now().UTC()
	if poller != nil {
		meta.GPU = poller.Info()
	}
	doc.Metadata = meta
	if meta.Interrupted {
		logger.Warn("run interrupted: reports cover what was measured until then")
	}
	if p.saturation {
		logger.Info("saturation search finished", "highest_level_meeting_slos", meta.SaturationLevel, "reason", meta.SaturationReason)
	}
	switch {
	case meta.Interrupted:
		f.status = exitInterrupted
	case completed == 0 && failed > 0:
		f.status = exitAllFailed
		logger.Error("every measured request failed", "failed", failed)
	}
	var errs []error
	for _, o := range outputs {
		if o.path != "" {
			if err := writeOutput(o); err != nil {
				errs = append(errs, err)
			}
		}
	}
	output.WriteTable(os.Stdout, doc)
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

// runConfig is the runner configuration of one level.
func (f *loadFlags) runConfig(p plan, s *setup, level float64) runner.Config {
	rc := runner.Config{Mode: p.mode, Duration: f.duration, Requests: f.requests, Warmup: f.warmup,
		RampUp: f.rampUp, Shard: s.shard, MaxConcurrency: f.maxConcurrency, GracePeriod: f.gracePeriod}
	if p.mode == runner.Closed {
		rc.Concurrency = int(level)
	} else {
		rc.Schedule = schedule.Config{Rate: level, Arrival: f.arrival, Burstiness: f.burstiness, RampUp: f.rampUp, Seed: f.seed}
	}
	return rc
}

// linger keeps serving /metrics for --linger after the run, until ctx is
// cancelled or the server fails. It returns only the server's failure.
func linger(ctx context.Context, logger *slog.Logger, f *loadFlags, srvErr <-chan error) error {
	address := strings.Join(*f.web.WebListenAddresses, ",")
	if f.web.WebSystemdSocket != nil && *f.web.WebSystemdSocket {
		address = "systemd socket"
	}
	logger.Info("run finished; serving metrics until the linger ends (Ctrl-C to exit now)", "address", address,
		"path", f.metricsPath, "linger", f.linger, "until", time.Now().Add(f.linger).Format(time.RFC3339))
	t := time.NewTimer(f.linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case err := <-srvErr:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	}
	return nil
}

// serveMetrics serves /metrics and a landing page until ctx ends.
func serveMetrics(ctx context.Context, logger *slog.Logger, f *loadFlags, reg *prometheus.Registry) <-chan error {
	errc := make(chan error, 1)
	mux := http.NewServeMux()
	mux.Handle(f.metricsPath, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg, EnableOpenMetrics: true}))
	if f.metricsPath != "/" {
		lp, err := web.NewLandingPage(web.LandingConfig{
			Name: "gpulens-loadgen", Description: "Load generator for OpenAI-compatible inference servers", Version: version.Info(),
			Links: []web.LandingLinks{{Address: f.metricsPath, Text: "Metrics"}},
		})
		if err != nil {
			errc <- err
			return errc
		}
		mux.Handle("/", lp)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		errc <- web.ListenAndServe(srv, f.web, logger)
	}()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	return errc
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// redactURL drops any user:password from a URL.
func redactURL(u string) string {
	if i := strings.Index(u, "://"); i >= 0 {
		rest := u[i+3:]
		if at := strings.IndexByte(rest, '@'); at >= 0 && (strings.IndexByte(rest, '/') < 0 || at < strings.IndexByte(rest, '/')) {
			return u[:i+3] + rest[at+1:]
		}
	}
	return u
}

type multiObserver []runner.Observer

func (m multiObserver) Started() {
	for _, o := range m {
		o.Started()
	}
}

func (m multiObserver) Finished(r *client.Result, warm bool) {
	for _, o := range m {
		o.Finished(r, warm)
	}
}

// progress prints a one-line status on stderr when enabled.
type progress struct {
	enabled      bool
	done, failed atomic.Int64
	inFlight     atomic.Int64
	stop         chan struct{}
	stopped      chan struct{}
	name         string
	started      time.Time
}

func newProgress(enabled bool) *progress { return &progress{enabled: enabled} }

func (p *progress) begin(name string) {
	if !p.enabled {
		return
	}
	p.name, p.started = name, time.Now()
	p.done.Store(0)
	p.failed.Store(0)
	p.stop, p.stopped = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.stopped)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				fmt.Fprint(os.Stderr, "\r\033[K")
				return
			case <-t.C:
				fmt.Fprintf(os.Stderr, "\r\033[K%s  %s  done %d  failed %d  in flight %d", p.name,
					time.Since(p.started).Truncate(time.Second), p.done.Load(), p.failed.Load(), p.inFlight.Load())
			}
		}
	}()
}

func (p *progress) end() {
	if p.enabled {
		close(p.stop)
		<-p.stopped
	}
}

func (p *progress) Started() { p.inFlight.Add(1) }

func (p *progress) Finished(r *client.Result, _ bool) {
	p.inFlight.Add(-1)
	if r.OK() {
		p.done.Add(1)
	} else if !r.Canceled {
		p.failed.Add(1)
	}
}
