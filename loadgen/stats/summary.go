package stats

import (
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// SummaryConfig holds what Summarize needs besides the records.
type SummaryConfig struct {
	SLO        report.SLO
	Prices     report.CostSettings
	TargetRate float64 // open loop; 0 in closed loop
	// Warmup is the offset from the run's start at which the measurement
	// window begins (or at the first intended send, when that is earlier).
	Warmup time.Duration
}

// Summarize computes the report summary of measured records. The formulas
// are documented in docs/loadgen-metrics.md. Records of requests that were
// in flight when the run was interrupted (report.ErrInterrupted) are
// counted in RequestsInterrupted and nowhere else.
func Summarize(records []report.Record, cfg SummaryConfig) report.Summary {
	s := report.Summary{Errors: map[string]int{}}
	var (
		ttft, itl, tpot, e2e, ttftSend, e2eSend, otps, inTok, outTok, reqIn, reqOut, lag []float64
		lastEnd, firstSent, lastSent                                                     time.Duration
		firstIntended, lastIntended                                                      time.Duration
		busy                                                                             time.Duration
	)
	secs := func(d time.Duration) float64 { return d.Seconds() }
	n := 0 // completed or failed
	for i := range records {
		r := &records[i]
		if r.Interrupted() {
			s.RequestsInterrupted++
			continue
		}
		n++
		if n == 1 || r.Sent < firstSent {
			firstSent = r.Sent
		}
		if n == 1 || r.Sent > lastSent {
			lastSent = r.Sent
		}
		if n == 1 || r.Intended < firstIntended {
			firstIntended = r.Intended
		}
		if n == 1 || r.Intended > lastIntended {
			lastIntended = r.Intended
		}
		if n == 1 || r.End > lastEnd {
			lastEnd = r.End
		}
		busy += r.End - r.Sent
		lag = append(lag, secs(r.Sent-r.Intended))
		if !r.OK() {
			s.RequestsFailed++
			s.Errors[r.ErrorClass]++
			continue
		}
		s.RequestsCompleted++
		if r.TokensEstimated {
			s.TokensEstimated = true
		}
		if r.UsageMismatch {
			s.UsageMismatches++
		}
		if r.KernelTimestamps {
			s.KernelTimestamped++
		}
		in := r.PromptTokens
		s.InputTokensTotal += int64(in)
		s.OutputTokensTotal += int64(r.OutputTokens)
		inTok = append(inTok, float64(in))
		outTok = append(outTok, float64(r.OutputTokens))
		if r.RequestedInputTokens > 0 {
			reqIn = append(reqIn, float64(r.RequestedInputTokens))
		}
		if r.RequestedOutputTokens > 0 {
			reqOut = append(reqOut, float64(r.RequestedOutputTokens))
		}
		reqE2E := secs(r.End - r.Intended)
		e2e = append(e2e, reqE2E)
		e2eSend = append(e2eSend, secs(r.End-r.Sent))
		if r.OutputTokens > 0 && r.End > r.Sent {
			otps = append(otps, float64(r.OutputTokens)/secs(r.End-r.Sent))
		}
		good := true
		if cfg.SLO.E2ESeconds > 0 && reqE2E > cfg.SLO.E2ESeconds {
			good = false
		}
		if r.FirstToken == 0 {
			if cfg.SLO.TTFTSeconds > 0 {
				good = false
			}
		} else {
			reqTTFT := secs(r.FirstToken - r.Intended)
			ttft = append(ttft, reqTTFT)
			ttftSend = append(ttftSend, secs(r.FirstToken-r.Sent))
			if cfg.SLO.TTFTSeconds > 0 && reqTTFT > cfg.SLO.TTFTSeconds {
				good = false
			}
			if r.OutputTokens > 1 {
				v := (reqE2E - reqTTFT) / float64(r.OutputTokens-1)
				tpot = append(tpot, v)
				if cfg.SLO.TPOTSeconds > 0 && v > cfg.SLO.TPOTSeconds {
					good = false
				}
			}
		}
		if good {
			s.GoodRequests++
		}
		itl = appendITL(itl, r)
	}
	s.TTFT, s.ITL, s.TPOT, s.E2E = Dist(ttft), Dist(itl), Dist(tpot), Dist(e2e)
	s.TTFTFromSend, s.E2EFromSend = Dist(ttftSend), Dist(e2eSend)
	s.RequestOutputTokensPerSecond = Dist(otps)
	s.InputTokens, s.OutputTokens = Dist(inTok), Dist(outTok)
	if len(reqIn) > 0 {
		d := Dist(reqIn)
		s.InputTokensRequested = &d
	}
	if len(reqOut) > 0 {
		d := Dist(reqOut)
		s.OutputTokensRequested = &d
	}
	s.ScheduleLag = Dist(lag)

	start := cfg.Warmup
	if n > 0 && firstIntended < start {
		start = firstIntended
	}
	if lastEnd > start {
		s.DurationSeconds = secs(lastEnd - start)
	}
	if d := s.DurationSeconds; d > 0 {
		s.RequestThroughput = float64(s.RequestsCompleted) / d
		s.OutputTokensPerSecond = float64(s.OutputTokensTotal) / d
		s.TotalTokensPerSecond = float64(s.OutputTokensTotal+s.InputTokensTotal) / d
		s.GoodputPerSecond = float64(s.GoodRequests) / d
		s.MeasuredConcurrencyAverage = busy.Seconds() / d
	}
	if n := s.RequestsCompleted + s.RequestsFailed; n > 0 {
		s.GoodputRatio = float64(s.GoodRequests) / float64(n)
	}
	if n > 1 && lastSent > firstSent {
		s.AchievedRatePerSecond = float64(n-1) / secs(lastSent-firstSent)
	} else if d := s.DurationSeconds; d > 0 {
		s.AchievedRatePerSecond = float64(n) / d
	}
	if cfg.TargetRate > 0 {
		s.TargetRatePerSecond = cfg.TargetRate
		scheduled := cfg.TargetRate
		if n > 1 && lastIntended > firstIntended {
			scheduled = float64(n-1) / secs(lastIntended-firstIntended)
		}
		// Behind by more than 5 % of the scheduled rate, or the median send
		// was late by more than one mean inter-arrival time.
		s.RateNotAchieved = s.AchievedRatePerSecond < 0.95*scheduled || s.ScheduleLag.P50 > 1/cfg.TargetRate
	}
	s.Cost = cfg.Prices.RunCost(s.DurationSeconds, s.RequestsCompleted, s.InputTokensTotal, s.OutputTokensTotal)
	s.Reasoning = Reasoning(records)
	return s
}

// Reasoning is the reasoning side of a run (report.ReasoningSummary) over
// its completed records, or nil when none of them reasoned. Latencies
// count from the intended send, as in Summarize.
func Reasoning(records []report.Record) *report.ReasoningSummary {
	reasoned := false
	for i := range records {
		reasoned = reasoned || (records[i].OK() && records[i].Reasoned())
	}
	if !reasoned {
		return nil
	}
	rs := &report.ReasoningSummary{}
	var rTok, aTok, ttft, itl, tpot []float64
	for i := range records {
		r := &records[i]
		if !r.OK() {
			continue
		}
		if r.Reasoned() {
			rs.Requests++
		}
		rt, at := r.ReasoningTokens, r.AnswerTokens()
		rTok, aTok = append(rTok, float64(rt)), append(aTok, float64(at))
		rs.ReasoningTokensTotal += int64(rt)
		rs.AnswerTokensTotal += int64(at)
		fa := r.FirstAnswer()
		if fa == 0 {
			if r.Reasoned() {
				rs.NoAnswer++
			}
			continue
		}
		v := (fa - r.Intended).Seconds()
		ttft = append(ttft, v)
		if at > 1 {
			tpot = append(tpot, ((r.End-r.Intended).Seconds()-v)/float64(at-1))
		}
		for g := range r.AnswerInterTokenLatencies() {
			itl = append(itl, g)
		}
	}
	rs.ReasoningTokens, rs.AnswerTokens = Dist(rTok), Dist(aTok)
	rs.AnswerTTFT, rs.AnswerITL, rs.AnswerTPOT = Dist(ttft), Dist(itl), Dist(tpot)
	return rs
}

// appendITL adds the token-level inter-token latencies of r
// (report.Record.InterTokenLatencies).
func appendITL(dst []float64, r *report.Record) []float64 {
	for g := range r.InterTokenLatencies() {
		dst = append(dst, g)
	}
	return dst
}
