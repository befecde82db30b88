// Package merge combines the reports of workers that each ran one shard
// (--shard i/N) of the same seeded schedule into one report, recomputing
// every statistic — exact percentiles included — from the raw per-request
// records the shards embedded.
package merge

import (
	"fmt"
	"slices"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/cost"
	"github.com/gpulens/gpulens/loadgen/output"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/schedule"
)

// Input is one shard's report and the name (file) it came from, for
// error messages.
type Input struct {
	Name string
	Doc  *report.Document
}

// epoch is the common zero of the shards' relative times: every shard's
// offsets count from its own start, as the schedule does.
var epoch = time.Unix(0, 0).UTC()

// runKey identifies a level and repeat across shards.
type runKey struct {
	level  float64
	repeat int
}

// Merge combines the inputs. They must come from the same command line but
// for --shard: same mode, workload, seed and levels, distinct shards of
// the same count, and per-request records in every non-aggregate run.
func Merge(in []Input) (*report.Document, error) {
	if len(in) == 0 {
		return nil, fmt.Errorf("merge: no input reports")
	}
	first := in[0]
	meta := first.Doc.Metadata
	meta.Command = "merge"
	meta.Shards = nil
	meta.Warnings = nil
	meta.Interrupted = false
	meta.SaturationLevel, meta.SaturationReason = 0, ""

	seenShard := map[int]string{}
	count := 0
	var order []runKey
	type part struct {
		run     report.Run
		results []client.Result
		maxIn   int
		warmup  int
		users   int
		shards  int
	}
	parts := map[runKey]*part{}
	for _, inp := range in {
		d := inp.Doc
		if d.Metadata.Command == "merge" {
			return nil, fmt.Errorf("%s: already a merged report", inp.Name)
		}
		if d.Metadata.Seed != meta.Seed || d.Metadata.Model != meta.Model || d.Metadata.Endpoint != meta.Endpoint {
			return nil, fmt.Errorf("%s: seed %d, model %q, endpoint %q differ from %s (%d, %q, %q)", inp.Name, d.Metadata.Seed,
				d.Metadata.Model, d.Metadata.Endpoint, first.Name, meta.Seed, meta.Model, meta.Endpoint)
		}
		if d.Metadata.Started.Before(meta.Started) {
			meta.Started = d.Metadata.Started
		}
		if d.Metadata.Finished.After(meta.Finished) {
			meta.Finished = d.Metadata.Finished
		}
		meta.Interrupted = meta.Interrupted || d.Metadata.Interrupted
		if meta.ServerModel == "" {
			meta.ServerModel = d.Metadata.ServerModel
		}
		if meta.GPU == nil {
			meta.GPU = d.Metadata.GPU
		}
		for _, w := range d.Metadata.Warnings {
			meta.Warnings = append(meta.Warnings, inp.Name+": "+w)
		}
		var sh schedule.Shard
		for _, r := range d.Runs {
			if r.Aggregate {
				continue
			}
			s, err := schedule.ParseShard(r.Settings.Shard)
			if err != nil {
				return nil, fmt.Errorf("%s: run %q: settings.shard: %w", inp.Name, r.Name, err)
			}
			sh = s
			break
		}
		if sh.Count == 0 {
			return nil, fmt.Errorf("%s: no runs to merge", inp.Name)
		}
		if count == 0 {
			count = sh.Count
		}
		if sh.Count != count {
			return nil, fmt.Errorf("%s: shard %s, but %s has %d shards", inp.Name, sh, first.Name, count)
		}
		if prev, dup := seenShard[sh.Index]; dup {
			return nil, fmt.Errorf("%s: shard %s also in %s", inp.Name, sh, prev)
		}
		seenShard[sh.Index] = inp.Name
		meta.Shards = append(meta.Shards, sh.String())

		for _, r := range d.Runs {
			if r.Aggregate {
				continue
			}
			if r.Settings.Shard != sh.String() {
				return nil, fmt.Errorf("%s: run %q is shard %q, others %q", inp.Name, r.Name, r.Settings.Shard, sh)
			}
			if r.Requests == nil && r.Summary.RequestsCompleted+r.Summary.RequestsFailed > 0 {
				return nil, fmt.Errorf("%s: run %q has no per-request records (run the shards with --shard, or --embed-requests)", inp.Name, r.Name)
			}
			k := runKey{r.Level, r.Repeat}
			p := parts[k]
			if p == nil {
				p = &part{run: r}
				parts[k] = p
				order = append(order, k)
			} else if err := sameSettings(p.run.Settings, r.Settings); err != nil {
				return nil, fmt.Errorf("%s: run %q: %w", inp.Name, r.Name, err)
			}
			for i := range r.Requests {
				p.results = append(p.results, runner.FromRecord(&r.Requests[i], epoch))
			}
			p.maxIn += r.Summary.MaxInFlight
			p.warmup += r.Summary.WarmupRequests
			p.users += r.Settings.Concurrency
			p.shards++
		}
	}
	if len(seenShard) != count {
		var missing []int
		for i := 0; i < count; i++ {
			if _, ok := seenShard[i]; !ok {
				missing = append(missing, i)
			}
		}
		meta.Warnings = append(meta.Warnings, fmt.Sprintf("merged %d of %d shards: shards %v missing", len(seenShard), count, missing))
	}
	slices.Sort(meta.Shards)

	doc := &report.Document{}
	var reps []report.Run
	for i, k := range order {
		p := parts[k]
		if p.shards != len(in) {
			meta.Warnings = append(meta.Warnings, fmt.Sprintf("run %q: present in %d of %d reports", p.run.Name, p.shards, len(in)))
		}
		set := p.run.Settings
		set.Shard = ""
		name := p.run.Name
		level := p.run.Level
		if set.Mode == runner.Closed {
			// Every shard ran its own users: together, the sum.
			set.Concurrency = p.users
			level = float64(p.users)
			name = fmt.Sprintf("concurrency=%d", p.users)
			if k.repeat > 0 && hasRepeats(in) {
				name += fmt.Sprintf(" repeat=%d", k.repeat)
			}
		}
		slices.SortFunc(p.results, func(a, b client.Result) int { return a.Index - b.Index })
		target := 0.0
		if set.Mode == runner.Open {
			target = set.Rate
		}
		sum := runner.Summarize(p.results, runner.SummaryConfig{
			SLO:          set.SLO,
			Prices:       cost.Prices{GPUHourlyUSD: set.Cost.GPUHourlyUSD, GPUs: set.Cost.GPUs, OverheadHours: set.Cost.OverheadHours},
			TargetRate:   target,
			MeasureStart: epoch.Add(time.Duration(set.WarmupSeconds * float64(time.Second))),
		})
		// The shards' maxima may not have coincided: an upper bound.
		sum.MaxInFlight = p.maxIn
		sum.WarmupRequests = p.warmup
		if sum.RateNotAchieved {
			meta.Warnings = append(meta.Warnings, fmt.Sprintf("%s: target rate %.4g/s NOT achieved: sent %.4g/s, schedule lag p50 %.3gs p99 %.3gs",
				name, target, sum.AchievedRatePerSecond, sum.ScheduleLag.P50, sum.ScheduleLag.P99))
		}
		run := report.Run{Name: name, Settings: set, Summary: sum, Level: level, Repeat: k.repeat}
		doc.Runs = append(doc.Runs, run)
		reps = append(reps, run)
		// Close a level: aggregate its repeats as sweep does.
		if i+1 == len(order) || order[i+1].level != k.level {
			if len(reps) > 1 {
				doc.Runs = append(doc.Runs, output.Aggregate(reps))
			}
			reps = nil
		}
	}
	doc.Metadata = meta
	return doc, nil
}

// hasRepeats reports whether any input ran more than one repeat.
func hasRepeats(in []Input) bool {
	for _, inp := range in {
		for _, r := range inp.Doc.Runs {
			if r.Repeat > 1 || r.Aggregate {
				return true
			}
		}
	}
	return false
}

// sameSettings checks that two shards ran the same workload.
func sameSettings(a, b report.Settings) error {
	a.Shard, b.Shard = "", ""
	a.Concurrency, b.Concurrency = 0, 0 // closed loop: users per shard may differ
	if a != b {
		return fmt.Errorf("settings differ from the other shards' (%+v vs %+v)", b, a)
	}
	return nil
}
