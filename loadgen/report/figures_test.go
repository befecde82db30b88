package report

import "testing"

func TestFiguresUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, fs := range [][]Figure{SummaryFigures, GPUFigures, TokenFigures} {
		for _, f := range fs {
			if seen[f.Key] || f.Title == "" || f.Unit == "" {
				t.Errorf("figure %q: repeated, or without a title or unit (%q, %q)", f.Key, f.Title, f.Unit)
			}
			seen[f.Key] = true
			if got, ok := FigureByKey(f.Key); !ok || got.Title != f.Title {
				t.Errorf("FigureByKey(%q) = %q, %v", f.Key, got.Title, ok)
			}
		}
	}
	if len(SummaryFigures) != 14+5*7 || len(GPUFigures) != 8 || len(TokenFigures) != 4*3 {
		t.Errorf("%d summary, %d GPU, %d token figures", len(SummaryFigures), len(GPUFigures), len(TokenFigures))
	}
	if _, ok := FigureByKey("ttft_seconds.p42"); ok {
		t.Error("FigureByKey found a figure that is not one")
	}
}

func TestFigureReadMeasured(t *testing.T) {
	priced := Settings{Cost: CostSettings{GPUHourlyUSD: 2}}
	done := Summary{RequestsCompleted: 3, RequestThroughput: 1.5, TTFT: Dist{Count: 3, P99: 0.2},
		Cost: Cost{Per1kRequestsUSD: 0.4}, OutputTokens: Dist{Count: 3, P50: 120}}
	none := Summary{RequestsFailed: 2}
	gpu := &RunGPU{Samples: 4, PeakMemoryUsedBytes: 8 << 30, OutputTokensPerJoule: 0}
	for _, tc := range []struct {
		name          string
		key           string
		run           Run
		v             float64
		read, measure bool
	}{
		{"throughput", "request_throughput_per_second", Run{Summary: done}, 1.5, true, true},
		{"latency", "ttft_seconds.p99", Run{Summary: done}, 0.2, true, true},
		{"latency of nothing", "ttft_seconds.p99", Run{Summary: none}, 0, true, false},
		{"cost", "cost.per_1k_requests_usd", Run{Summary: done, Settings: priced}, 0.4, true, true},
		{"cost unpriced", "cost.per_1k_requests_usd", Run{Summary: done}, 0.4, true, false},
		{"cost of nothing", "cost.per_1k_requests_usd", Run{Summary: none, Settings: priced}, 0, true, false},
		{"no GPU side", StatGPUPeakMemoryUsedBytes, Run{Summary: done}, 0, false, false},
		{"GPU", StatGPUPeakMemoryUsedBytes, Run{Summary: done, GPU: gpu}, 8 << 30, true, true},
		{"GPU zero", StatGPUOutputTokensPerJoule, Run{Summary: done, GPU: gpu}, 0, true, false},
		{"GPU unpolled", StatGPUPeakMemoryUsedBytes, Run{Summary: done, GPU: &RunGPU{PeakMemoryUsedBytes: 1}}, 1, true, false},
		{"tokens", "output_tokens.p50", Run{Summary: done}, 120, true, true},
		{"tokens not asked", "output_tokens_requested.p50", Run{Summary: done}, 0, false, false},
	} {
		f := MustFigure(tc.key)
		v, read := f.Read(&tc.run)
		mv, measured := f.Measured(&tc.run)
		if v != tc.v || mv != tc.v || read != tc.read || measured != tc.measure {
			t.Errorf("%s: Read = %v, %v; Measured = %v, %v; want %v, %v, %v", tc.name, v, read, mv, measured, tc.v, tc.read, tc.measure)
		}
	}
}

func TestRunNames(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{RunName(ModeClosed, 8, 0), "concurrency=8"},
		{RunName(ModeClosed, 8, 2), "concurrency=8 repeat=2"},
		{RunName(ModeOpen, 2.5, 0), "rate=2.5"},
		{RunName(ModeOpen, 2.5, 1), "rate=2.5 repeat=1"},
		{AggregateName(RunName(ModeClosed, 8, 1), 3), "concurrency=8 (mean of 3)"},
		{AggregateName("shard-a", 2), "shard-a (mean of 2)"},
		{AggregateName(" repeat=1", 2), " repeat=1 (mean of 2)"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
