package report

// RunCost returns the cost of a run priced at p that lasted runSeconds and
// completed requests successful requests with the given token totals: the
// GPU price × GPUs × (the run's hours + OverheadHours). Each per-unit
// figure charges the whole bill to that unit; a unit with zero count gets
// 0. A campaign's bill, across reports, is Sum's (bill.go).
func (p CostSettings) RunCost(runSeconds float64, requests int, inputTokens, outputTokens int64) Cost {
	hours := runSeconds/3600 + p.OverheadHours
	total := p.GPUHourlyUSD * float64(p.GPUs) * hours
	c := Cost{TotalUSD: total, BilledHours: hours}
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
