package gpuprobe

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Bounds Validate enforces.
const (
	minMemoryBytes = 8 << 20
	maxMaxGaps     = 8192 // 8*(6+2*8192) bytes per SM: 17 MB on 132 SMs
	// maxStolenWindows bounds Config.StolenWindows.
	maxStolenWindows = 64
	minFillStep      = 1 << 20
)

// DefaultContextReserve is Config.ContextReserveBytes by default: a bare
// CUDA 12 context with lazy module loading takes a few hundred MiB of
// device memory on a data-centre GPU (measure it: gpulens_probe_context_memory_bytes);
// 768 MiB leaves room above that, and is what the probe counts at most for
// the context (see Result.BufferBudgetBytes).
const DefaultContextReserve = 768 << 20

// L2BufferFactor: every device-memory bandwidth buffer is at least this many
// times the device's L2 cache, else the figure would be the L2's and is not
// reported.
const L2BufferFactor = 4

// DefaultConfig is gpulens-verify's probe: about 2 s of GPU time per device
// of which 1 s of stolen-time windows (8 of 125 ms), at most 2 GiB of
// device memory with the context's own (of which it takes what the GPU
// needs, MemoryNeed: copy buffers of 4 × L2 fit on every GPU of the spec
// table), a 768 MiB margin for the context, the fill test off (1 GiB steps
// when enabled).
func DefaultConfig() Config {
	return Config{
		MaxMemoryBytes:      2 << 30,
		ContextReserveBytes: DefaultContextReserve,
		GPUTimeBudget:       2 * time.Second,
		StolenWindow:        time.Second,
		StolenWindows:       8,
		GapThreshold:        10 * time.Microsecond,
		MaxGaps:             2048,
		FillStep:            1 << 30,
	}
}

// ExporterConfig is the exporter's continuous probe: at most 250 ms of GPU
// time including 100 ms of stolen-time windows (4 of 25 ms), and at most 2 GiB of device
// memory with the context's own, so that it can run every few minutes
// beside real work. The probe takes only what a GPU needs (MemoryNeed: the
// context, counted as the 768 MiB reserve, and two device-copy buffers of
// 4 × L2): 1168 MiB on an H100 or H200 (50 MiB L2), 1776 MiB on a B200
// (126 MiB), which the budget allows on every GPU of the spec table (the
// 1280 MiB it was left a B200 two 256 MiB buffers, under 4 × its L2).
func ExporterConfig() Config {
	return Config{
		MaxMemoryBytes:      2 << 30,
		ContextReserveBytes: DefaultContextReserve,
		GPUTimeBudget:       250 * time.Millisecond,
		StolenWindow:        100 * time.Millisecond,
		StolenWindows:       4,
		GapThreshold:        10 * time.Microsecond,
		MaxGaps:             256,
		FillStep:            1 << 30,
	}
}

// Validate reports every field out of range, each message naming it.
func (c Config) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if c.MaxMemoryBytes < minMemoryBytes {
		bad("MaxMemoryBytes must be at least %d (8 MiB), got %d", minMemoryBytes, c.MaxMemoryBytes)
	}
	if c.GPUTimeBudget <= 0 {
		bad("GPUTimeBudget must be positive, got %s", c.GPUTimeBudget)
	}
	if !slices.Contains(c.Skip, MeasureStolen) {
		switch {
		case c.StolenWindow <= 0:
			bad("StolenWindow must be positive, got %s", c.StolenWindow)
		case c.GPUTimeBudget > 0 && c.StolenWindow >= c.GPUTimeBudget:
			bad("StolenWindow (%s) must be shorter than GPUTimeBudget (%s), which includes it", c.StolenWindow, c.GPUTimeBudget)
		}
		per := c.StolenWindow
		switch {
		case c.StolenWindows < 0 || c.StolenWindows > maxStolenWindows:
			bad("StolenWindows must be between 0 and %d, got %d", maxStolenWindows, c.StolenWindows)
		case c.StolenWindows > 1 && c.StolenWindow > 0:
			per = c.StolenWindow / time.Duration(c.StolenWindows)
			if per < minStolenWindow {
				bad("StolenWindow / StolenWindows (%s / %d) must be at least %s", c.StolenWindow, c.StolenWindows, minStolenWindow)
			}
		}
		switch {
		case c.GapThreshold <= 0:
			bad("GapThreshold must be positive, got %s", c.GapThreshold)
		case c.StolenWindow > 0 && c.GapThreshold >= per:
			if per == c.StolenWindow {
				bad("GapThreshold (%s) must be shorter than StolenWindow (%s)", c.GapThreshold, c.StolenWindow)
			} else {
				bad("GapThreshold (%s) must be shorter than one stolen-time window, StolenWindow / StolenWindows (%s)", c.GapThreshold, per)
			}
		}
		if c.MaxGaps < 1 || c.MaxGaps > maxMaxGaps {
			bad("MaxGaps must be between 1 and %d, got %d", maxMaxGaps, c.MaxGaps)
		}
	}
	if c.Fill && c.FillStep < minFillStep {
		bad("FillStep must be at least %d (1 MiB) when Fill is on, got %d", minFillStep, c.FillStep)
	}
	for _, s := range c.Skip {
		if !slices.Contains(Measurements, s) {
			bad("Skip: unknown measurement %q (known: %s)", s, strings.Join(Measurements, ", "))
		}
	}
	if len(errs) > 0 {
		return errors.New("gpuprobe: invalid config: " + strings.Join(errs, "; "))
	}
	return nil
}

func (c Config) skips(m string) bool { return slices.Contains(c.Skip, m) }

// stolenWindows is how many stolen-time windows c asks for (at least 1).
func (c Config) stolenWindows() int { return max(1, c.StolenWindows) }
