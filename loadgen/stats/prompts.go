package stats

import (
	"cmp"
	"slices"

	"github.com/gpulens/gpulens/loadgen/report"
)

// PrefixCache summarises what the server said of its prefix cache over
// the completed requests of a run (report.PrefixCacheSummary): the cached
// tokens its usage reported and their share of the prompt tokens, and, for
// a shared-prefix workload, the share an unbounded cache would serve. It
// returns nil when no completed request reported cached tokens or used a
// shared prefix.
func PrefixCache(records []report.Record) *report.PrefixCacheSummary {
	s := &report.PrefixCacheSummary{}
	var (
		cached         []float64
		shared         bool
		expNum, expDen int64
		groups         = map[int]bool{}
		order          []*report.Record
	)
	for i := range records {
		r := &records[i]
		if r.Interrupted() {
			continue
		}
		if r.PrefixGroup > 0 {
			shared = true
			order = append(order, r)
		}
		if !r.OK() {
			continue
		}
		s.Requests++
		if r.CachedTokens != nil {
			s.Reported++
			s.PromptTokens += int64(r.PromptTokens)
			s.CachedTokens += int64(*r.CachedTokens)
			cached = append(cached, float64(*r.CachedTokens))
			if *r.CachedTokens > 0 {
				s.RequestsWithHits++
			}
		}
	}
	if s.Reported == 0 && !shared {
		return nil
	}
	if s.Reported > 0 {
		s.CachedTokensPerRequest = Dist(cached)
		if s.PromptTokens > 0 {
			s.HitRatio = new(float64(s.CachedTokens) / float64(s.PromptTokens))
		}
	}
	if shared {
		// In the order they were sent (the index breaks ties): a prefix is
		// cached once a request carrying it was sent, failed or not.
		slices.SortStableFunc(order, func(a, b *report.Record) int {
			if a.Sent != b.Sent {
				return cmp.Compare(a.Sent, b.Sent)
			}
			return a.Index - b.Index
		})
		seen := map[int]bool{}
		for _, r := range order {
			if r.OK() {
				groups[r.PrefixGroup] = true
				expDen += int64(r.PromptTokens)
				if seen[r.PrefixGroup] {
					expNum += int64(r.PrefixTokens)
				}
			}
			seen[r.PrefixGroup] = true
		}
		s.Groups = len(groups)
		if expDen > 0 {
			s.ExpectedHitRatio = new(min(float64(expNum)/float64(expDen), 1))
		}
	}
	return s
}

// Images counts the images of a run's completed requests
// (report.ImageSummary); nil when none carried any.
func Images(records []report.Record) *report.ImageSummary {
	s := &report.ImageSummary{}
	var per []float64
	for i := range records {
		r := &records[i]
		if !r.OK() {
			continue
		}
		s.Requests++
		s.Images += int64(r.Images)
		per = append(per, float64(r.Images))
	}
	if s.Images == 0 {
		return nil
	}
	s.PerRequest = Dist(per)
	return s
}

// AggregatePrefixCache combines the prefix-cache side of a level's
// repeats as Aggregate combines the rest: counts and token sums added,
// the ratios the mean over the repeats that have them, the cached
// tokens' distribution the mean of the repeats' (meanDist). Nil when no
// repeat has one.
func AggregatePrefixCache(reps []report.Run) *report.PrefixCacheSummary {
	var (
		out      report.PrefixCacheSummary
		have     bool
		hit, exp []float64
	)
	for i := range reps {
		p := reps[i].PrefixCache
		if p == nil {
			continue
		}
		have = true
		out.Requests += p.Requests
		out.Reported += p.Reported
		out.PromptTokens += p.PromptTokens
		out.CachedTokens += p.CachedTokens
		out.RequestsWithHits += p.RequestsWithHits
		out.Groups = max(out.Groups, p.Groups)
		if p.HitRatio != nil {
			hit = append(hit, *p.HitRatio)
		}
		if p.ExpectedHitRatio != nil {
			exp = append(exp, *p.ExpectedHitRatio)
		}
	}
	if !have {
		return nil
	}
	out.HitRatio, out.ExpectedHitRatio = mean(hit), mean(exp)
	if d, ok := meanDist(reps, func(r *report.Run) *report.Dist {
		if r.PrefixCache == nil || r.PrefixCache.Reported == 0 {
			return nil
		}
		return &r.PrefixCache.CachedTokensPerRequest
	}); ok {
		out.CachedTokensPerRequest = d
	}
	return &out
}

// AggregateImages adds up the images of a level's repeats.
func AggregateImages(reps []report.Run) *report.ImageSummary {
	var out report.ImageSummary
	for i := range reps {
		if p := reps[i].Images; p != nil {
			out.Requests += p.Requests
			out.Images += p.Images
		}
	}
	if out.Images == 0 {
		return nil
	}
	if d, ok := meanDist(reps, func(r *report.Run) *report.Dist {
		if r.Images == nil {
			return nil
		}
		return &r.Images.PerRequest
	}); ok {
		out.PerRequest = d
	}
	return &out
}

// mean is the mean of vs, nil when empty.
func mean(vs []float64) *float64 {
	if len(vs) == 0 {
		return nil
	}
	m := 0.0
	for _, v := range vs {
		m += v / float64(len(vs))
	}
	return &m
}
