package collector

import (
	"context"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// Every MIG instance measured: CUDA enumerates one MIG instance per
// process, so the probe reaches each other instance NVML lists through a
// child process of its own (ProbeOptions.Instances: gpuprobe.ChildProber,
// the exporter's own binary with CUDA_VISIBLE_DEVICES=MIG-<uuid>), one
// after the other, after the devices CUDA shows this process, under the
// same deadline (call), budget and safety checks. What NVML tells is
// checked before a child is started: an instance in a compute mode other
// than DEFAULT or with too little free memory is skipped without one. The
// child checks again with what only CUDA tells (the instance's L2, hence
// its exact memory need) before it creates a context.

// InstanceProber probes a MIG instance this process's CUDA does not show,
// by its MIG UUID (*gpuprobe.ChildProber). It returns within ctx's
// deadline; the result's Child says what the child process cost.
type InstanceProber interface {
	ProbeInstance(ctx context.Context, uuid string, cfg gpuprobe.Config) (gpuprobe.Result, error)
}

var (
	probeChildCPUDesc = desc("probe", "child_cpu_seconds_total",
		"CPU time (user and system) of the probe child processes that measured this MIG instance (one per run: CUDA shows a process one MIG instance); not in process_cpu_seconds_total, which is the exporter's own.")
	probeChildRSSDesc = desc("probe", "child_max_resident_memory_bytes",
		"Peak resident host memory of the last probe child process that measured this MIG instance.")
)

// childCost is what the probe children of one MIG instance cost.
type childCost struct {
	cpuSeconds  float64
	maxRSSBytes uint64
}

// countChild adds a child's cost (nil: the run was in process).
func (st *probeDevice) countChild(u *gpuprobe.ChildUsage) {
	if u == nil {
		return
	}
	if st.child == nil {
		st.child = &childCost{}
	}
	st.child.cpuSeconds += (u.UserCPU + u.SystemCPU).Seconds()
	st.child.maxRSSBytes = u.MaxRSSBytes
}

func (st *probeDevice) appendChildMetrics(ms []prometheus.Metric) []prometheus.Metric {
	if st.child == nil {
		return ms
	}
	return append(ms,
		prometheus.MustNewConstMetric(probeChildCPUDesc, prometheus.CounterValue, st.child.cpuSeconds, st.gpu, st.uuid),
		prometheus.MustNewConstMetric(probeChildRSSDesc, prometheus.GaugeValue, float64(st.child.maxRSSBytes), st.gpu, st.uuid))
}

// probeHidden probes, one after the other, the MIG instances CUDA does not
// show this process (h.probe), each in a child process, publishing after
// each, and returns their states.
func (p *ProbeCollector) probeHidden(ctx context.Context, h hiddenMIG) []*probeDevice {
	var out []*probeDevice
	for _, in := range h.probe {
		if ctx.Err() != nil {
			return out
		}
		st := p.instanceState(in)
		if p.probeInstance(ctx, st, in) {
			p.publish()
			out = append(out, st)
		}
	}
	return out
}

// probeInstance probes one hidden instance and records the outcome; false
// when the probe was cut short by shutdown.
func (p *ProbeCollector) probeInstance(ctx context.Context, st *probeDevice, in GPUIdentity) bool {
	cfg := p.opts.Config
	if st.info != nil {
		cfg = p.configFor(*st.info)
	}
	if skip := p.instancePrecheck(st, in, cfg); skip != nil {
		p.record(ctx, st, gpuprobe.Result{Skipped: skip}, nil, -1)
		return true
	}
	res, err := callValue(ctx, p, &p.busy, func(ctx context.Context) (gpuprobe.Result, error) {
		return p.opts.Instances.ProbeInstance(ctx, in.UUID, cfg)
	})
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return false // shutting down
	}
	if err == nil && res.Skipped == nil {
		// What CUDA says of the instance (in the child, as its only
		// device: ordinal 0); its L2 sizes the next precheck.
		info := res.Device
		st.info = &info
	}
	p.record(ctx, st, res, err, -1)
	return true
}

// instancePrecheck is why an instance is left alone without starting a
// child, from NVML: a compute mode other than DEFAULT, or free memory below
// what the probe needs there plus the context reserve (the exact need once
// a child has told the instance's L2, else the least any device needs).
// Nil: start the child (which checks again with CUDA's figures).
func (p *ProbeCollector) instancePrecheck(st *probeDevice, in GPUIdentity, cfg gpuprobe.Config) *gpuprobe.Skip {
	nv := p.opts.NVML
	if mode, ok := nv.ComputeMode(in.GPU); ok {
		if reason := gpuprobe.ComputeModeSkip(mode); reason != "" {
			return &gpuprobe.Skip{Reason: reason, Detail: fmt.Sprintf("NVML reports compute mode %d on GPU %s: only DEFAULT lets the probe share it; no probe child started", mode, in.GPU)}
		}
	}
	free, ok := nv.FreeMemory(in.UUID)
	if !ok {
		return nil
	}
	need := gpuprobe.MinMemoryNeed(cfg)
	if st.info != nil {
		need = gpuprobe.MemoryNeed(*st.info, cfg)
	}
	if need += cfg.ContextReserveBytes; free < need {
		return &gpuprobe.Skip{Reason: gpuprobe.SkipFreeMemoryLow, Detail: fmt.Sprintf("NVML reports %.1f MiB free on the instance, the probe needs %.1f MiB with the context reserve; no probe child started",
			float64(free)/(1<<20), float64(need)/(1<<20))}
	}
	return nil
}
