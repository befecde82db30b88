// Package cost turns a GPU's hourly price into the cost of a run, per
// request and per token (Compute), and sums an evaluation campaign — its
// reports' wall time, setup, retries, storage and egress, rounded as the
// provider bills — into its cost per completed sample (Sum). See
// docs/cost.md.
package cost

import (
	"github.com/gpulens/gpulens/loadgen/report"
)

// Prices are the billing inputs: the prices a report records with its
// runs (report.CostSettings, one type).
type Prices = report.CostSettings

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
