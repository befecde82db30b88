// Package campaign runs a load-generation campaign and returns its report
// document. A Plan is levels (users in closed loop, requests per second in
// open loop) × repeats, with an optional saturation rule; Options are
// everything else about each run. Run executes every run with
// loadgen/runner (prompts of its own unless reuse was asked for),
// summarises its records with loadgen/stats, names it, warns when a
// target rate was not achieved, aggregates the repeats of each level, stops
// a saturation search where goodput drops or failures pass the threshold,
// and fills the metadata (run ID, nonce, target without credentials, GPU
// facts from an exporter, the manifest). With an exporter every run also
// gets its own GPU side (peak VRAM, power, energy, tokens per joule); the
// answers' text can be kept for scoring (responses.go).
//
// Settings (settings.go) are the options as a person gives them (text to
// parse, files to read); Settings.Options turns them into Options, and
// RunPlan and SweepPlan make a Plan from the levels. gpulens-loadgen's
// run, sweep and search fill Settings from their flags, serve the live
// metrics an Observer records, and write what Run returns.
//
// Merge (merge.go) combines the reports of workers that each ran one shard
// (i of N) of the same seeded schedule into one report, recomputing
// every statistic — exact percentiles included — from the raw per-request
// records the shards embedded.
//
// A merged report can itself be merged again when it embeds the union of
// its inputs' records (MergeOptions.EmbedRequests): every input then covers a
// set of shards of one N — a worker's report the shard in its runs'
// settings.shard, a merged report the shards its metadata.shards lists —
// and the inputs' sets must not overlap. The result is the same as merging
// all the workers' reports at once.
//
// Search (search*.go) finds the largest load a server carries while meeting
// percentile objectives (p99 TTFT, p99 ITL, goodput share, error share):
// the capacity under an SLO, by search rather than a grid. From a start
// level it grows exponentially until a level fails (or shrinks until one
// passes), then bisects the bracket [highest passing, lowest failing]
// until it is as narrow as asked (Config.Precision) or the probe budget is
// spent, then measures both ends again to confirm it. Every probe is a
// full run (a Prober: SearchCampaign runs them as campaigns) repeated
// Config.Repeats times; a level passes only when every run at it meets
// every objective, so noise can only lower the answer, never raise it.
// Contradictions (a level passing above one that failed, a confirming run
// disagreeing) are reported in the result, not smoothed over.
//
// The method is the exponential-then-binary search of load testing's
// "find the breaking point" tools; see docs/loadgen.md, "Capacity under an
// SLO", for how it relates to vLLM's, GuideLLM's and AIPerf's.
package campaign

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/observe"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/stats"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// Plan is what a campaign runs.
type Plan struct {
	Command string // "run" or "sweep": the report's metadata.command
	// Mode is report.ModeClosed (Levels are numbers of users) or
	// report.ModeOpen (Levels are requests per second of the whole
	// schedule).
	Mode    string
	Levels  []float64
	Repeats int // runs per level (at least 1)
	// Saturation, when set, stops after the first level whose failed
	// share passes MaxErrorRatio or whose goodput is below the best so far,
	// and names the highest level meeting the SLOs.
	Saturation *Saturation
}

// Saturation is the rule of a saturation search.
type Saturation struct {
	MaxErrorRatio   float64 // stop when the failed share passes this
	MinGoodputRatio float64 // a level meets the SLOs at this goodput ratio
}

// Options are everything about each run besides its level.
type Options struct {
	// Client is how requests are sent. MaxConns 0: enough connections
	// for the plan.
	Client client.Config
	// Workload makes the prompts. With Prompts report.PromptsDistinct and
	// no Nonce, a nonce is drawn.
	Workload workload.Config
	Prompts  string // report.PromptsDistinct or report.PromptsReuse
	// Run is every run's configuration; Mode, Concurrency, Schedule.Rate,
	// Schedule.RampUp and Schedule.Seed come from the plan, RampUp and the
	// workload's seed. GracePeriod 0: runner.DefaultGracePeriod.
	Run    runner.Config
	SLO    report.SLO
	Prices report.CostSettings
	// Scenario is a free-form name, recorded in the metadata.
	Scenario string
	// ExporterURL, when set, is a gpulens exporter's /metrics, polled for
	// the GPU facts of the metadata and the GPU side of every run
	// (Run.GPU): every ExporterInterval (observe.DefaultPollInterval when
	// zero; at least 100 ms) and at each run's start and end.
	// ExporterGPUs restricts the GPUs serving to these (indexes or UUIDs;
	// empty: all the exporter reports).
	ExporterURL      string
	ExporterInterval time.Duration
	ExporterGPUs     []string
	// Labels are the user's key=value labels, recorded in the manifest
	// (Metadata.Manifest) with the host and the settings hash.
	Labels map[string]string
	// ServerInfo asks the server, after the last run, what it is (vLLM,
	// TGI, llama.cpp, Ollama, SGLang endpoints: report.AskServer), each
	// question within ServerInfoTimeout (report.DefaultTimeout when
	// zero); not when the campaign was interrupted.
	ServerInfo        bool
	ServerInfoTimeout time.Duration
	// SaveResponses returns, in Result.Responses, what the server answered
	// to every measured request (text, finish reason), for scoring apart
	// from timing; ResponsePrompts keeps each prompt's text besides its
	// hash. Without it the client decodes no text.
	SaveResponses   bool
	ResponsePrompts bool
	// EmbedRequests embeds every run's records in the report
	// (runs[].requests), as a merge needs; always on for a shard.
	EmbedRequests bool
	// KeepRecords returns every run's records, named, in Result.Records.
	KeepRecords bool
	Logger      *slog.Logger // nil: discard

	// ServerMetrics, when set, scrapes the server's own /metrics during
	// every run into Run.ServerMetrics (loadgen/observe).
	ServerMetrics *observe.Config

	// Calibrate is how the synthetic prompts are fitted to the server's
	// token counts before the first run (calibrate.go): CalibrateAuto
	// (empty), CalibrateTokenize, CalibrateUsage or CalibrateOff.
	// CalibrateTimeout bounds the whole calibration (zero: the first run's
	// own bound, warmup + duration + grace period, or the request timeout
	// without a duration); a server that has not answered by then ends the
	// campaign before its first run (TokenCalibration.TimedOut).
	Calibrate        string
	CalibrateTimeout time.Duration

	// SystemPrompt is a system prompt sent with every request (and every
	// calibration probe); SystemPromptTokens instead generates one of that
	// many of the server's tokens (request.go). The same in every request
	// and run: a shared prefix, as in production. Client has the rest of
	// what requests carry (extra body fields, headers, the output-length
	// field).
	SystemPrompt       string
	SystemPromptTokens int
}

// Observer watches a campaign live (live metrics, a progress line): every
// request (runner.Observer), and the start and end of every run. It must
// be safe for concurrent use.
type Observer interface {
	runner.Observer
	RunStarted(name string)
	RunEnded(name string)
}

// Result is what a campaign measured.
type Result struct {
	Document *report.Document
	// Records are every run's records with Run, Level and Repeat set (with
	// Options.KeepRecords).
	Records []report.Record
	// Completed and Failed count the measured requests of every run.
	Completed, Failed int
	// Responses are every run's saved responses (Options.SaveResponses).
	Responses []report.Record
}

// Campaign is a validated plan, ready to run.
type Campaign struct {
	plan   Plan
	opt    Options
	client *client.Client
	work   *workload.Workload
	meta   report.Metadata
	log    *slog.Logger
	// poller reads the exporter while Run runs (nil: no exporter).
	poller *observe.Poller
	// system is every request's system prompt ("": none; request.go).
	system string
}

// New validates the plan and the options (an error names the option at
// fault: package option) and prepares the campaign. Nothing is sent.
func New(p Plan, o Options) (*Campaign, error) {
	if p.Repeats < 1 {
		return nil, option.Errorf("%s must be at least 1, got %d", option.Name("Repeats"), p.Repeats)
	}
	if len(p.Levels) == 0 {
		return nil, option.Errorf("%s: no levels given", option.Name("Levels"))
	}
	if err := o.Prices.Validate(); err != nil {
		return nil, err
	}
	if err := validateExporter(&o); err != nil {
		return nil, err
	}
	if err := validateServerInfo(&o); err != nil {
		return nil, err
	}
	if o.Workload.MaxTokens < 0 {
		return nil, option.Errorf("%s must not be negative, got %d", option.Name("MaxTokens"), o.Workload.MaxTokens)
	}
	switch {
	case o.Workload.Nonce != "":
		if err := workload.ValidateNonce(o.Workload.Nonce); err != nil {
			return nil, option.Errorf("%s: %w", option.Name("PromptNonce"), err)
		}
	case o.Prompts == report.PromptsDistinct:
		o.Workload.Nonce = report.RandomID()
	case o.Prompts != report.PromptsReuse:
		return nil, option.Errorf("%s %q: want %q or %q", option.Name("Prompts"), o.Prompts, report.PromptsDistinct, report.PromptsReuse)
	}
	if err := prepareWorkloads(&o, p.Mode); err != nil {
		return nil, err
	}
	if err := validatePrompts(&o); err != nil {
		return nil, err
	}
	if err := validateCalibrate(&o); err != nil {
		return nil, err
	}
	if o.Run.GracePeriod == 0 {
		o.Run.GracePeriod = runner.DefaultGracePeriod
	}
	if o.Client.MaxConns == 0 {
		o.Client.MaxConns = o.Run.MaxConcurrency
		for _, l := range p.Levels {
			if p.Mode == report.ModeClosed {
				o.Client.MaxConns = max(o.Client.MaxConns, int(l))
			}
		}
		if o.Client.MaxConns == 0 {
			o.Client.MaxConns = 1024
		}
	}
	system, err := validateSystemPrompt(&o)
	if err != nil {
		return nil, err
	}
	cl, err := client.New(o.Client)
	if err != nil {
		return nil, err
	}
	c := &Campaign{plan: p, opt: o, client: cl, work: workload.New(o.Workload), log: o.Logger, system: system}
	for _, level := range p.Levels {
		rc := c.runConfig(level)
		if err := rc.Validate(); err != nil {
			return nil, err
		}
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	c.meta = report.Metadata{Command: p.Command, Target: redactURL(o.Client.BaseURL), Endpoint: o.Client.Endpoint,
		Model: o.Client.Model, Scenario: o.Scenario, Seed: o.Workload.Seed, PromptNonce: o.Workload.Nonce}
	c.meta.Stamp()
	c.meta.Manifest = c.newManifest()
	if d := o.Workload.Dataset; d != nil {
		c.meta.Dataset, c.meta.DatasetSHA256 = d.Name, d.SHA256
	}
	if t := o.Workload.Trace; t != nil {
		c.meta.Dataset, c.meta.DatasetSHA256 = t.Name, t.SHA256
	}
	if o.Run.Shard.Count > 1 {
		c.meta.Shards = []string{o.Run.Shard.String()}
	}
	return c, nil
}

// Metadata is the report's metadata as it stands before the campaign runs
// (run ID, target, model, …).
func (c *Campaign) Metadata() report.Metadata { return c.meta }

// Run runs the campaign until its plan is done, its saturation rule stops
// it or ctx is cancelled (the result then covers what was measured, with
// metadata.interrupted set); obs, when not nil, watches. It returns an
// error only for a run the runner refused.
func (c *Campaign) Run(ctx context.Context, obs Observer) (*Result, error) {
	res := &Result{Document: &report.Document{}}
	meta := c.meta
	meta.Started = time.Now().UTC()
	var poller *observe.Poller
	if c.opt.ExporterURL != "" {
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		poller = c.newPoller()
		c.poller = poller
		defer func() { c.poller = nil }()
		go poller.Run(pctx)
	}
	noAnswer := false // the server answered no calibration in time: no run
	if c.calibrates() {
		cal, err := c.calibrate(ctx)
		if err != nil { // interrupted: no run starts
			meta.Interrupted = true
		} else {
			meta.TokenCalibration = cal
		}
		switch {
		case cal != nil && cal.TimedOut:
			noAnswer = true
			meta.Warnings = append(meta.Warnings, "token calibration ("+cal.Method+") failed, no run started: "+cal.Error)
		case cal != nil && cal.Error != "" && cal.Calibrated == report.CalibratedDatasetReplies:
			meta.Warnings = append(meta.Warnings, "token calibration ("+cal.Method+") failed, output lengths are the dataset replies' words: "+cal.Error)
		case cal != nil && cal.Error != "":
			meta.Warnings = append(meta.Warnings, "token calibration ("+cal.Method+") failed, prompts have one word per token asked for: "+cal.Error)
		}
	}
	best := -1.0 // the best goodput of a saturation search so far
levels:
	for _, level := range c.plan.Levels {
		if noAnswer {
			break
		}
		var reps []report.Run
		for rep := 1; rep <= c.plan.Repeats; rep++ {
			if ctx.Err() != nil {
				meta.Interrupted = true // stopped between runs
				break levels
			}
			run, err := c.run(ctx, obs, level, rep, res, &meta)
			if err != nil {
				return nil, err
			}
			res.Document.Runs = append(res.Document.Runs, run)
			reps = append(reps, run)
		}
		judged := CloseLevel(res.Document, reps)
		if sat := c.plan.Saturation; sat != nil {
			if reason := c.saturated(*sat, level, judged.Summary, &best, &meta); reason != "" {
				meta.SaturationReason = reason
				break
			}
		}
	}
	meta.Finished = time.Now().UTC()
	if poller != nil {
		meta.GPU = poller.Info()
	}
	c.finishManifest(ctx, &meta, res.Document.Runs, noAnswer)
	res.Document.Metadata = meta
	if meta.Interrupted {
		c.log.Warn("run interrupted: reports cover what was measured until then")
	}
	if c.plan.Saturation != nil {
		c.log.Info("saturation search finished", "highest_level_meeting_slos", meta.SaturationLevel, "reason", meta.SaturationReason)
	}
	return res, nil
}

// run runs one level and repeat and returns its report run; it adds to
// res's counts and records and to meta's server model, warnings and
// interrupted flag.
func (c *Campaign) run(ctx context.Context, obs Observer, level float64, rep int, res *Result, meta *report.Metadata) (report.Run, error) {
	o, rc := &c.opt, c.runConfig(level)
	settings := report.Settings{Mode: c.plan.Mode, DurationSeconds: rc.Duration.Seconds(), Requests: rc.Requests,
		WarmupSeconds: rc.Warmup.Seconds(), RampUpSeconds: rc.RampUp.Seconds(), TimeoutSeconds: o.Client.Timeout.Seconds(),
		Endpoint: o.Client.Endpoint, Timestamps: "kernel", Model: o.Client.Model, InputTokens: o.Workload.Input.String(),
		OutputTokens: o.Workload.Output.String(), Dataset: meta.Dataset, MaxTokens: o.Workload.MaxTokens, IgnoreEOS: o.Workload.IgnoreEOS,
		Seed: o.Workload.Seed, Prompts: o.Prompts, SLO: o.SLO,
		Cost: o.Prices}
	if o.Client.ReadTimestamps {
		settings.Timestamps = "read"
	}
	settings.Trace, settings.MultiTurn = c.workloadSettings(rc)
	settings.Request = c.requestSettings()
	if o.Workload.Dataset != nil && o.Workload.DatasetTurns == workload.DatasetTurnsAll {
		settings.DatasetTurns = workload.DatasetTurnsAll
	}
	settings.SharedPrefix, settings.Images = c.promptSettings()
	if rc.Duration > 0 {
		settings.GracePeriodSeconds = rc.GracePeriod.Seconds()
	}
	shards := max(o.Run.Shard.Count, 1)
	if o.Run.Shard.Count > 0 {
		settings.Shard = o.Run.Shard.String()
	}
	target := 0.0
	if c.plan.Mode == report.ModeClosed {
		settings.Concurrency = rc.Concurrency
	} else {
		settings.Rate, settings.Arrival, settings.Burstiness, settings.MaxConcurrency = level, rc.Schedule.Arrival, rc.Schedule.Burstiness, rc.MaxConcurrency
		target = level / float64(shards) // a shard sends its 1/N of the schedule
	}
	// Distinct prompts: every level and repeat leads its prompts with a
	// tag of its own (the variant is the same in a replay).
	work := c.work
	if o.Prompts == report.PromptsDistinct {
		work = c.work.WithVariant(report.RunName(c.plan.Mode, level, rep))
	}
	name := report.RunName(c.plan.Mode, level, 0)
	if c.plan.Repeats > 1 {
		name = report.RunName(c.plan.Mode, level, rep)
	}

	var ro runner.Observer
	if obs != nil {
		ro = obs
		obs.RunStarted(name)
	}
	scrape := c.startServerMetrics(ctx)
	doer, responses := c.doer(work)
	if c.system != "" {
		doer = systemDoer{next: doer, system: c.system}
	}
	gpu := c.beginGPU(ctx, rc.Warmup)
	out, err := runner.Run(ctx, rc, doer, work, ro)
	if obs != nil {
		obs.RunEnded(name)
	}
	if err != nil {
		scrape.stop(time.Time{})
		gpu.end(ctx, report.Summary{})
		return report.Run{}, err
	}
	// The requests in flight when the run was interrupted are summarised
	// (as interrupted) and recorded with the rest.
	all := append(out.Results[:len(out.Results):len(out.Results)], out.InFlight...)
	sum := stats.Summarize(all, stats.SummaryConfig{SLO: o.SLO, Prices: o.Prices, TargetRate: target, Warmup: rc.Warmup})
	sum.WarmupRequests, sum.MaxInFlight = out.Warmup, out.MaxInFlight
	res.Completed += sum.RequestsCompleted
	res.Failed += sum.RequestsFailed
	for _, r := range out.Results {
		if meta.ServerModel == "" && r.Model != "" {
			meta.ServerModel = r.Model
		}
	}
	run := report.Run{Name: name, Settings: settings, Summary: sum, Level: level, Repeat: rep}
	run.GPU = gpu.end(ctx, sum)
	res.Responses = append(res.Responses, responses.responses(name, level, rep, all)...)
	run.ServerMetrics, run.Turns = scrape.stop(out.Start), stats.Turns(all)
	run.PrefixCache, run.Images = stats.PrefixCache(all), stats.Images(all)
	if o.EmbedRequests || shards > 1 {
		run.Requests = all
	}
	if o.KeepRecords {
		for _, r := range all {
			r.Run, r.Level, r.Repeat = name, level, rep
			res.Records = append(res.Records, r)
		}
	}
	c.log.Info("run finished", "run", name, "completed", sum.RequestsCompleted, "failed", sum.RequestsFailed,
		"ttft_p50_seconds", sum.TTFT.P50, "itl_p50_seconds", sum.ITL.P50, "output_tokens_per_second", sum.OutputTokensPerSecond,
		"goodput_per_second", sum.GoodputPerSecond)
	if sum.RateNotAchieved {
		c.log.Warn("target rate not achieved", "run", name, "target_rate_per_second", target,
			"achieved_rate_per_second", sum.AchievedRatePerSecond, "schedule_lag_p99_seconds", sum.ScheduleLag.P99)
		meta.Warnings = append(meta.Warnings, RateWarning(name, target, sum))
	}
	meta.Interrupted = meta.Interrupted || out.Interrupted
	return run, nil
}

// runConfig is the runner configuration of one level.
func (c *Campaign) runConfig(level float64) runner.Config {
	rc := c.opt.Run
	rc.Mode = c.plan.Mode
	if rc.Mode == report.ModeClosed {
		rc.Concurrency = int(level)
	} else {
		rc.Schedule.Rate, rc.Schedule.RampUp, rc.Schedule.Seed = level, rc.RampUp, c.opt.Workload.Seed
	}
	return rc
}

// saturated applies the saturation rule to the summary of a level (its
// aggregate when it has repeats): it records the level in meta when it
// meets the SLOs, and returns why the search stops there, or "".
func (c *Campaign) saturated(sat Saturation, level float64, sum report.Summary, best *float64, meta *report.Metadata) string {
	failed := 0.0
	if n := sum.RequestsCompleted + sum.RequestsFailed; n > 0 {
		failed = float64(sum.RequestsFailed) / float64(n)
	}
	if sum.GoodputRatio >= sat.MinGoodputRatio && failed <= sat.MaxErrorRatio {
		meta.SaturationLevel = level
	}
	if failed > sat.MaxErrorRatio {
		c.log.Info("saturation: error share above threshold, stopping", "level", level, "failed_ratio", failed)
		return fmt.Sprintf("level %g: failed share %.3f above %.3f", level, failed, sat.MaxErrorRatio)
	}
	if *best >= 0 && sum.GoodputPerSecond < *best {
		c.log.Info("saturation: goodput dropped, stopping", "level", level, "goodput_per_second", sum.GoodputPerSecond, "best", *best)
		return fmt.Sprintf("level %g: goodput %.4g/s below best %.4g/s", level, sum.GoodputPerSecond, *best)
	}
	*best = max(*best, sum.GoodputPerSecond)
	return ""
}

// RateWarning is the warning about a run that did not send at its target
// rate (Summary.RateNotAchieved).
func RateWarning(name string, target float64, s report.Summary) string {
	return fmt.Sprintf("%s: target rate %.4g/s NOT achieved: sent %.4g/s, schedule lag p50 %.3gs p99 %.3gs", name, target,
		s.AchievedRatePerSecond, s.ScheduleLag.P50, s.ScheduleLag.P99)
}

// CloseLevel ends a level whose runs (its repeats, in order, at least
// one) doc holds: with more than one, it appends their aggregate
// (stats.Aggregate). It returns the run that stands for the level: the
// aggregate, or the only run.
func CloseLevel(doc *report.Document, reps []report.Run) report.Run {
	if len(reps) == 1 {
		return reps[0]
	}
	agg := stats.Aggregate(reps)
	doc.Runs = append(doc.Runs, agg)
	return agg
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
