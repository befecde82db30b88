package stats

import (
	"math"
	"reflect"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func rep(i int, tps, ttftP99, ttftMax float64, errs map[string]int) report.Run {
	return report.Run{Name: "rate=5 repeat=" + string(rune('0'+i)), Level: 5, Repeat: i,
		Settings: report.Settings{Mode: "open", Rate: 5},
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
	if _, ok := s.Stats["cost.per_1k_requests_usd"]; !ok || len(s.Stats) != len(report.SummaryFigures) {
		t.Errorf("stats has %d metrics, want %d", len(s.Stats), len(report.SummaryFigures))
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
