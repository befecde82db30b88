package stats

import (
	"math"
	"reflect"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func rep(i int, tps, ttftP99, ttftMax float64, errs map[string]int) report.Run {
	return report.Run{Name: "rate=5 repeat=" + string(rune('0'+i)), Level: 5, Repeat: i,
		Settings: report.Settings{Mode: "open", Rate: 5, Cost: report.CostSettings{GPUHourlyUSD: 2}},
		Summary: report.Summary{
			RequestsCompleted: 10 * i, RequestsFailed: i - 1, Errors: errs, OutputTokensTotal: int64(100 * i),
			OutputTokensPerSecond: tps, TTFT: report.Dist{Count: 10 * i, P50: ttftP99 / 2, P99: ttftP99, Max: ttftMax},
			Cost: report.Cost{TotalUSD: 0.01 * float64(i)}, TargetRatePerSecond: 5, MaxInFlight: 3 * i,
		}}
}

func TestAggregate(t *testing.T) {
	reps := []report.Run{
		rep(1, 10, 0.1, 0.15, map[string]int{}),
		rep(2, 12, 0.2, 0.40, map[string]int{report.ErrTimeout: 1}),
		rep(3, 14, 0.3, 0.35, map[string]int{report.ErrTimeout: 1, report.ErrHTTP5xx: 1}),
	}
	a := Aggregate(reps)
	if a.Name != "rate=5 (mean of 3)" || !a.Aggregate || a.Level != 5 || a.Repeat != 0 || a.Settings.Rate != 5 {
		t.Errorf("run = %q aggregate %v level %v repeat %d", a.Name, a.Aggregate, a.Level, a.Repeat)
	}
	s := a.Summary
	// Counts are summed, maxima kept.
	if s.RequestsCompleted != 60 || s.RequestsFailed != 3 || s.OutputTokensTotal != 600 || s.MaxInFlight != 9 ||
		s.Errors[report.ErrTimeout] != 2 || s.Errors[report.ErrHTTP5xx] != 1 || s.TTFT.Count != 60 || s.TTFT.Max != 0.40 {
		t.Errorf("sums: %+v", s)
	}
	// Means of scalars and percentiles.
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %.15g, want %.15g", name, got, want)
		}
	}
	near("output tok/s", s.OutputTokensPerSecond, 12)
	near("TTFT p99", s.TTFT.P99, 0.2)
	near("TTFT p50", s.TTFT.P50, 0.1)
	near("cost total", s.Cost.TotalUSD, 0.02)
	// Student t, 2 degrees of freedom: t = 4.303; sample stddev of 10, 12,
	// 14 is 2; half width 4.303 × 2 / √3 = 4.96867641664592.
	st := s.Stats["output_tokens_per_second"]
	if st.N != 3 {
		t.Fatalf("stat = %+v", st)
	}
	near("stddev", st.Stddev, 2)
	near("mean", st.Mean, 12)
	near("ci low", st.CI95Low, 7.03132358335408)
	near("ci high", st.CI95High, 16.96867641664592)
	// TTFT p99 0.1, 0.2, 0.3: stddev 0.1, half width 4.303 × 0.1 / √3.
	st = s.Stats["ttft_seconds.p99"]
	near("ttft p99 ci high", st.CI95High, 0.2+0.248433820832296)
	// A figure has an interval when some repeat measured it: the cost (the
	// runs have a price), TTFT; not ITL, which no repeat has.
	for key, want := range map[string]bool{"cost.per_1k_requests_usd": true, "ttft_seconds.p99": true,
		"output_tokens_per_second": true, "itl_seconds.p99": false, "e2e_seconds.p50": false} {
		if _, ok := s.Stats[key]; ok != want {
			t.Errorf("Stats[%q] present %v, want %v", key, ok, want)
		}
	}
	for _, f := range report.SummaryFigures {
		measured := false
		for i := range reps {
			if _, ok := f.Measured(&reps[i]); ok {
				measured = true
			}
		}
		if _, ok := s.Stats[f.Key]; ok != measured {
			t.Errorf("Stats[%q] present %v, measured in some repeat %v", f.Key, ok, measured)
		}
	}

	// Two repeats (10, 12): t = 12.706, stddev √2, half width 12.706 × √2 / √2.
	st = Aggregate(reps[:2]).Summary.Stats["output_tokens_per_second"]
	near("n=2 ci high", st.CI95High, 11+12.706)
}

func TestAggregateGPU(t *testing.T) {
	dev := func(gpu string, peak, util, power, energy float64) report.RunGPUDevice {
		return report.RunGPUDevice{GPU: gpu, UUID: "GPU-" + gpu, PeakMemoryUsedBytes: peak, MeanUtilizationRatio: util, MeanPowerWatts: power, EnergyJoules: energy}
	}
	reps := []report.Run{
		{Name: "c=1 repeat=1", GPU: &report.RunGPU{GPUs: []report.RunGPUDevice{dev("0", 10, 0.4, 200, 600), dev("1", 5, 0.2, 100, 300)},
			PeakMemoryUsedBytes: 14, MeanUtilizationRatio: 0.25, MeanPowerWatts: 300, EnergyJoules: 900, OutputTokensPerJoule: 2, EnergyPerRequestJoules: 30, Samples: 5,
			DurationSeconds: 1.5, EnergyExtrapolatedRatio: 0.6, Warning: "too short"}},
		{Name: "c=1 repeat=2"}, // no exporter reading: left out
		{Name: "c=1 repeat=3", GPU: &report.RunGPU{GPUs: []report.RunGPUDevice{dev("0", 12, 0.6, 220, 700)},
			PeakMemoryUsedBytes: 12, MeanUtilizationRatio: 0.75, MeanPowerWatts: 220, EnergyJoules: 700, EnergyFromPower: true,
			OutputTokensPerJoule: 1, EnergyPerRequestJoules: 10, Samples: 3, Error: "scraping: HTTP 500", DurationSeconds: 2.5, EnergyExtrapolatedRatio: 0.1}},
	}
	got := AggregateGPU(reps)
	want := &report.RunGPU{
		// Means of the repeats (a GPU: of the repeats that have it), the
		// samples a total.
		GPUs:                []report.RunGPUDevice{dev("0", 11, 0.5, 210, 650), dev("1", 5, 0.2, 100, 300)},
		PeakMemoryUsedBytes: 13, MeanUtilizationRatio: 0.5, MeanPowerWatts: 260, EnergyJoules: 800, EnergyFromPower: true,
		OutputTokensPerJoule: 1.5, EnergyPerRequestJoules: 20, Samples: 8, Error: "c=1 repeat=3: scraping: HTTP 500",
		DurationSeconds: 2, EnergyExtrapolatedRatio: 0.35, Warning: "c=1 repeat=1: too short",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", *got, *want)
	}
	if AggregateGPU([]report.Run{{Name: "a"}, {Name: "b"}}) != nil {
		t.Error("an aggregate GPU side without any repeat's")
	}
}

// TestAggregateTurns: an aggregate of multi-turn repeats carries their turn
// split, each distribution the mean over the repeats in which it has values
// (counts summed, the largest maximum), the conversations summed.
func TestAggregateTurns(t *testing.T) {
	d := func(count int, mean, p50, p99, maxv float64) report.Dist {
		return report.Dist{Count: count, Mean: mean, Stddev: mean / 2, P50: p50, P90: p50 + 0.8*(p99-p50), P95: p50 + 0.9*(p99-p50), P99: p99, Max: maxv}
	}
	// Repeat 1: 2 conversations of 3 turns, every turn answered.
	one := &report.TurnSummary{Conversations: 2,
		FirstTurnTTFT: d(2, 0.2, 0.2, 0.298, 0.3), LaterTurnsTTFT: d(4, 0.03, 0.03, 0.04, 0.04),
		FirstTurnInputTokens: d(2, 500, 500, 500, 500), LaterTurnsInputTokens: d(4, 1250, 1250, 1500, 1500),
		ByTurn: []report.Dist{d(2, 0.2, 0.2, 0.298, 0.3), d(2, 0.02, 0.02, 0.02, 0.02), d(2, 0.04, 0.04, 0.04, 0.04)}}
	// Repeat 2: 3 conversations whose second turns all failed: no later
	// turn has a TTFT or a measured prompt, and ByTurn stops at turn 1.
	two := &report.TurnSummary{Conversations: 3,
		FirstTurnTTFT: d(3, 0.4, 0.4, 0.5, 0.6), FirstTurnInputTokens: d(3, 700, 700, 880, 900),
		ByTurn: []report.Dist{d(3, 0.4, 0.4, 0.5, 0.6)}}
	run := func(rep int, ts *report.TurnSummary) report.Run {
		return report.Run{Name: "concurrency=2 repeat=" + string(rune('0'+rep)), Level: 2, Repeat: rep, Turns: ts}
	}
	for _, tc := range []struct {
		name string
		reps []report.Run
		want *report.TurnSummary
	}{
		{"two multi-turn repeats", []report.Run{run(1, one), run(2, two)}, &report.TurnSummary{Conversations: 5,
			// First turns: means of (0.2, 0.4), (0.1, 0.2) stddev, (0.2, 0.4) p50,
			// (0.2784, 0.48) p90, (0.2882, 0.49) p95, (0.298, 0.5) p99; max 0.6.
			FirstTurnTTFT: report.Dist{Count: 5, Mean: 0.3, Stddev: 0.15, P50: 0.3, P90: 0.3792, P95: 0.3891, P99: 0.399, Max: 0.6},
			// Later turns: repeat 1's alone (repeat 2 has none, not zeros).
			LaterTurnsTTFT:        one.LaterTurnsTTFT,
			FirstTurnInputTokens:  report.Dist{Count: 5, Mean: 600, Stddev: 300, P50: 600, P90: 672, P95: 681, P99: 690, Max: 900},
			LaterTurnsInputTokens: one.LaterTurnsInputTokens,
			ByTurn: []report.Dist{{Count: 5, Mean: 0.3, Stddev: 0.15, P50: 0.3, P90: 0.3792, P95: 0.3891, P99: 0.399, Max: 0.6},
				one.ByTurn[1], one.ByTurn[2]}}},
		{"a single-turn repeat is left out", []report.Run{run(1, nil), run(2, one)}, one},
		{"no multi-turn repeat", []report.Run{run(1, nil), run(2, nil)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Aggregate(tc.reps).Turns
			if (got == nil) != (tc.want == nil) {
				t.Fatalf("turns %+v, want %+v", got, tc.want)
			}
			if got == nil {
				return
			}
			if got.Conversations != tc.want.Conversations || len(got.ByTurn) != len(tc.want.ByTurn) {
				t.Fatalf("%d conversations, %d turns; want %d, %d", got.Conversations, len(got.ByTurn), tc.want.Conversations, len(tc.want.ByTurn))
			}
			check := func(name string, g, w report.Dist) {
				t.Helper()
				gs := []float64{float64(g.Count), g.Mean, g.Stddev, g.P50, g.P90, g.P95, g.P99, g.Max}
				ws := []float64{float64(w.Count), w.Mean, w.Stddev, w.P50, w.P90, w.P95, w.P99, w.Max}
				for i := range gs {
					if math.Abs(gs[i]-ws[i]) > 1e-9 {
						t.Errorf("%s = %+v, want %+v", name, g, w)
						return
					}
				}
			}
			check("first turn TTFT", got.FirstTurnTTFT, tc.want.FirstTurnTTFT)
			check("later turns TTFT", got.LaterTurnsTTFT, tc.want.LaterTurnsTTFT)
			check("first turn input tokens", got.FirstTurnInputTokens, tc.want.FirstTurnInputTokens)
			check("later turns input tokens", got.LaterTurnsInputTokens, tc.want.LaterTurnsInputTokens)
			for i := range got.ByTurn {
				check("turn "+string(rune('1'+i))+" TTFT", got.ByTurn[i], tc.want.ByTurn[i])
			}
		})
	}
}

// TestAggregateLeavesOutEmptyDistributions: a repeat whose requests all
// failed has no TTFT; the aggregate's TTFT is the mean of the repeats that
// have one (as its confidence interval in Stats already was), not pulled
// towards zero.
func TestAggregateLeavesOutEmptyDistributions(t *testing.T) {
	failed := rep(2, 0, 0, 0, map[string]int{report.ErrTimeout: 20})
	failed.Summary.RequestsCompleted, failed.Summary.TTFT = 0, report.Dist{}
	reps := []report.Run{rep(1, 10, 0.1, 0.15, map[string]int{}), failed, rep(3, 14, 0.3, 0.35, map[string]int{})}
	s := Aggregate(reps).Summary
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"TTFT p99", s.TTFT.P99, 0.2},
		{"TTFT p50", s.TTFT.P50, 0.1},
		{"TTFT max", s.TTFT.Max, 0.35},
		{"TTFT count", float64(s.TTFT.Count), 40},
		{"Stats ttft p99 mean", s.Stats["ttft_seconds.p99"].Mean, 0.2},
		{"ITL count (no repeat has one)", float64(s.ITL.Count), 0},
		{"ITL p99 (no repeat has one)", s.ITL.P99, 0},
	} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s = %.15g, want %.15g", c.name, c.got, c.want)
		}
	}
}
