package gpuprobe

import "time"

// The deadline of one device's probe, for every caller (the exporter's
// continuous probe and gpulens-verify):
//
//	Deadline(cfg) = DeadlineFactor × cfg.GPUTimeBudget + DeadlineSlack (+ FillDeadlineSlack with cfg.Fill)
//
// The budget bounds only the timed kernels and copies; a probe also spends
// wall time the budget does not count: cuInit, context creation, the PTX
// JIT of both modules (seconds when the driver's JIT cache is cold, after a
// driver upgrade or in a fresh container) and pinned allocations. The
// factor allows the measurements to overrun the budget on a GPU that other
// contexts time-slice; the slack is the fixed cost. Both programs pay the
// same fixed cost, so they share the larger slack, 30 s: cutting a healthy
// probe short reports a false deadline_exceeded and leaves the probe busy
// until the driver returns, while a later cut only reports a truly stuck
// driver later (the exporter never waits for a probe to answer a scrape).
// The memory fill (verify's --vram.fill) touches up to hundreds of GiB and
// gets FillDeadlineSlack more.
const (
	DeadlineFactor    = 4
	DeadlineSlack     = 30 * time.Second
	FillDeadlineSlack = 2 * time.Minute
)

// Deadline is how long one device's probe under cfg may take before its
// context is cancelled.
func Deadline(cfg Config) time.Duration {
	d := DeadlineFactor*cfg.GPUTimeBudget + DeadlineSlack
	if cfg.Fill {
		d += FillDeadlineSlack
	}
	return d
}
