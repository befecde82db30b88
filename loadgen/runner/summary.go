package runner

import (
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/cost"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// SummaryConfig holds what Summarize needs besides the results.
type SummaryConfig struct {
	SLO        report.SLO
	Prices     cost.Prices
	TargetRate float64 // open loop; 0 in closed loop
	// MeasureStart begins the measurement window (after warmup).
	MeasureStart time.Time
}

// Summarize computes the report summary of measured results. The formulas
// are documented in docs/loadgen-metrics.md. Results of requests that were
// in flight when the run was interrupted (Canceled: Outcome.InFlight) are
// counted in RequestsInterrupted and nowhere else.
func Summarize(results []client.Result, cfg SummaryConfig) report.Summary {
	s := report.Summary{Errors: map[string]int{}}
	var (
		ttft, itl, tpot, e2e, ttftSend, e2eSend, otps, inTok, outTok, lag []float64
		lastEnd, firstSent, lastSent                                      time.Time
		firstIntended, lastIntended                                       time.Time
		busy                                                              time.Duration
	)
	secs := func(d time.Duration) float64 { return d.Seconds() }
	n := 0 // completed or failed
	for i := range results {
		r := &results[i]
		if r.Canceled {
			s.RequestsInterrupted++
			continue
		}
		n++
		if firstSent.IsZero() || r.Sent.Before(firstSent) {
			firstSent = r.Sent
		}
		if r.Sent.After(lastSent) {
			lastSent = r.Sent
		}
		if firstIntended.IsZero() || r.Intended.Before(firstIntended) {
			firstIntended = r.Intended
		}
		if r.Intended.After(lastIntended) {
			lastIntended = r.Intended
		}
		if r.End.After(lastEnd) {
			lastEnd = r.End
		}
		busy += r.End.Sub(r.Sent)
		lag = append(lag, secs(r.Sent.Sub(r.Intended)))
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
		reqE2E := secs(r.End.Sub(r.Intended))
		e2e = append(e2e, reqE2E)
		e2eSend = append(e2eSend, secs(r.End.Sub(r.Sent)))
		if r.OutputTokens > 0 && r.End.After(r.Sent) {
			otps = append(otps, float64(r.OutputTokens)/secs(r.End.Sub(r.Sent)))
		}
		good := true
		if cfg.SLO.E2ESeconds > 0 && reqE2E > cfg.SLO.E2ESeconds {
			good = false
		}
		if r.FirstToken.IsZero() {
			if cfg.SLO.TTFTSeconds > 0 {
				good = false
			}
		} else {
			reqTTFT := secs(r.FirstToken.Sub(r.Intended))
			ttft = append(ttft, reqTTFT)
			ttftSend = append(ttftSend, secs(r.FirstToken.Sub(r.Sent)))
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
	s.TTFT, s.ITL, s.TPOT, s.E2E = stats.Dist(ttft), stats.Dist(itl), stats.Dist(tpot), stats.Dist(e2e)
	s.TTFTFromSend, s.E2EFromSend = stats.Dist(ttftSend), stats.Dist(e2eSend)
	s.RequestOutputTokensPerSecond = stats.Dist(otps)
	s.InputTokens, s.OutputTokens = stats.Dist(inTok), stats.Dist(outTok)
	s.ScheduleLag = stats.Dist(lag)

	start := cfg.MeasureStart
	if start.IsZero() || (!firstIntended.IsZero() && firstIntended.Before(start)) {
		start = firstIntended
	}
	if lastEnd.After(start) {
		s.DurationSeconds = secs(lastEnd.Sub(start))
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
	if n > 1 && lastSent.After(firstSent) {
		s.AchievedRatePerSecond = float64(n-1) / secs(lastSent.Sub(firstSent))
	} else if d := s.DurationSeconds; d > 0 {
		s.AchievedRatePerSecond = float64(n) / d
	}
	if cfg.TargetRate > 0 {
		s.TargetRatePerSecond = cfg.TargetRate
		scheduled := cfg.TargetRate
		if n > 1 && lastIntended.After(firstIntended) {
			scheduled = float64(n-1) / secs(lastIntended.Sub(firstIntended))
		}
		// Behind by more than 5 % of the scheduled rate, or the median send
		// was late by more than one mean inter-arrival time.
		s.RateNotAchieved = s.AchievedRatePerSecond < 0.95*scheduled || s.ScheduleLag.P50 > 1/cfg.TargetRate
	}
	s.Cost = cost.Compute(cfg.Prices, s.DurationSeconds, s.RequestsCompleted, s.InputTokensTotal, s.OutputTokensTotal)
	return s
}

// appendITL adds the token-level inter-token latencies of r
// (client.Result.InterTokenLatencies).
func appendITL(dst []float64, r *client.Result) []float64 {
	for g := range r.InterTokenLatencies() {
		dst = append(dst, g)
	}
	return dst
}

// ITL returns the token-level inter-token latencies of one result.
func ITL(r *client.Result) []float64 { return appendITL(nil, r) }
