package campaign

import (
	"context"
	"time"

	"github.com/gpulens/gpulens/loadgen/observe"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
)

// prepareWorkloads checks the options of the trace replay, the multi-turn
// conversations and the server-metrics scraping, and completes the run
// configuration from the workload: a trace's arrival offsets (open loop:
// the schedule sends at them) and the number of turns.
func prepareWorkloads(o *Options, mode string) error {
	if err := o.Workload.Validate(); err != nil {
		return err
	}
	if o.Workload.Turns > 1 {
		if o.Run.Turns != 0 && o.Run.Turns != o.Workload.Turns {
			return option.Errorf("%s: the runner's %d turns differ from the workload's %d", option.Name("Turns"), o.Run.Turns, o.Workload.Turns)
		}
		o.Run.Turns = o.Workload.Turns
	} else if o.Run.Turns > 1 {
		return option.Errorf("%s %d: the workload makes no conversations (its Turns is %d)", option.Name("Turns"), o.Run.Turns, o.Workload.Turns)
	}
	if t := o.Workload.Trace; t != nil && mode == report.ModeOpen {
		o.Run.Schedule.Arrival = runner.Trace
		o.Run.Schedule.Offsets = t.Offsets()
	}
	if o.ServerMetrics != nil {
		cfg := *o.ServerMetrics
		if err := cfg.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// workloadSettings are the trace and multi-turn parts of a run's settings.
func (c *Campaign) workloadSettings(rc runner.Config) (report.TraceSettings, report.MultiTurnSettings) {
	var ts report.TraceSettings
	if t := c.opt.Workload.Trace; t != nil {
		ts = report.TraceSettings{File: t.Name, Format: t.Format, Speedup: t.Speedup, MaxRequests: t.MaxRequests,
			Requests: len(t.Requests), Skipped: t.Skipped, ArrivalTimes: rc.Schedule.Arrival == runner.Trace}
	}
	var mt report.MultiTurnSettings
	if rc.Turns > 1 {
		mt = report.MultiTurnSettings{Turns: rc.Turns, ThinkTimeSeconds: rc.ThinkTime.Seconds()}
	}
	return ts, mt
}

// serverScrape is the scraping of the server's metrics during one run; its
// zero value (scraping off) does nothing.
type serverScrape struct {
	s *observe.Scraper
}

// startServerMetrics starts scraping the server's metrics, when asked to.
func (c *Campaign) startServerMetrics(ctx context.Context) serverScrape {
	if c.opt.ServerMetrics == nil {
		return serverScrape{}
	}
	s, err := observe.Start(ctx, *c.opt.ServerMetrics)
	if err != nil { // checked in New: not expected
		c.log.Warn("server metrics not scraped", "err", err)
		return serverScrape{}
	}
	return serverScrape{s: s}
}

// stop ends the scraping and returns the summary, its timeline counted
// from the run's start (nil when scraping was off).
func (s serverScrape) stop(runStart time.Time) *report.ServerMetrics {
	if s.s == nil {
		return nil
	}
	return s.s.Stop(runStart)
}
