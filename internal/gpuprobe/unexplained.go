package gpuprobe

// UnexplainedStolen is the share of the stolen-time window taken by contexts
// NVML does not show, given the raw stolen ratio and the SM utilisation
// (0-1) over the probe of each busy process NVML does show (the prober's
// own process and MPS clients left out). Under round-robin time-slicing the
// probe's share of its window is p = 1 − raw; each visible process took at
// most an equal turn (p) and at most what it asked for (its utilisation),
// so the visible processes explain Σ min(u, p), and the rest, clamped to
// [0, raw], is unexplained. docs/metrics.md ("Stolen time") states the
// limits.
func UnexplainedStolen(raw float64, visible []float64) float64 {
	p := 1 - raw
	var explained float64
	for _, u := range visible {
		explained += min(max(u, 0), p)
	}
	return min(max(raw-explained, 0), raw)
}
