// Package runner drives requests at a server in closed loop (a fixed number
// of concurrent users) or open loop (a seeded arrival schedule), and
// collects one report.Record per request.
package runner

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// DefaultGracePeriod is Config.GracePeriod when it is zero.
const DefaultGracePeriod = 30 * time.Second

// Doer sends one request (client.Client) and returns its record, times
// counted from start.
type Doer interface {
	Do(ctx context.Context, r client.Request, start, intended time.Time) report.Record
}

// Requester hands out request i (workload.Workload).
type Requester interface {
	Request(i int) client.Request
}

// Observer sees every finished request (live metrics, progress). It must be
// safe for concurrent use.
type Observer interface {
	Started()
	Finished(r *report.Record, warmup bool)
}

// Config describes a run.
type Config struct {
	Mode        string
	Concurrency int            // closed loop: number of users
	Schedule    ScheduleConfig // open loop
	// MaxConcurrency caps in-flight requests in open loop (0: no cap). When
	// the cap is reached, sends wait and the wait shows up as schedule lag.
	MaxConcurrency int
	// Stop after Duration of measurement or Requests measured requests
	// (whichever is set; both: whichever comes first).
	Duration time.Duration
	Requests int
	// GracePeriod bounds a run with a Duration: requests still in flight
	// when the Duration ends get this long to finish, then they are
	// cancelled and counted as failed with error class
	// report.ErrCancelledAtEnd (with what they had received). Zero means
	// DefaultGracePeriod. A run with Requests only waits for its requests
	// (each bounded by the client's timeout).
	GracePeriod time.Duration
	// Warmup requests (sent during the first Warmup) are excluded.
	Warmup time.Duration
	// RampUp: closed loop starts users evenly over this time; open loop
	// ramps the rate (Schedule.RampUp).
	RampUp time.Duration
	Shard  Shard
	Now    func() time.Time
	// Turns > 1 runs multi-turn conversations (conversation.go): request
	// k is turn k mod Turns of conversation k / Turns, sent ThinkTime
	// after the previous turn's answer ended.
	Turns     int
	ThinkTime time.Duration
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch c.Mode {
	case report.ModeClosed:
		if c.Concurrency < 1 {
			return option.Errorf("%s must be at least 1, got %d", option.Name("Concurrency"), c.Concurrency)
		}
	case report.ModeOpen:
		if err := c.Schedule.Validate(); err != nil {
			return err
		}
		if c.MaxConcurrency < 0 {
			return option.Errorf("%s must not be negative, got %d", option.Name("MaxConcurrency"), c.MaxConcurrency)
		}
	default:
		return option.Errorf("%s %q: want %q (set %s) or %q (set %s)", option.Name("Mode"), c.Mode, report.ModeClosed, option.Name("Concurrency"), report.ModeOpen, option.Name("Rate"))
	}
	if c.Duration <= 0 && c.Requests <= 0 {
		return option.Errorf("set %s or %s", option.Name("Duration"), option.Name("Requests"))
	}
	if c.Duration < 0 || c.Requests < 0 || c.Warmup < 0 || c.RampUp < 0 {
		return option.Errorf("%s, %s, %s and %s must not be negative", option.Name("Duration"), option.Name("Requests"), option.Name("Warmup"), option.Name("RampUp"))
	}
	if c.GracePeriod < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("GracePeriod"), c.GracePeriod)
	}
	if c.Turns < 0 || c.ThinkTime < 0 {
		return option.Errorf("%s and %s must not be negative, got %d and %v", option.Name("Turns"), option.Name("ThinkTime"), c.Turns, c.ThinkTime)
	}
	if c.Shard.Count == 0 {
		c.Shard = Shard{Index: 0, Count: 1}
	}
	return nil
}

// Outcome is what a run measured.
type Outcome struct {
	// Results are the records of the measured (non-warmup) requests that
	// completed or failed, in order of completion, times counted from
	// Start; those cancelled at the end of the grace period are failures
	// (report.ErrCancelledAtEnd).
	Results []report.Record
	// InFlight are the records of the measured requests that were in
	// flight when ctx was cancelled (the run was interrupted), as far as
	// they got: error class report.ErrInterrupted, not in Results.
	// stats.Summarize counts them as interrupted.
	InFlight []report.Record
	Warmup   int
	// Start is when the run started; MeasureStart = Start + Warmup.
	Start, MeasureStart, End time.Time
	Interrupted              bool
	MaxInFlight              int
	// Canceled counts the requests, warmup included, that were in flight
	// when the run was interrupted.
	Canceled int
}

type collector struct {
	mu       sync.Mutex
	out      *Outcome
	inFlight atomic.Int64
	maxIn    atomic.Int64
	obs      Observer
	// parent is the run's context; ended is set just before the requests'
	// context is cancelled at the end of the grace period.
	parent context.Context
	ended  atomic.Bool
	grace  time.Duration
}

func (c *collector) begin() {
	n := c.inFlight.Add(1)
	for {
		m := c.maxIn.Load()
		if n <= m || c.maxIn.CompareAndSwap(m, n) {
			break
		}
	}
	if c.obs != nil {
		c.obs.Started()
	}
}

func (c *collector) finish(r report.Record, warmup bool) {
	c.inFlight.Add(-1)
	if r.Interrupted() && c.ended.Load() && c.parent.Err() == nil {
		// Cancelled by the run itself, not by its caller: a failure.
		r.ErrorClass = report.ErrCancelledAtEnd
		r.Error = fmt.Sprintf("still in flight %v after the end of the run's duration: cancelled", c.grace)
	}
	if c.obs != nil {
		c.obs.Finished(&r, warmup)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case r.Interrupted():
		c.out.Canceled++
		if !warmup {
			c.out.InFlight = append(c.out.InFlight, r)
		}
	case warmup:
		c.out.Warmup++
	default:
		c.out.Results = append(c.out.Results, r)
	}
}

// Run executes the run. With a Duration, requests still in flight at its
// end get the GracePeriod, then are cancelled and counted as failed.
// Cancelling ctx stops the run early: requests in flight are cancelled and
// returned in InFlight, everything finished in Results, with Interrupted
// set.
func Run(ctx context.Context, cfg Config, doer Doer, reqs Requester, obs Observer) (*Outcome, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	grace := cfg.GracePeriod
	if grace == 0 {
		grace = DefaultGracePeriod
	}
	out := &Outcome{}
	// Requests run under their own context, which the end of the grace
	// period cancels.
	reqCtx, cancelReqs := context.WithCancel(ctx)
	defer cancelReqs()
	col := &collector{out: out, obs: obs, parent: ctx, grace: grace}
	start := now()
	out.Start = start
	out.MeasureStart = start.Add(cfg.Warmup)
	if cfg.Duration > 0 {
		end := start.Add(cfg.Warmup + cfg.Duration + grace)
		t := time.AfterFunc(end.Sub(now()), func() {
			col.ended.Store(true)
			cancelReqs()
		})
		defer t.Stop()
	}
	if cfg.Turns > 1 {
		runConversations(ctx, reqCtx, cfg, doer, reqs, col, now, start)
	} else if cfg.Mode == report.ModeClosed {
		runClosed(ctx, reqCtx, cfg, doer, reqs, col, now, start)
	} else {
		runOpen(ctx, reqCtx, cfg, doer, reqs, col, now, start)
	}
	out.End = now()
	out.Interrupted = ctx.Err() != nil
	out.MaxInFlight = int(col.maxIn.Load())
	return out, nil
}

// runClosed and runOpen schedule under ctx and send under reqCtx (ctx, or
// cancelled at the end of the grace period).
func runClosed(ctx, reqCtx context.Context, cfg Config, doer Doer, reqs Requester, col *collector, now func() time.Time, start time.Time) {
	var (
		next     atomic.Int64 // next request index
		measured atomic.Int64 // measured requests started
		wg       sync.WaitGroup
	)
	stopAt := time.Time{}
	if cfg.Duration > 0 {
		stopAt = start.Add(cfg.Warmup + cfg.Duration)
	}
	measureStart := start.Add(cfg.Warmup)
	for u := 0; u < cfg.Concurrency; u++ {
		wg.Add(1)
		delay := time.Duration(0)
		if cfg.RampUp > 0 {
			delay = cfg.RampUp * time.Duration(u) / time.Duration(cfg.Concurrency)
		}
		go func() {
			defer wg.Done()
			if delay > 0 && !sleepUntil(ctx, start.Add(delay), now) {
				return
			}
			for ctx.Err() == nil {
				k := int(next.Add(1) - 1)
				if !cfg.Shard.Owns(k) {
					continue
				}
				t := now()
				if !stopAt.IsZero() && !t.Before(stopAt) {
					return
				}
				warm := t.Before(measureStart)
				if !warm && cfg.Requests > 0 && measured.Add(1) > int64(cfg.Requests) {
					return
				}
				col.begin()
				res := doer.Do(reqCtx, reqs.Request(k), start, t)
				col.finish(res, warm)
			}
		}()
	}
	wg.Wait()
}

type job struct {
	k        int
	intended time.Time
	warm     bool
}

func runOpen(ctx, reqCtx context.Context, cfg Config, doer Doer, reqs Requester, col *collector, now func() time.Time, start time.Time) {
	sc := cfg.Schedule
	sc.RampUp = max(sc.RampUp, cfg.RampUp)
	var offsets []time.Duration
	warmN := 0
	if cfg.Warmup > 0 {
		warmN = len(Generate(sc, 0, cfg.Warmup))
	}
	switch {
	case cfg.Requests > 0 && cfg.Duration > 0:
		offsets = Generate(sc, warmN+cfg.Requests*cfg.Shard.Count, cfg.Warmup+cfg.Duration)
	case cfg.Requests > 0:
		offsets = Generate(sc, warmN+cfg.Requests*cfg.Shard.Count, 0)
	default:
		offsets = Generate(sc, 0, cfg.Warmup+cfg.Duration)
	}
	// Room for every scheduled result up front (the schedule is in memory
	// already): growing the slice as requests finish was a quarter of the
	// load generator's allocation, and each garbage collection it triggers
	// delays sends.
	col.mu.Lock()
	col.out.Results = make([]report.Record, 0, min(len(offsets)/cfg.Shard.Count+1, 1<<20))
	col.mu.Unlock()
	// Pre-spawned workers; beyond them a goroutine per request unless
	// MaxConcurrency caps the number in flight. 64 cover rate × latency
	// for short requests up to thousands per second; more idle workers
	// cost lag: at 4,000 requests/s a pool of 2,048 gave a p99 lag of
	// 16–36 ms and one of 64 under 3 ms (every garbage collection scans
	// and shrinks the idle stacks, which then grow again).
	workers := cfg.MaxConcurrency
	if workers == 0 {
		workers = min(max(64, int(sc.Rate)/64), 2048)
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	do := func(j job) {
		col.begin()
		res := doer.Do(reqCtx, reqs.Request(j.k), start, j.intended)
		col.finish(res, j.warm)
	}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				do(j)
			}
		}()
	}
	measured := 0
	for k, off := range offsets {
		if !cfg.Shard.Owns(k) {
			continue
		}
		warm := k < warmN
		if !warm {
			if cfg.Requests > 0 && measured >= cfg.Requests {
				break
			}
			measured++
		}
		t := start.Add(off)
		if !sleepUntil(ctx, t, now) {
			break
		}
		j := job{k: k, intended: t, warm: warm}
		if cfg.MaxConcurrency > 0 {
			select {
			case jobs <- j:
			case <-ctx.Done():
			}
			continue
		}
		select {
		case jobs <- j:
		default:
			wg.Add(1)
			go func() {
				defer wg.Done()
				do(j)
			}()
		}
	}
	close(jobs)
	wg.Wait()
}

// sleepUntil waits until t: a Go timer to about a millisecond before
// (Go's timers fire on the network poller's millisecond tick), then
// shortWait for the rest. It returns false if ctx ends first.
func sleepUntil(ctx context.Context, t time.Time, now func() time.Time) bool {
	for {
		if ctx.Err() != nil {
			return false
		}
		d := t.Sub(now())
		if d <= 0 {
			return true
		}
		if d > 2*time.Millisecond {
			tm := time.NewTimer(d - time.Millisecond)
			select {
			case <-tm.C:
			case <-ctx.Done():
				tm.Stop()
				return false
			}
			continue
		}
		shortWait(d)
	}
}
