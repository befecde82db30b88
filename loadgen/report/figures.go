package report

// Figure is one per-run figure of a report, the one description every
// reader of runs uses: the CSV summary (loadgen/render), the
// aggregation of repeats (loadgen/stats.Aggregate, into Summary.Stats),
// compare (loadgen/compare) and the HTML report (loadgen/render).
type Figure struct {
	// Key names the figure as the JSON document does: a key of
	// Summary.Stats ("ttft_seconds.p99", "gpu.peak_memory_used_bytes")
	// and a column of the CSV summary.
	Key   string
	Title string
	// Unit is "seconds", "requests", "requests/s", "tokens", "tokens/s",
	// "ratio", "bytes", "watts", "joules", "joules/request", "tokens/J",
	// "images" or "USD".
	Unit string
	// Better is Lower, Higher or "" (neither: a count, a duration).
	Better string
	// Stat: an aggregate run holds the figure's mean and confidence
	// interval across the repeats in Summary.Stats.
	Stat bool
	// read is the value and whether the run has the side it comes from (a
	// GPU side, lengths asked for); measured says whether a value read is
	// a measurement (a latency of a run in which nothing completed is not).
	read     func(*Run) (float64, bool)
	measured func(*Run, float64) bool
}

// Which way a figure is better (Figure.Better).
const (
	Lower  = "lower"
	Higher = "higher"
)

// Read returns the figure's value in r, and false when r lacks the side
// it comes from (no GPU side, no lengths asked for): the CSV leaves such
// a cell empty, the aggregation leaves the run out.
func (f Figure) Read(r *Run) (float64, bool) { return f.read(r) }

// Measured returns the figure's value in r and whether it is a
// measurement that may be compared: the run has the side it comes from,
// and the value means something (a latency needs a completed request, a
// GPU figure a poll and a non-zero value, a cost a price and a completed
// request).
func (f Figure) Measured(r *Run) (float64, bool) {
	v, ok := f.read(r)
	if !ok || (f.measured != nil && !f.measured(r, v)) {
		return v, false
	}
	return v, true
}

func summaryFigure(key, title, unit, better string, get func(*Summary) float64) Figure {
	return Figure{Key: key, Title: title, Unit: unit, Better: better, Stat: true,
		read: func(r *Run) (float64, bool) { return get(&r.Summary), true }}
}

// percentiles are the figures of a distribution (Dist), by suffix.
var percentiles = []struct {
	suffix string
	get    func(*Dist) float64
}{
	{"mean", func(d *Dist) float64 { return d.Mean }},
	{"stddev", func(d *Dist) float64 { return d.Stddev }},
	{"p50", func(d *Dist) float64 { return d.P50 }},
	{"p90", func(d *Dist) float64 { return d.P90 }},
	{"p95", func(d *Dist) float64 { return d.P95 }},
	{"p99", func(d *Dist) float64 { return d.P99 }},
	{"max", func(d *Dist) float64 { return d.Max }},
}

// latencyFigures are the figures of a latency distribution: every one
// is measured only when a request completed.
func latencyFigures(key, title string, d func(*Summary) *Dist) []Figure {
	var out []Figure
	for _, p := range percentiles {
		f := summaryFigure(key+"."+p.suffix, title+" "+p.suffix, "seconds", Lower, func(s *Summary) float64 { return p.get(d(s)) })
		f.measured = func(r *Run, _ float64) bool { return d(&r.Summary).Count > 0 }
		out = append(out, f)
	}
	return out
}

// priced: a cost is measured when the run had a price and completed a
// request.
func priced(r *Run, _ float64) bool {
	return r.Settings.Cost.GPUHourlyUSD > 0 && r.Summary.RequestsCompleted > 0
}

// SummaryFigures are the figures of a run's Summary, in the CSV's order.
var SummaryFigures = func() []Figure {
	m := []Figure{
		summaryFigure("requests_completed", "Requests completed", "requests", "", func(s *Summary) float64 { return float64(s.RequestsCompleted) }),
		summaryFigure("requests_failed", "Requests failed", "requests", Lower, func(s *Summary) float64 { return float64(s.RequestsFailed) }),
		summaryFigure("request_throughput_per_second", "Throughput", "requests/s", Higher, func(s *Summary) float64 { return s.RequestThroughput }),
		summaryFigure("output_tokens_per_second", "Output tokens/s", "tokens/s", Higher, func(s *Summary) float64 { return s.OutputTokensPerSecond }),
		summaryFigure("total_tokens_per_second", "Total tokens/s", "tokens/s", Higher, func(s *Summary) float64 { return s.TotalTokensPerSecond }),
		summaryFigure("goodput_per_second", "Goodput at the SLO", "requests/s", Higher, func(s *Summary) float64 { return s.GoodputPerSecond }),
		summaryFigure("goodput_ratio", "Share of requests within the SLO", "ratio", Higher, func(s *Summary) float64 { return s.GoodputRatio }),
		summaryFigure("achieved_rate_per_second", "Achieved arrival rate", "requests/s", "", func(s *Summary) float64 { return s.AchievedRatePerSecond }),
		summaryFigure("duration_seconds", "Duration", "seconds", "", func(s *Summary) float64 { return s.DurationSeconds }),
	}
	for _, c := range []struct {
		key, title string
		get        func(*Cost) float64
	}{
		{"cost.per_request_usd", "Cost per sample", func(c *Cost) float64 { return c.PerRequestUSD }},
		{"cost.per_1k_requests_usd", "Cost per 1,000 samples", func(c *Cost) float64 { return c.Per1kRequestsUSD }},
		{"cost.per_million_input_tokens_usd", "Cost per million input tokens", func(c *Cost) float64 { return c.PerMillionInputTokensUSD }},
		{"cost.per_million_output_tokens_usd", "Cost per million output tokens", func(c *Cost) float64 { return c.PerMillionOutputTokensUSD }},
		{"cost.total_usd", "Cost of the run", func(c *Cost) float64 { return c.TotalUSD }},
	} {
		f := summaryFigure(c.key, c.title, "USD", Lower, func(s *Summary) float64 { return c.get(&s.Cost) })
		f.measured = priced
		m = append(m, f)
	}
	m = append(m, latencyFigures("ttft_seconds", "TTFT (any token)", func(s *Summary) *Dist { return &s.TTFT })...)
	m = append(m, latencyFigures("itl_seconds", "ITL", func(s *Summary) *Dist { return &s.ITL })...)
	m = append(m, latencyFigures("tpot_seconds", "TPOT", func(s *Summary) *Dist { return &s.TPOT })...)
	m = append(m, latencyFigures("e2e_seconds", "E2E latency", func(s *Summary) *Dist { return &s.E2E })...)
	m = append(m, latencyFigures("schedule_lag_seconds", "Schedule lag", func(s *Summary) *Dist { return &s.ScheduleLag })...)
	return m
}()

// GPU statistics keys of an aggregate run's Summary.Stats (across the
// repeats that read an exporter), next to the summary's own.
const (
	StatGPUPeakMemoryUsedBytes    = "gpu.peak_memory_used_bytes"
	StatGPUMeanUtilizationRatio   = "gpu.mean_utilization_ratio"
	StatGPUMeanPowerWatts         = "gpu.mean_power_watts"
	StatGPUEnergyJoules           = "gpu.energy_joules"
	StatGPUOutputTokensPerJoule   = "gpu.output_tokens_per_joule"
	StatGPUEnergyPerRequestJoules = "gpu.energy_per_request_joules"
)

// GPUFigures are the figures of a run's GPU side (RunGPU), in the CSV's
// order: read when the run has one, measured when the exporter was
// polled and the value is not zero (tokens/J is 0 when undefined).
var GPUFigures = func() []Figure {
	var out []Figure
	for _, g := range []struct {
		key, title, unit, better string
		stat                     bool
		get                      func(*RunGPU) float64
	}{
		{StatGPUPeakMemoryUsedBytes, "Peak VRAM", "bytes", Lower, true, func(g *RunGPU) float64 { return g.PeakMemoryUsedBytes }},
		{StatGPUMeanUtilizationRatio, "Mean GPU utilisation", "ratio", "", true, func(g *RunGPU) float64 { return g.MeanUtilizationRatio }},
		{StatGPUMeanPowerWatts, "Mean GPU power", "watts", Lower, true, func(g *RunGPU) float64 { return g.MeanPowerWatts }},
		{StatGPUEnergyJoules, "GPU energy", "joules", Lower, true, func(g *RunGPU) float64 { return g.EnergyJoules }},
		{StatGPUOutputTokensPerJoule, "Output tokens/J", "tokens/J", Higher, true, func(g *RunGPU) float64 { return g.OutputTokensPerJoule }},
		{StatGPUEnergyPerRequestJoules, "GPU energy per request", "joules/request", Lower, true, func(g *RunGPU) float64 { return g.EnergyPerRequestJoules }},
		{"gpu.duration_seconds", "GPU polling duration", "seconds", "", false, func(g *RunGPU) float64 { return g.DurationSeconds }},
		{"gpu.energy_extrapolated_ratio", "Share of the energy extrapolated", "ratio", Lower, false, func(g *RunGPU) float64 { return g.EnergyExtrapolatedRatio }},
	} {
		out = append(out, Figure{Key: g.key, Title: g.title, Unit: g.unit, Better: g.better, Stat: g.stat,
			read: func(r *Run) (float64, bool) {
				if r.GPU == nil {
					return 0, false
				}
				return g.get(r.GPU), true
			},
			measured: func(r *Run, v float64) bool { return r.GPU.Samples > 0 && v > 0 },
		})
	}
	return out
}()

// TokenFigures are the prompt and output lengths of a run, the servers'
// counts and the lengths asked for (mean, p50, p99 tokens per request),
// in the CSV's order: read when the run has that distribution and it
// counted a request.
var TokenFigures = func() []Figure {
	var out []Figure
	for _, d := range []struct {
		key, title string
		get        func(*Summary) *Dist
	}{
		{"input_tokens", "Prompt tokens", func(s *Summary) *Dist { return &s.InputTokens }},
		{"input_tokens_requested", "Prompt tokens asked for", func(s *Summary) *Dist { return s.InputTokensRequested }},
		{"output_tokens", "Output tokens", func(s *Summary) *Dist { return &s.OutputTokens }},
		{"output_tokens_requested", "Output tokens asked for", func(s *Summary) *Dist { return s.OutputTokensRequested }},
	} {
		for _, p := range percentiles {
			if p.suffix != "mean" && p.suffix != "p50" && p.suffix != "p99" {
				continue
			}
			out = append(out, Figure{Key: d.key + "." + p.suffix, Title: d.title + " " + p.suffix, Unit: "tokens",
				read: func(r *Run) (float64, bool) {
					x := d.get(&r.Summary)
					if x == nil || x.Count == 0 {
						return 0, false
					}
					return p.get(x), true
				}})
		}
	}
	return out
}()

// ReasoningFigures are the figures of a run's reasoning side
// (Summary.Reasoning), in the CSV's order: the answer's latencies (every
// percentile, aggregated across repeats like the summary's) and the
// reasoning and answer tokens per request (mean, p50, p99). Read when the
// run has a reasoning side, measured when the distribution has values.
var ReasoningFigures = func() []Figure {
	var out []Figure
	side := func(get func(*ReasoningSummary) *Dist) func(*Run) (*Dist, bool) {
		return func(r *Run) (*Dist, bool) {
			if r.Summary.Reasoning == nil {
				return nil, false
			}
			return get(r.Summary.Reasoning), true
		}
	}
	for _, l := range []struct {
		key, title string
		get        func(*ReasoningSummary) *Dist
	}{
		{"reasoning.answer_ttft_seconds", "TTFT (answer)", func(s *ReasoningSummary) *Dist { return &s.AnswerTTFT }},
		{"reasoning.answer_itl_seconds", "ITL (answer)", func(s *ReasoningSummary) *Dist { return &s.AnswerITL }},
		{"reasoning.answer_tpot_seconds", "TPOT (answer)", func(s *ReasoningSummary) *Dist { return &s.AnswerTPOT }},
	} {
		d := side(l.get)
		for _, p := range percentiles {
			out = append(out, Figure{Key: l.key + "." + p.suffix, Title: l.title + " " + p.suffix, Unit: "seconds", Better: Lower, Stat: true,
				read: func(r *Run) (float64, bool) {
					x, ok := d(r)
					if !ok {
						return 0, false
					}
					return p.get(x), true
				},
				measured: func(r *Run, _ float64) bool { x, _ := d(r); return x.Count > 0 }})
		}
	}
	for _, t := range []struct {
		key, title string
		get        func(*ReasoningSummary) *Dist
	}{
		{"reasoning.reasoning_tokens", "Reasoning tokens", func(s *ReasoningSummary) *Dist { return &s.ReasoningTokens }},
		{"reasoning.answer_tokens", "Answer tokens", func(s *ReasoningSummary) *Dist { return &s.AnswerTokens }},
	} {
		d := side(t.get)
		for _, p := range percentiles {
			if p.suffix != "mean" && p.suffix != "p50" && p.suffix != "p99" {
				continue
			}
			out = append(out, Figure{Key: t.key + "." + p.suffix, Title: t.title + " " + p.suffix, Unit: "tokens", Stat: true,
				read: func(r *Run) (float64, bool) {
					x, ok := d(r)
					if !ok {
						return 0, false
					}
					return p.get(x), true
				},
				measured: func(r *Run, _ float64) bool { x, _ := d(r); return x.Count > 0 }})
		}
	}
	return out
}()

// FigureByKey returns the figure of a key, from SummaryFigures,
// GPUFigures, TokenFigures, PromptFigures or ReasoningFigures.
func FigureByKey(key string) (Figure, bool) {
	for _, fs := range [][]Figure{SummaryFigures, GPUFigures, TokenFigures, PromptFigures, ReasoningFigures} {
		for _, f := range fs {
			if f.Key == key {
				return f, true
			}
		}
	}
	return Figure{}, false
}

// MustFigure is FigureByKey for a key written in the code: it panics on
// a key that is no figure, which any test of the caller catches.
func MustFigure(key string) Figure {
	f, ok := FigureByKey(key)
	if !ok {
		panic("report: no figure " + key)
	}
	return f
}
