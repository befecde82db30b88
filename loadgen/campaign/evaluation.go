package campaign

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/gpuinfo"
	"github.com/gpulens/gpulens/loadgen/manifest"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/weburl"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// What an evaluation campaign records beyond latency and throughput
// (docs/loadgen.md): the GPU side of every run, the manifest, and the
// responses kept for scoring.

// minExporterInterval is the shortest ExporterInterval accepted.
const minExporterInterval = 100 * time.Millisecond

// validateEvaluation checks the evaluation options.
func validateEvaluation(o *Options) error {
	if o.ExporterURL != "" {
		if _, err := weburl.Check(o.ExporterURL); err != nil {
			return option.Errorf("%s %q: must be an http:// or https:// URL: %v", option.Name("ExporterURL"), o.ExporterURL, err)
		}
	}
	if o.ExporterInterval != 0 && o.ExporterInterval < minExporterInterval {
		return option.Errorf("%s must be at least %v, got %v", option.Name("ExporterInterval"), minExporterInterval, o.ExporterInterval)
	}
	if len(o.ExporterGPUs) > 0 && o.ExporterURL == "" {
		return option.Errorf("%s needs %s", option.Name("ExporterGPUs"), option.Name("ExporterURL"))
	}
	if slices.Contains(o.ExporterGPUs, "") {
		return option.Errorf("%s: an empty GPU name (want indexes or UUIDs)", option.Name("ExporterGPUs"))
	}
	if o.ServerInfoTimeout < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("ServerInfoTimeout"), o.ServerInfoTimeout)
	}
	return nil
}

// newPoller is the poller of the exporter, or nil without one.
func (c *Campaign) newPoller() *gpuinfo.Poller {
	if c.opt.ExporterURL == "" {
		return nil
	}
	return gpuinfo.New(gpuinfo.Config{URL: c.opt.ExporterURL, Interval: c.opt.ExporterInterval, GPUs: c.opt.ExporterGPUs, Logger: c.log})
}

// gpuRun is one run's window on the exporter (nil: no exporter).
type gpuRun struct {
	w         *gpuinfo.Window
	restart   *time.Timer
	restarted chan struct{}
}

// beginGPU opens the run's window; after warmup, when there is one, the
// window starts again, so that the energy counts the measured part.
func (c *Campaign) beginGPU(ctx context.Context, warmup time.Duration) *gpuRun {
	if c.poller == nil {
		return nil
	}
	g := &gpuRun{w: c.poller.Begin(ctx)}
	if warmup > 0 {
		g.restarted = make(chan struct{})
		g.restart = time.AfterFunc(warmup, func() {
			defer close(g.restarted)
			g.w.Restart(ctx)
		})
	}
	return g
}

// end closes the window and returns the run's GPU side, its per-work
// figures from sum. The last scrape is made even when ctx was cancelled
// (an interrupted run still gets its GPU side).
func (g *gpuRun) end(ctx context.Context, sum report.Summary) *report.RunGPU {
	if g == nil {
		return nil
	}
	if g.restart != nil && !g.restart.Stop() {
		<-g.restarted
	}
	gpu := g.w.End(context.WithoutCancel(ctx))
	gpu.SetWork(sum.OutputTokensTotal, sum.RequestsCompleted)
	return gpu
}

// responder sends requests with the client and keeps what each answer
// said (Options.SaveResponses), by request index, for one run.
type responder struct {
	client     *client.Client
	work       *workload.Workload
	keepPrompt bool
	mu         sync.Mutex
	byIndex    map[int]*report.Answer
}

// doer is what a run sends its requests with: the client, or, to save the
// responses, a responder over it (nil otherwise).
func (c *Campaign) doer(work *workload.Workload) (runner.Doer, *responder) {
	if !c.opt.SaveResponses {
		return c.client, nil
	}
	r := &responder{client: c.client, work: work, keepPrompt: c.opt.ResponsePrompts, byIndex: map[int]*report.Answer{}}
	return r, r
}

// Do sends req and keeps its answer's text.
func (r *responder) Do(ctx context.Context, req client.Request, start, intended time.Time) report.Record {
	rec, text := r.client.DoText(ctx, req, start, intended)
	sum := sha256.Sum256([]byte(req.Prompt))
	x := &report.Answer{PromptSHA256: hex.EncodeToString(sum[:]), Response: text.Content,
		Reasoning: text.Reasoning, FinishReason: text.FinishReason}
	if r.keepPrompt {
		x.Prompt = req.Prompt
	}
	if e, ok := r.work.Entry(req.Index); ok {
		x.DatasetRow, x.ID, x.Reference = e.Row, e.ID, e.Reference
	}
	r.mu.Lock()
	r.byIndex[req.Index] = x
	r.mu.Unlock()
	return rec
}

// responses are the saved responses of a run's measured requests: its
// records that have an answer, named (Run, Level, Repeat) and with the
// Answer set, in index order.
func (r *responder) responses(name string, level float64, rep int, recs []report.Record) []report.Record {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]report.Record, 0, len(recs))
	for _, rec := range recs {
		x, ok := r.byIndex[rec.Index]
		if !ok {
			continue
		}
		rec.Run, rec.Level, rec.Repeat, rec.Answer = name, level, rep, x
		out = append(out, rec)
	}
	slices.SortFunc(out, func(a, b report.Record) int { return a.Index - b.Index })
	return out
}

// newManifest is the manifest known before the campaign runs: the host
// and the labels.
func (c *Campaign) newManifest() *report.Manifest {
	return &report.Manifest{Host: manifest.Host(), Labels: c.opt.Labels}
}

// finishManifest completes meta's manifest once the campaign has run: the
// settings hash (from the first run's settings; none when no run ran) and,
// unless the campaign was interrupted, what the server says it is.
func (c *Campaign) finishManifest(ctx context.Context, meta *report.Metadata, runs []report.Run) {
	m := *meta.Manifest
	meta.Manifest = &m
	if len(runs) > 0 {
		cfg := manifest.Configuration{Settings: runs[0].Settings, Levels: c.plan.Levels, Repeats: c.plan.Repeats,
			DatasetSHA256: meta.DatasetSHA256, Shards: c.opt.Run.Shard.Count, ContinuousUsage: c.opt.Client.ContinuousUsage}
		if s := c.plan.Saturation; s != nil {
			cfg.Saturation = &manifest.Saturation{MaxErrorRatio: s.MaxErrorRatio, MinGoodputRatio: s.MinGoodputRatio}
		}
		h, err := manifest.SettingsHash(cfg)
		if err != nil {
			c.log.Warn("no settings hash", "err", err)
		}
		m.SettingsHash = h
	}
	if !c.opt.ServerInfo || meta.Interrupted || ctx.Err() != nil {
		return
	}
	o := &c.opt.Client
	m.Server = manifest.AskServer(ctx, manifest.ServerConfig{BaseURL: o.BaseURL, Model: o.Model, APIKey: o.APIKey, TLS: o.TLS,
		Timeout: c.opt.ServerInfoTimeout, Transport: o.Transport})
	m.ServerVersion, m.ModelRevision = manifest.Derive(m.Server)
	c.log.Info("server asked what it is", "server_version", m.ServerVersion, "model_revision", m.ModelRevision)
}
