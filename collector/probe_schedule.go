package collector

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// How a probe run takes a node's devices (ProbeOptions.Schedule, the
// exporter's --collector.probe.schedule).
const (
	// ProbeSequential probes the devices one after another: a run holds one
	// GPU at a time, and a tenant spread over N GPUs (a tensor-parallel
	// model, whose every step waits for its slowest GPU) is slowed N times
	// per run.
	ProbeSequential = "sequential"
	// ProbeTogether probes every device at once, each on its own thread
	// with its own context, budget and deadline: a run holds all of a
	// node's GPUs in one window, and a tensor-parallel tenant is slowed
	// once per run. The host copies of the devices then share the host's
	// memory and PCIe switches (see docs/metrics.md). It needs a Prober
	// whose probes of different devices may run at once
	// (gpuprobe.PerDevice); over one that serialises them, the devices
	// still go one after another.
	ProbeTogether = "together"
)

// ProbeSchedules are the valid schedules.
var ProbeSchedules = []string{ProbeSequential, ProbeTogether}

func validSchedule(s string) error {
	switch s {
	case "", ProbeSequential, ProbeTogether:
		return nil
	}
	return fmt.Errorf("probe schedule must be %q or %q, got %q", ProbeSequential, ProbeTogether, s)
}

// guard is the busy flag of st's prober calls: the collector's own when the
// devices go one after another (at most one call stuck in the driver), the
// device's when they go together (at most one per device).
func (p *ProbeCollector) guard(st *probeDevice) *atomic.Bool {
	if p.opts.Schedule == ProbeTogether {
		return &st.busy
	}
	return &p.busy
}

// finished is when a successful probe ended: on the probe's own clock
// (Result.Started + Duration: the wall clock over libcuda, the simulated
// driver's virtual clock on a simulated fleet, where a run takes almost no
// wall time and the devices of a sequential run follow one another on that
// clock), else now.
func (p *ProbeCollector) finished(res gpuprobe.Result) time.Time {
	if !res.Started.IsZero() && res.Duration > 0 {
		return res.Started.Add(res.Duration)
	}
	return p.now()
}

// probeTogether probes every device of devs at once, each on a goroutine
// of its own under its own deadline, then publishes, and returns their
// states in devs' order.
func (p *ProbeCollector) probeTogether(ctx context.Context, devs []gpuprobe.DeviceInfo, gpus []GPUIdentity) []*probeDevice {
	sts := make([]*probeDevice, len(devs))
	seen := map[*probeDevice]bool{}
	for i, d := range devs {
		sts[i] = p.device(d, gpus)
	}
	var wg sync.WaitGroup
	for i, d := range devs {
		if seen[sts[i]] {
			continue // listed twice: probed once
		}
		seen[sts[i]] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.probe(ctx, sts[i], d)
		}()
	}
	wg.Wait()
	p.publish()
	return sts
}
