package report

// Scalar is one number of a summary, named as in the JSON document
// ("ttft_seconds.p99", "output_tokens_per_second"): a key of
// Summary.Stats and a column of the CSV summary.
type Scalar struct {
	Name string
	Get  func(*Summary) float64
}

// distScalars are the scalars of one distribution.
func distScalars(prefix string, d func(*Summary) *Dist) []Scalar {
	return []Scalar{
		{prefix + ".mean", func(s *Summary) float64 { return d(s).Mean }},
		{prefix + ".stddev", func(s *Summary) float64 { return d(s).Stddev }},
		{prefix + ".p50", func(s *Summary) float64 { return d(s).P50 }},
		{prefix + ".p90", func(s *Summary) float64 { return d(s).P90 }},
		{prefix + ".p95", func(s *Summary) float64 { return d(s).P95 }},
		{prefix + ".p99", func(s *Summary) float64 { return d(s).P99 }},
		{prefix + ".max", func(s *Summary) float64 { return d(s).Max }},
	}
}

// Scalars lists, in a stable order, every scalar aggregated across
// repeats (Summary.Stats) and written to the CSV summary.
var Scalars = func() []Scalar {
	m := []Scalar{
		{"requests_completed", func(s *Summary) float64 { return float64(s.RequestsCompleted) }},
		{"requests_failed", func(s *Summary) float64 { return float64(s.RequestsFailed) }},
		{"request_throughput_per_second", func(s *Summary) float64 { return s.RequestThroughput }},
		{"output_tokens_per_second", func(s *Summary) float64 { return s.OutputTokensPerSecond }},
		{"total_tokens_per_second", func(s *Summary) float64 { return s.TotalTokensPerSecond }},
		{"goodput_per_second", func(s *Summary) float64 { return s.GoodputPerSecond }},
		{"goodput_ratio", func(s *Summary) float64 { return s.GoodputRatio }},
		{"achieved_rate_per_second", func(s *Summary) float64 { return s.AchievedRatePerSecond }},
		{"duration_seconds", func(s *Summary) float64 { return s.DurationSeconds }},
		{"cost.per_request_usd", func(s *Summary) float64 { return s.Cost.PerRequestUSD }},
		{"cost.per_1k_requests_usd", func(s *Summary) float64 { return s.Cost.Per1kRequestsUSD }},
		{"cost.per_million_input_tokens_usd", func(s *Summary) float64 { return s.Cost.PerMillionInputTokensUSD }},
		{"cost.per_million_output_tokens_usd", func(s *Summary) float64 { return s.Cost.PerMillionOutputTokensUSD }},
		{"cost.total_usd", func(s *Summary) float64 { return s.Cost.TotalUSD }},
	}
	m = append(m, distScalars("ttft_seconds", func(s *Summary) *Dist { return &s.TTFT })...)
	m = append(m, distScalars("itl_seconds", func(s *Summary) *Dist { return &s.ITL })...)
	m = append(m, distScalars("tpot_seconds", func(s *Summary) *Dist { return &s.TPOT })...)
	m = append(m, distScalars("e2e_seconds", func(s *Summary) *Dist { return &s.E2E })...)
	m = append(m, distScalars("schedule_lag_seconds", func(s *Summary) *Dist { return &s.ScheduleLag })...)
	return m
}()
