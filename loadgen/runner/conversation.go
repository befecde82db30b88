package runner

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// runConversations runs multi-turn conversations (Config.Turns > 1). In
// closed loop each of Concurrency users runs one conversation at a time;
// in open loop conversations start at the schedule's offsets (the rate is
// conversations per second) and run side by side. Either way a
// conversation sends its turns in order: turn t+1 is intended ThinkTime
// after turn t's answer ended and is not sent before. Request k is turn
// k mod Turns of conversation k / Turns, and its record carries both. A
// failed turn ends its conversation: the next turn's history would hold an
// answer the user never got. Shards own whole conversations (conversation
// c when c mod N is the shard's index). A turn intended before the
// warmup's end is a warmup request; Requests counts measured turns; with a
// Duration no turn is sent once it has passed. MaxConcurrency (open loop)
// caps the turns in flight, a wait that shows as schedule lag.
func runConversations(ctx, reqCtx context.Context, cfg Config, doer Doer, reqs Requester, col *collector, now func() time.Time, start time.Time) {
	var (
		measured atomic.Int64
		over     atomic.Bool // no more turns are to be sent
		wg       sync.WaitGroup
		slots    chan struct{}
	)
	if cfg.Mode == report.ModeOpen && cfg.MaxConcurrency > 0 {
		slots = make(chan struct{}, cfg.MaxConcurrency)
	}
	stopAt := time.Time{}
	if cfg.Duration > 0 {
		stopAt = start.Add(cfg.Warmup + cfg.Duration)
	}
	measureStart := start.Add(cfg.Warmup)
	// converse runs conversation c, its first turn intended at first. It
	// returns false when the run allows no more turns.
	converse := func(c int, first time.Time) bool {
		intended := first
		for t := 0; t < cfg.Turns; t++ {
			if over.Load() || !sleepUntil(ctx, intended, now) {
				return false
			}
			if !stopAt.IsZero() && !intended.Before(stopAt) {
				return false
			}
			warm := intended.Before(measureStart)
			if !warm && cfg.Requests > 0 && measured.Add(1) > int64(cfg.Requests) {
				over.Store(true)
				return false
			}
			if slots != nil {
				select {
				case slots <- struct{}{}:
				case <-ctx.Done():
					return false
				}
			}
			col.begin()
			rec := doer.Do(reqCtx, reqs.Request(c*cfg.Turns+t), start, intended)
			rec.Conversation, rec.Turn = c, t+1
			col.finish(rec, warm)
			if slots != nil {
				<-slots
			}
			if !rec.OK() {
				return true
			}
			intended = start.Add(rec.End + cfg.ThinkTime)
		}
		return true
	}

	if cfg.Mode == report.ModeClosed {
		var next atomic.Int64 // next conversation
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
				for ctx.Err() == nil && !over.Load() {
					c := int(next.Add(1) - 1)
					if !cfg.Shard.Owns(c) {
						continue
					}
					if !converse(c, now()) {
						return
					}
				}
			}()
		}
		wg.Wait()
		return
	}

	// Open loop: conversation c starts at offset c of the schedule.
	sc := cfg.Schedule
	sc.RampUp = max(sc.RampUp, cfg.RampUp)
	var offsets []time.Duration
	switch {
	case cfg.Duration > 0:
		offsets = Generate(sc, 0, cfg.Warmup+cfg.Duration)
	default:
		// Enough conversations for the measured turns after those that
		// start during the warmup; the count of measured turns ends it.
		warm := 0
		if cfg.Warmup > 0 {
			warm = len(Generate(sc, 0, cfg.Warmup))
		}
		convs := (cfg.Requests + cfg.Turns - 1) / cfg.Turns
		offsets = Generate(sc, (warm+convs)*cfg.Shard.Count, 0)
	}
	for c, off := range offsets {
		if !cfg.Shard.Owns(c) {
			continue
		}
		t := start.Add(off)
		if over.Load() || !sleepUntil(ctx, t, now) {
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			converse(c, t)
		}()
	}
	wg.Wait()
}
