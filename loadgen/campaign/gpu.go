package campaign

import (
	"context"
	"slices"
	"time"

	"github.com/gpulens/gpulens/loadgen/observe"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// The GPU side of every run, read from the gpulens exporter
// (Options.ExporterURL; docs/loadgen.md, "Evaluation campaigns").

// minExporterInterval is the shortest ExporterInterval accepted.
const minExporterInterval = 100 * time.Millisecond

// validateExporter checks the exporter's options.
func validateExporter(o *Options) error {
	if o.ExporterURL != "" {
		if _, err := option.Check(o.ExporterURL); err != nil {
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
	return nil
}

// newPoller is the poller of the exporter, or nil without one.
func (c *Campaign) newPoller() *observe.Poller {
	if c.opt.ExporterURL == "" {
		return nil
	}
	return observe.New(observe.PollerConfig{URL: c.opt.ExporterURL, Interval: c.opt.ExporterInterval, GPUs: c.opt.ExporterGPUs, Logger: c.log})
}

// gpuRun is one run's window on the exporter (nil: no exporter).
type gpuRun struct {
	w         *observe.Window
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
