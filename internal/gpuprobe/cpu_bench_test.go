//go:build linux

package gpuprobe_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// BenchmarkProbeCPU measures the host CPU time of one probe of a simulated
// H100 (docs/metrics.md, "CPU"): cpu-ms/op is the process's user + system
// time per probe (the probe's own Go code plus the simulated driver's
// emulation of the GPU's work, so an upper bound on the probe's host
// code), spin-ms/op the time the simulated driver counts as busy-waiting
// in cuEventSynchronize (0 with blocking events; a real driver would spin
// a core that long).
func BenchmarkProbeCPU(b *testing.B) {
	for _, bc := range []struct {
		name string
		cfg  gpuprobe.Config
	}{
		{"exporter", gpuprobe.ExporterConfig()},
		{"verify", gpuprobe.DefaultConfig()},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var cpu, spin time.Duration
			for b.Loop() {
				p, drv := newProbe(h100())
				before := cpuTime(b)
				res, err := p.Probe(context.Background(), 0, bc.cfg)
				cpu += cpuTime(b) - before
				if err != nil || len(res.Errors) > 0 {
					b.Fatalf("probe: %v %+v", err, res.Errors)
				}
				spin += drv.SpinTime()
			}
			b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(spin.Microseconds())/1e3/float64(b.N), "spin-ms/op")
		})
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
