package collector

import (
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Contention metrics; every formula is in docs/contention.md.
var (
	sharingModeDesc = desc("gpu", "sharing_mode",
		"How the GPU is shared, one-hot: mig (MIG mode on), mps (an MPS client runs), idle (no process with SM activity in the last interval, or none listed), exclusive (one process, or an exclusive compute mode), time_sliced (several processes).",
		"mode")
	activeProcsDesc = desc("gpu", "active_processes",
		"Processes with SM activity in at least one process-utilisation sample of the last sampler interval.")
	contentionDesc = desc("gpu", "contention_ratio",
		"Share of the GPU's busy time in the last sampler interval during which two or more processes had SM activity (from the per-process sample timelines); 0 when idle or for a lone tenant.")
	contendedDesc = desc("gpu", "contended_seconds_total",
		"Busy seconds during which two or more processes had SM activity; rate() over busy rate is the contention ratio over any window.")
	timeShareDesc = processDesc("gpu_time_share_ratio",
		"The process's share of the GPU's busy time in the last sampler interval: its SM utilisation divided by the sum over processes, times the GPU's busy fraction, integrated and divided by the busy time. Sums to 1 over a busy GPU's processes (at most 1).")
	migSaturationDesc = desc("mig", "saturation_ratio",
		"How close the MIG instance runs to its own limits: the largest of its GPM SM activity, GPM DRAM bandwidth utilisation and memory used / total. Absent without GPM.",
		"mig_uuid", "gpu_instance_id", "compute_instance_id")
)

var sharingModes = []string{"exclusive", "time_sliced", "mps", "mig", "idle"}

type contentionCollector struct{ describer }

func newContentionCollector() Collector {
	return contentionCollector{describer{sharingModeDesc, activeProcsDesc, contentionDesc, contendedDesc, timeShareDesc, migSaturationDesc}}
}

func (contentionCollector) NewDevice(d Device) DeviceSampler { return &contentionSampler{st: d.state} }

type contentionSampler struct{ st *deviceState }

func (s *contentionSampler) Sample(r *Reader, e *Emitter, now time.Time) {
	if s.st == nil {
		return
	}
	pr := s.st.processes(r, now)
	mig := s.st.migInstances(r)
	cm, cmOK := Call(r, "GetComputeMode", r.Device.GetComputeMode)
	if mode := sharingMode(pr, mig, cm, cmOK); mode != "" {
		for _, m := range sharingModes {
			e.Bool(sharingModeDesc, m == mode, m)
		}
	}
	if pr.utilOK {
		e.Gauge(activeProcsDesc, float64(pr.active))
		e.Gauge(contentionDesc, ratio(pr.cycle.contended, pr.cycle.busy))
		e.Counter(contendedDesc, pr.contendedTotal)
		for _, p := range pr.kept {
			e.Gauge(timeShareDesc, ratio(p.attributed, pr.cycle.busy), processIdentity(p)...)
		}
		if len(pr.folded) > 0 {
			var att float64
			for _, p := range pr.folded {
				att += p.attributed
			}
			e.Gauge(timeShareDesc, ratio(att, pr.cycle.busy), otherIdentity...)
		}
	}
	if mig.enabled {
		g := s.st.gpmMetrics(r)
		for _, in := range mig.instances {
			v := g.mig[in.gi]
			if v == nil {
				continue
			}
			sat, ok := saturation(v, in)
			if ok {
				e.Gauge(migSaturationDesc, sat, in.uuid, strconv.Itoa(in.gi), strconv.Itoa(in.ci))
			}
		}
	}
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return min(1, a/b)
}

// sharingMode infers how the GPU is shared; "" when unknown.
func sharingMode(pr *processReading, mig *migReading, cm nvml.ComputeMode, cmOK bool) string {
	switch {
	case mig.enabled:
		return "mig"
	case !pr.listed:
		return ""
	case pr.mps:
		return "mps"
	case len(pr.procs) == 0, pr.utilOK && pr.active == 0:
		return "idle"
	case len(pr.procs) == 1, cmOK && (cm == nvml.COMPUTEMODE_EXCLUSIVE_PROCESS || cm == nvml.COMPUTEMODE_EXCLUSIVE_THREAD):
		return "exclusive"
	default:
		return "time_sliced"
	}
}

// saturation is the largest of the instance's SM activity, DRAM bandwidth
// utilisation and memory fill; ok is false without GPM SM activity.
func saturation(v *gpmValues, in *migInstance) (float64, bool) {
	sm, ok := v.sm()
	if !ok {
		return 0, false
	}
	sat := sm
	if d, ok := v.dram(); ok {
		sat = max(sat, d)
	}
	if in.memOK && in.memTotal > 0 {
		sat = max(sat, float64(in.memUse)/float64(in.memTotal))
	}
	return min(1, sat), true
}
