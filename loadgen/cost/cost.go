// Package cost turns a GPU's hourly price into the cost of a run, per
// request and per token (Compute), and sums an evaluation campaign — its
// reports' wall time, setup, retries, storage and egress, rounded as the
// provider bills — into its cost per completed sample (Sum). See
// docs/cost.md.
package cost

import (
	"math"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Prices are the billing inputs.
type Prices struct {
	GPUHourlyUSD float64
	GPUs         int
	// OverheadHours are billed hours that produced no results: setup,
	// retries, idle time.
	OverheadHours float64
}

// Validate checks the prices.
func (p Prices) Validate() error {
	if p.GPUHourlyUSD < 0 || math.IsNaN(p.GPUHourlyUSD) || math.IsInf(p.GPUHourlyUSD, 0) {
		return option.Errorf("%s must be a non-negative number, got %v", option.Name("GPUHourlyUSD"), p.GPUHourlyUSD)
	}
	if p.GPUs < 1 {
		return option.Errorf("%s must be at least 1, got %d", option.Name("GPUs"), p.GPUs)
	}
	if p.OverheadHours < 0 || math.IsNaN(p.OverheadHours) {
		return option.Errorf("%s must not be negative, got %v", option.Name("OverheadHours"), p.OverheadHours)
	}
	return nil
}

// Total is the billed cost of runHours of measurement plus the overhead.
func (p Prices) Total(runHours float64) float64 {
	return p.GPUHourlyUSD * float64(p.GPUs) * (runHours + p.OverheadHours)
}

// Compute returns the cost of a run that lasted runSeconds and completed
// requests successful requests with the given token totals. Each per-unit
// figure charges the whole bill to that unit; a unit with zero count gets 0.
func Compute(p Prices, runSeconds float64, requests int, inputTokens, outputTokens int64) report.Cost {
	hours := runSeconds/3600 + p.OverheadHours
	total := p.GPUHourlyUSD * float64(p.GPUs) * hours
	c := report.Cost{TotalUSD: total, BilledHours: hours}
	if requests > 0 {
		c.PerRequestUSD = total / float64(requests)
		c.Per1kRequestsUSD = 1000 * c.PerRequestUSD
	}
	if inputTokens > 0 {
		c.PerMillionInputTokensUSD = total / float64(inputTokens) * 1e6
	}
	if outputTokens > 0 {
		c.PerMillionOutputTokensUSD = total / float64(outputTokens) * 1e6
	}
	return c
}
