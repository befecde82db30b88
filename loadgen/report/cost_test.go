package report

import (
	"math"
	"testing"
)

func TestRunCostSeedsExample(t *testing.T) {
	// $0.60/h, 12,000 samples in 4 h → $2.40, $0.20 per 1,000; two more
	// billed hours for setup and retries → $3.60, $0.30 per 1,000.
	for _, tc := range []struct {
		name                  string
		overhead              float64
		total, per1k, perMOut float64
	}{
		{"measured only", 0, 2.40, 0.20, 2.40 / 6e6 * 1e6},
		{"with setup and retries", 2, 3.60, 0.30, 3.60 / 6e6 * 1e6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := CostSettings{GPUHourlyUSD: 0.60, GPUs: 1, OverheadHours: tc.overhead}.RunCost(4*3600, 12000, 12000*100, 12000*500)
			near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
			if !near(c.TotalUSD, tc.total) || !near(c.Per1kRequestsUSD, tc.per1k) || !near(c.PerRequestUSD, tc.per1k/1000) {
				t.Fatalf("cost = %+v, want total %v per 1k %v", c, tc.total, tc.per1k)
			}
			if !near(c.PerMillionOutputTokensUSD, tc.perMOut) || !near(c.PerMillionInputTokensUSD, tc.total/1.2e6*1e6) {
				t.Fatalf("per-token cost = %+v", c)
			}
			if !near(c.BilledHours, 4+tc.overhead) {
				t.Fatalf("billed hours = %v", c.BilledHours)
			}
		})
	}
}

func TestRunCostZeroCounts(t *testing.T) {
	c := CostSettings{GPUHourlyUSD: 2, GPUs: 8}.RunCost(1800, 0, 0, 0)
	if c.TotalUSD != 8 || c.PerRequestUSD != 0 || c.PerMillionOutputTokensUSD != 0 {
		t.Fatalf("cost = %+v", c)
	}
}

func TestCostSettingsValidate(t *testing.T) {
	for _, p := range []CostSettings{{GPUHourlyUSD: -1, GPUs: 1}, {GPUHourlyUSD: 1, GPUs: 0}, {GPUHourlyUSD: 1, GPUs: 1, OverheadHours: -2}, {GPUHourlyUSD: math.NaN(), GPUs: 1},
		{GPUHourlyUSD: 5000, GPUs: 1}} { // above pricing.MaxPrice, as the exporter's flag and price file reject
		if err := p.Validate(); err == nil {
			t.Errorf("%+v accepted", p)
		}
	}
	for _, p := range []CostSettings{{GPUHourlyUSD: 0.6, GPUs: 1}, {GPUHourlyUSD: 1000, GPUs: 8}} {
		if err := p.Validate(); err != nil {
			t.Error(err)
		}
	}
}
