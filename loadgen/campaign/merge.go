package campaign

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// Input is one shard's report and the name (file) it came from, for
// error messages.
type Input = report.Named

// embedRequests names MergeOptions.EmbedRequests, and the load generator's
// option of the same name, in errors.
const embedRequests = option.Name("EmbedRequests")

// MergeOptions change what Merge writes.
type MergeOptions struct {
	// EmbedRequests puts the union of the inputs' per-request records into
	// the merged report's non-aggregate runs (runs[].requests), as they
	// were, so that the merged report can be merged again. Every shard's
	// record times count from its own start, as the schedule's offsets do:
	// the shards' records share one time axis.
	EmbedRequests bool
}

// warnPrefix starts the warnings Merge writes that a later merge of this
// report recomputes (missing shards, a target rate not achieved): it drops
// them from its merged inputs and keeps the rest — the warnings they
// carried and runs missing from some of their inputs, which no later merge
// can see again.
const warnPrefix = "merge: "

// runKey identifies a level and repeat across shards. Open-loop levels are
// the whole schedule's rate, the same in every input; closed-loop levels
// are users per input, which may differ (a merged input holds the sum of
// its workers' users), so closed-loop runs are matched by the position of
// their level in the input (the sweep's levels in order).
type runKey struct {
	level  float64
	repeat int
}

// Files reads the reports at paths and merges them.
func Files(paths []string, opt MergeOptions) (*report.Document, error) {
	in, err := report.ReadAll(paths)
	if err != nil {
		return nil, err
	}
	return Merge(in, opt)
}

// Merge combines the inputs. They must come from the same campaign but for
// the shard: same mode, workload, seed and levels, disjoint sets of shards
// of the same count, and per-request records in every non-aggregate run.
// The caller stamps the result (report.Metadata.Stamp).
func Merge(in []Input, opt MergeOptions) (*report.Document, error) {
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
		records []report.Record
		maxIn   int
		warmup  int
		users   int
		inputs  int
		covered int // shards in the inputs that have this run
	}
	parts := map[runKey]*part{}
	nonces := map[string][]string{} // prompt nonce → inputs that drew it
	var nonceOrder []string
	for _, inp := range in {
		d := inp.Doc
		merged := d.Metadata.Command == "merge"
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
		if n := d.Metadata.PromptNonce; nonces[n] == nil {
			nonceOrder = append(nonceOrder, n)
		}
		nonces[d.Metadata.PromptNonce] = append(nonces[d.Metadata.PromptNonce], inp.Name)
		if meta.ServerModel == "" {
			meta.ServerModel = d.Metadata.ServerModel
		}
		if meta.GPU == nil {
			meta.GPU = d.Metadata.GPU
		}
		for _, w := range d.Metadata.Warnings {
			if merged && strings.HasPrefix(w, warnPrefix) {
				continue // about that merge's inputs: recomputed below
			}
			meta.Warnings = append(meta.Warnings, inp.Name+": "+w)
		}
		cover, shardSetting, err := coverage(inp)
		if err != nil {
			return nil, err
		}
		if count == 0 {
			count = cover[0].Count
		}
		for _, sh := range cover {
			if sh.Count != count {
				return nil, fmt.Errorf("%s: shard %s, but %s has %d shards", inp.Name, sh, first.Name, count)
			}
			if prev, dup := seenShard[sh.Index]; dup {
				return nil, fmt.Errorf("%s: shard %s also in %s", inp.Name, sh, prev)
			}
			seenShard[sh.Index] = inp.Name
			meta.Shards = append(meta.Shards, sh.String())
		}
		owned := map[int]bool{}
		for _, sh := range cover {
			owned[sh.Index] = true
		}

		ord, prevLevel := -1, 0.0
		for _, r := range d.Runs {
			if r.Aggregate {
				continue
			}
			if ord < 0 || r.Level != prevLevel {
				ord, prevLevel = ord+1, r.Level
			}
			if r.Settings.Shard != shardSetting {
				return nil, fmt.Errorf("%s: run %q is shard %q, others %q", inp.Name, r.Name, r.Settings.Shard, shardSetting)
			}
			if r.Requests == nil && r.Summary.RequestsCompleted+r.Summary.RequestsFailed > 0 {
				if merged {
					return nil, option.Errorf("%s: run %q has no per-request records: a report merged without %s cannot be merged again "+
						"(merge the workers' reports, or merge them with %s)", inp.Name, r.Name, embedRequests, embedRequests)
				}
				return nil, option.Errorf("%s: run %q has no per-request records (run the shards with %s, or %s)", inp.Name, r.Name,
					option.Name("Shard"), embedRequests)
			}
			k := runKey{r.Level, r.Repeat}
			if r.Settings.Mode == report.ModeClosed {
				k.level = float64(ord)
			}
			p := parts[k]
			if p == nil {
				p = &part{run: r}
				parts[k] = p
				order = append(order, k)
			} else if err := sameSettings(p.run.Settings, r.Settings); err != nil {
				return nil, fmt.Errorf("%s: run %q: %w", inp.Name, r.Name, err)
			}
			for i := range r.Requests {
				rec := &r.Requests[i]
				owner := rec.Index
				if rec.Turn > 0 { // multi-turn: shards own whole conversations
					owner = rec.Conversation
				}
				if owner < 0 || !owned[owner%count] {
					return nil, fmt.Errorf("%s: run %q: request %d is not in shards %v", inp.Name, r.Name, rec.Index, cover)
				}
				p.records = append(p.records, *rec)
			}
			p.maxIn += r.Summary.MaxInFlight
			p.warmup += r.Summary.WarmupRequests
			p.users += r.Settings.Concurrency
			p.inputs++
			p.covered += len(cover)
		}
	}
	if len(nonceOrder) > 1 {
		// Workers that drew their own nonces: no one nonce replays the
		// merged run; each input's does its part.
		meta.PromptNonce = ""
		var list []string
		for _, n := range nonceOrder {
			list = append(list, fmt.Sprintf("%q (%s)", n, strings.Join(nonces[n], ", ")))
		}
		meta.Warnings = append(meta.Warnings, "inputs sent prompts of different nonces, "+strings.Join(list, ", ")+
			": replay each with its own metadata.prompt_nonce")
	}
	if len(seenShard) != count {
		meta.Warnings = append(meta.Warnings, fmt.Sprintf(warnPrefix+"merged %d of %d shards: shards %v missing",
			len(seenShard), count, missingShards(seenShard, count)))
	}
	slices.SortFunc(meta.Shards, func(a, b string) int {
		x, _ := runner.ParseShard(a)
		y, _ := runner.ParseShard(b)
		return x.Index - y.Index
	})

	doc := &report.Document{}
	var reps []report.Run
	repeats := hasRepeats(in)
	for i, k := range order {
		p := parts[k]
		if p.inputs != len(in) {
			meta.Warnings = append(meta.Warnings, fmt.Sprintf("run %q: present in %d of %d reports", p.run.Name, p.inputs, len(in)))
		}
		set := p.run.Settings
		set.Shard = ""
		name := p.run.Name
		level := p.run.Level
		if set.Mode == report.ModeClosed {
			// Every shard ran its own users: together, the sum.
			set.Concurrency = p.users
			level = float64(p.users)
			name = report.RunName(report.ModeClosed, level, 0)
			if repeats {
				name = report.RunName(report.ModeClosed, level, k.repeat)
			}
		}
		slices.SortFunc(p.records, func(a, b report.Record) int { return a.Index - b.Index })
		target := 0.0
		if set.Mode == report.ModeOpen {
			// The schedule's rate, or the covered shards' part of it.
			target = set.Rate
			if p.covered != count {
				target = set.Rate * float64(p.covered) / float64(count)
			}
		}
		sum := stats.Summarize(p.records, stats.SummaryConfig{
			SLO:        set.SLO,
			Prices:     set.Cost,
			TargetRate: target,
			Warmup:     time.Duration(set.WarmupSeconds * float64(time.Second)),
		})
		// The shards' maxima may not have coincided: an upper bound.
		sum.MaxInFlight = p.maxIn
		sum.WarmupRequests = p.warmup
		if sum.RateNotAchieved {
			meta.Warnings = append(meta.Warnings, warnPrefix+RateWarning(name, target, sum))
		}
		run := report.Run{Name: name, Settings: set, Summary: sum, Level: level, Repeat: k.repeat}
		run.Turns = stats.Turns(p.records)
		run.PrefixCache, run.Images = stats.PrefixCache(p.records), stats.Images(p.records)
		if opt.EmbedRequests {
			run.Requests = p.records
		}
		doc.Runs = append(doc.Runs, run)
		reps = append(reps, run)
		// Close a level: aggregate its repeats as a sweep does.
		if i+1 == len(order) || order[i+1].level != k.level {
			CloseLevel(doc, reps)
			reps = nil
		}
	}
	doc.Metadata = meta
	return doc, nil
}

// coverage returns the shards an input covers and the settings.shard its
// non-aggregate runs carry: a worker's one shard (its own, "" for a
// single process: 0/1), or the shards a merged report lists in
// metadata.shards (its runs' settings.shard is "").
func coverage(inp Input) ([]runner.Shard, string, error) {
	d := inp.Doc
	if d.Metadata.Command == "merge" {
		if len(d.Metadata.Shards) == 0 {
			return nil, "", fmt.Errorf("%s: merged report without metadata.shards", inp.Name)
		}
		var cover []runner.Shard
		for _, s := range d.Metadata.Shards {
			sh, err := runner.ParseShard(s)
			if err != nil || s == "" {
				return nil, "", fmt.Errorf("%s: metadata.shards: %q: want i/N", inp.Name, s)
			}
			if len(cover) > 0 && sh.Count != cover[0].Count {
				return nil, "", fmt.Errorf("%s: metadata.shards %v: shard counts differ", inp.Name, d.Metadata.Shards)
			}
			cover = append(cover, sh)
		}
		if !slices.ContainsFunc(d.Runs, func(r report.Run) bool { return !r.Aggregate }) {
			return nil, "", fmt.Errorf("%s: no runs to merge", inp.Name)
		}
		return cover, "", nil
	}
	for _, r := range d.Runs {
		if r.Aggregate {
			continue
		}
		sh, err := runner.ParseShard(r.Settings.Shard)
		if err != nil {
			return nil, "", fmt.Errorf("%s: run %q: settings.shard: %w", inp.Name, r.Name, err)
		}
		return []runner.Shard{sh}, r.Settings.Shard, nil
	}
	return nil, "", fmt.Errorf("%s: no runs to merge", inp.Name)
}

// missingShards lists the shard indexes in [0, count) not in seen.
func missingShards(seen map[int]string, count int) []int {
	var missing []int
	for i := 0; i < count; i++ {
		if _, ok := seen[i]; !ok {
			missing = append(missing, i)
		}
	}
	return missing
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
