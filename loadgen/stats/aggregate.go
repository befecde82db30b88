package stats

import (
	"github.com/gpulens/gpulens/loadgen/report"
)

// Aggregate combines the repeats of one level, the one place they are:
// every figure of report.SummaryFigures, report.GPUFigures and
// report.ReasoningFigures marked Stat
// gets the mean across the repeats that have it, with its stddev and
// Student-t 95 % CI, in Summary.Stats; the summary's figures and
// distributions are the means, counts are summed; the GPU side is
// AggregateGPU's, the turn side (multi-turn runs) AggregateTurns', the
// prefix cache and images AggregatePrefixCache's and AggregateImages', and
// the reasoning side AggregateReasoning's.
func Aggregate(reps []report.Run) report.Run {
	agg := report.Run{Name: report.AggregateName(reps[0].Name, len(reps)), Settings: reps[0].Settings, Level: reps[0].Level, Aggregate: true}
	s := &agg.Summary
	s.Errors = map[string]int{}
	s.Stats = map[string]report.Stat{}
	for _, fs := range [][]report.Figure{report.SummaryFigures, report.GPUFigures, report.ReasoningFigures} {
		for _, f := range fs {
			if !f.Stat {
				continue
			}
			var vals []float64
			for i := range reps {
				if v, ok := f.Measured(&reps[i]); ok {
					vals = append(vals, v)
				}
			}
			if len(vals) > 0 {
				s.Stats[f.Key] = Interval(vals)
			}
		}
	}
	agg.GPU = AggregateGPU(reps)
	agg.Turns = AggregateTurns(reps)
	agg.PrefixCache, agg.Images = AggregatePrefixCache(reps), AggregateImages(reps)
	s.Reasoning = AggregateReasoning(reps)
	dists := []struct {
		dst *report.Dist
		get func(*report.Summary) *report.Dist
	}{
		{&s.TTFT, func(x *report.Summary) *report.Dist { return &x.TTFT }},
		{&s.ITL, func(x *report.Summary) *report.Dist { return &x.ITL }},
		{&s.TPOT, func(x *report.Summary) *report.Dist { return &x.TPOT }},
		{&s.E2E, func(x *report.Summary) *report.Dist { return &x.E2E }},
		{&s.ScheduleLag, func(x *report.Summary) *report.Dist { return &x.ScheduleLag }},
		{&s.TTFTFromSend, func(x *report.Summary) *report.Dist { return &x.TTFTFromSend }},
		{&s.E2EFromSend, func(x *report.Summary) *report.Dist { return &x.E2EFromSend }},
		{&s.InputTokens, func(x *report.Summary) *report.Dist { return &x.InputTokens }},
		{&s.OutputTokens, func(x *report.Summary) *report.Dist { return &x.OutputTokens }},
	}
	// The lengths asked for: the mean over the repeats that have them.
	for _, d := range []struct {
		dst **report.Dist
		get func(*report.Summary) *report.Dist
	}{
		{&s.InputTokensRequested, func(x *report.Summary) *report.Dist { return x.InputTokensRequested }},
		{&s.OutputTokensRequested, func(x *report.Summary) *report.Dist { return x.OutputTokensRequested }},
	} {
		if m, ok := meanDist(reps, func(r *report.Run) *report.Dist { return d.get(&r.Summary) }); ok {
			*d.dst = &m
		}
	}
	for _, d := range dists {
		*d.dst, _ = meanDist(reps, func(r *report.Run) *report.Dist { return d.get(&r.Summary) })
	}
	for i := range reps {
		r := &reps[i].Summary
		s.RequestsCompleted += r.RequestsCompleted
		s.RequestsFailed += r.RequestsFailed
		s.RequestsInterrupted += r.RequestsInterrupted
		s.WarmupRequests += r.WarmupRequests
		s.GoodRequests += r.GoodRequests
		s.InputTokensTotal += r.InputTokensTotal
		s.OutputTokensTotal += r.OutputTokensTotal
		s.UsageMismatches += r.UsageMismatches
		s.KernelTimestamped += r.KernelTimestamped
		s.TokensEstimated = s.TokensEstimated || r.TokensEstimated
		s.RateNotAchieved = s.RateNotAchieved || r.RateNotAchieved
		s.MaxInFlight = max(s.MaxInFlight, r.MaxInFlight)
		for k, v := range r.Errors {
			s.Errors[k] += v
		}
		s.TargetRatePerSecond = r.TargetRatePerSecond
	}
	mean := func(k string) float64 { return s.Stats[k].Mean }
	s.RequestThroughput = mean("request_throughput_per_second")
	s.OutputTokensPerSecond = mean("output_tokens_per_second")
	s.TotalTokensPerSecond = mean("total_tokens_per_second")
	s.GoodputPerSecond = mean("goodput_per_second")
	s.GoodputRatio = mean("goodput_ratio")
	s.AchievedRatePerSecond = mean("achieved_rate_per_second")
	s.DurationSeconds = mean("duration_seconds")
	s.Cost = report.Cost{PerRequestUSD: mean("cost.per_request_usd"), Per1kRequestsUSD: mean("cost.per_1k_requests_usd"),
		PerMillionInputTokensUSD: mean("cost.per_million_input_tokens_usd"), PerMillionOutputTokensUSD: mean("cost.per_million_output_tokens_usd"),
		TotalUSD: mean("cost.total_usd")}
	return agg
}

// meanDist is the typical distribution of the repeats (get's distribution
// of each): the total count, the largest maximum, and the mean of every
// other figure over the repeats in which it has values (a repeat whose
// requests all failed has no TTFT, not a TTFT of zero that would pull the
// mean down); false when none has any.
func meanDist[T any](reps []T, get func(*T) *report.Dist) (report.Dist, bool) {
	var have []*report.Dist
	for i := range reps {
		if d := get(&reps[i]); d != nil && d.Count > 0 {
			have = append(have, d)
		}
	}
	var m report.Dist
	k := float64(len(have))
	for _, v := range have {
		m.Count += v.Count
		m.Mean += v.Mean / k
		m.Stddev += v.Stddev / k
		m.P50 += v.P50 / k
		m.P90 += v.P90 / k
		m.P95 += v.P95 / k
		m.P99 += v.P99 / k
		m.Max = max(m.Max, v.Max)
	}
	return m, len(have) > 0
}

// AggregateReasoning combines the reasoning side
// (report.ReasoningSummary) of the repeats of one level (Aggregate) by
// the rules of the other figures: counts and totals summed, every
// distribution meanDist over the repeats in which it has values. Repeats
// without a reasoning side are left out; nil when none has one.
func AggregateReasoning(reps []report.Run) *report.ReasoningSummary {
	var rs []*report.ReasoningSummary
	for i := range reps {
		if r := reps[i].Summary.Reasoning; r != nil {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil
	}
	agg := &report.ReasoningSummary{}
	for _, r := range rs {
		agg.Requests += r.Requests
		agg.NoAnswer += r.NoAnswer
		agg.ReasoningTokensTotal += r.ReasoningTokensTotal
		agg.AnswerTokensTotal += r.AnswerTokensTotal
	}
	for _, d := range []struct {
		dst *report.Dist
		get func(*report.ReasoningSummary) *report.Dist
	}{
		{&agg.ReasoningTokens, func(x *report.ReasoningSummary) *report.Dist { return &x.ReasoningTokens }},
		{&agg.AnswerTokens, func(x *report.ReasoningSummary) *report.Dist { return &x.AnswerTokens }},
		{&agg.AnswerTTFT, func(x *report.ReasoningSummary) *report.Dist { return &x.AnswerTTFT }},
		{&agg.AnswerITL, func(x *report.ReasoningSummary) *report.Dist { return &x.AnswerITL }},
		{&agg.AnswerTPOT, func(x *report.ReasoningSummary) *report.Dist { return &x.AnswerTPOT }},
	} {
		*d.dst, _ = meanDist(rs, func(r **report.ReasoningSummary) *report.Dist { return d.get(*r) })
	}
	return agg
}

// AggregateTurns combines the turn side (report.TurnSummary) of the
// repeats of one multi-turn level (Aggregate) by the rules of the other
// distributions, so that it reads as one typical repeat: Conversations is
// the total over the repeats, and every distribution (first turn, later
// turns, each turn of ByTurn) is meanDist over the repeats in which it
// has values (a repeat whose later turns all failed has no later-turn
// TTFT, not one of zero). Repeats without a turn side (single-turn runs)
// are left out; nil when none has one.
func AggregateTurns(reps []report.Run) *report.TurnSummary {
	var ts []*report.TurnSummary
	for i := range reps {
		if t := reps[i].Turns; t != nil {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return nil
	}
	agg := &report.TurnSummary{}
	turns := 0
	for _, t := range ts {
		agg.Conversations += t.Conversations
		turns = max(turns, len(t.ByTurn))
	}
	mean := func(get func(*report.TurnSummary) *report.Dist) report.Dist {
		m, _ := meanDist(ts, func(t **report.TurnSummary) *report.Dist { return get(*t) })
		return m
	}
	agg.FirstTurnTTFT = mean(func(t *report.TurnSummary) *report.Dist { return &t.FirstTurnTTFT })
	agg.LaterTurnsTTFT = mean(func(t *report.TurnSummary) *report.Dist { return &t.LaterTurnsTTFT })
	agg.FirstTurnInputTokens = mean(func(t *report.TurnSummary) *report.Dist { return &t.FirstTurnInputTokens })
	agg.LaterTurnsInputTokens = mean(func(t *report.TurnSummary) *report.Dist { return &t.LaterTurnsInputTokens })
	for i := range turns {
		agg.ByTurn = append(agg.ByTurn, mean(func(t *report.TurnSummary) *report.Dist {
			if i < len(t.ByTurn) {
				return &t.ByTurn[i]
			}
			return nil
		}))
	}
	return agg
}

// AggregateGPU combines the GPU side of the repeats of one level
// (Aggregate): every figure (peak
// memory, utilisation, power, energy, duration, tokens per joule, energy
// per request) is the mean of the repeats', so that an aggregate row is
// one typical repeat; only Samples is the total over the repeats. Repeats
// without a GPU side are left out; nil when none has one. Per GPU (matched
// by GPU index and UUID, in the first repeat's order): the mean over the
// repeats that have that GPU. Error and Warning are the first repeat's,
// named.
func AggregateGPU(reps []report.Run) *report.RunGPU {
	var gs []*report.RunGPU
	var errs, warns []string
	for i := range reps {
		if g := reps[i].GPU; g != nil {
			gs = append(gs, g)
			if g.Error != "" {
				errs = append(errs, reps[i].Name+": "+g.Error)
			}
			if g.Warning != "" {
				warns = append(warns, reps[i].Name+": "+g.Warning)
			}
		}
	}
	if len(gs) == 0 {
		return nil
	}
	n := float64(len(gs))
	agg := &report.RunGPU{}
	type key struct{ gpu, uuid string }
	at := map[key]int{}
	count := map[key]int{}
	for _, g := range gs {
		agg.PeakMemoryUsedBytes += g.PeakMemoryUsedBytes / n
		agg.MeanUtilizationRatio += g.MeanUtilizationRatio / n
		agg.MeanPowerWatts += g.MeanPowerWatts / n
		agg.EnergyJoules += g.EnergyJoules / n
		agg.DurationSeconds += g.DurationSeconds / n
		agg.EnergyExtrapolatedRatio += g.EnergyExtrapolatedRatio / n
		agg.EnergyFromPower = agg.EnergyFromPower || g.EnergyFromPower
		agg.OutputTokensPerJoule += g.OutputTokensPerJoule / n
		agg.EnergyPerRequestJoules += g.EnergyPerRequestJoules / n
		agg.Samples += g.Samples
		for _, d := range g.GPUs {
			k := key{d.GPU, d.UUID}
			i, ok := at[k]
			if !ok {
				i = len(agg.GPUs)
				at[k] = i
				agg.GPUs = append(agg.GPUs, report.RunGPUDevice{GPU: d.GPU, UUID: d.UUID, Name: d.Name})
			}
			a := &agg.GPUs[i]
			a.PeakMemoryUsedBytes += d.PeakMemoryUsedBytes
			a.MeanUtilizationRatio += d.MeanUtilizationRatio
			a.MeanPowerWatts += d.MeanPowerWatts
			a.EnergyJoules += d.EnergyJoules
			count[k]++
		}
	}
	for i := range agg.GPUs {
		a := &agg.GPUs[i]
		c := float64(count[key{a.GPU, a.UUID}])
		a.PeakMemoryUsedBytes /= c
		a.MeanUtilizationRatio /= c
		a.MeanPowerWatts /= c
		a.EnergyJoules /= c
	}
	if len(errs) > 0 {
		agg.Error = errs[0]
	}
	if len(warns) > 0 {
		agg.Warning = warns[0]
	}
	return agg
}
