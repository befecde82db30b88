package report

// RunGPU is what the gpulens exporter reported while one level and repeat
// ran (Run.GPU): the GPUs serving the model, polled every few seconds.
// Energy comes from the GPUs' energy counters (the increase over the run),
// falling back to mean power × duration when a counter is missing
// (EnergyFromPower then says so). Like Run.ServerMetrics and
// Metadata.Manifest it is an optional pointer, so that reports written
// before it existed still read back (docs/loadgen.md, "Evaluation
// campaigns").
type RunGPU struct {
	// GPUs holds one entry per GPU serving, in exporter order.
	GPUs []RunGPUDevice `json:"gpus"`
	// PeakMemoryUsedBytes is the peak, over the polls, of the memory used
	// summed over the GPUs serving.
	PeakMemoryUsedBytes float64 `json:"peak_memory_used_bytes"`
	// MeanUtilizationRatio is the mean over GPUs and polls (0–1).
	MeanUtilizationRatio float64 `json:"mean_utilization_ratio"`
	// MeanPowerWatts is the mean of the summed power draw over the polls.
	MeanPowerWatts float64 `json:"mean_power_watts"`
	// EnergyJoules is the energy the GPUs used during the run, summed.
	EnergyJoules    float64 `json:"energy_joules"`
	EnergyFromPower bool    `json:"energy_from_power,omitempty"`
	// OutputTokensPerJoule is Summary.OutputTokensTotal / EnergyJoules and
	// EnergyPerRequestJoules EnergyJoules / Summary.RequestsCompleted; zero
	// when undefined.
	OutputTokensPerJoule   float64 `json:"output_tokens_per_joule"`
	EnergyPerRequestJoules float64 `json:"energy_per_request_joules"`
	Samples                int     `json:"samples"`
	// Error is set when the exporter could not be read during the run.
	Error string `json:"error,omitempty"`
	// DurationSeconds is the span the energy covers: from the scrape
	// before the run's first request to the one after its end (absent in
	// reports before it was recorded).
	DurationSeconds float64 `json:"duration_seconds,omitempty"`
	// EnergyExtrapolatedRatio is the share of EnergyJoules estimated from
	// the power draw beyond the energy counter's readings (the exporter
	// reads it once per sampler interval) rather than interpolated
	// between two of them: near 1 for a run shorter than the interval.
	EnergyExtrapolatedRatio float64 `json:"energy_extrapolated_ratio,omitempty"`
	// Warning says when the run is too short for a trustworthy energy
	// figure (EnergyExtrapolatedRatio above one half).
	Warning string `json:"warning,omitempty"`
}

// RunGPUDevice is one GPU's share of RunGPU.
type RunGPUDevice struct {
	GPU                  string  `json:"gpu"`
	UUID                 string  `json:"uuid"`
	Name                 string  `json:"name,omitempty"`
	PeakMemoryUsedBytes  float64 `json:"peak_memory_used_bytes"`
	MeanUtilizationRatio float64 `json:"mean_utilization_ratio"`
	MeanPowerWatts       float64 `json:"mean_power_watts"`
	EnergyJoules         float64 `json:"energy_joules"`
}

// SetWork derives the per-work figures from what the run did:
// OutputTokensPerJoule = outputTokens / EnergyJoules and
// EnergyPerRequestJoules = EnergyJoules / completed, each zero when its
// divisor is.
func (g *RunGPU) SetWork(outputTokens int64, completed int) {
	g.OutputTokensPerJoule, g.EnergyPerRequestJoules = 0, 0
	if g.EnergyJoules > 0 {
		g.OutputTokensPerJoule = float64(outputTokens) / g.EnergyJoules
	}
	if completed > 0 {
		g.EnergyPerRequestJoules = g.EnergyJoules / float64(completed)
	}
}
