package collector

import (
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// processLabels identify a process on a GPU (after gpu, uuid).
var processLabels = []string{"gpu_instance_id", "compute_instance_id", "pid", "process_name", "namespace", "pod", "container"}

func processDesc(name, help string, extra ...string) *prometheus.Desc {
	return desc("process", name, help, append(append([]string{}, processLabels...), extra...)...)
}

var (
	procMemDesc   = processDesc("memory_used_bytes", "GPU memory used by the process (NVML process lists, usedGpuMemory). pid=\"other\" sums the processes folded past --collector.process.max-per-gpu.")
	procSMDesc    = processDesc("sm_utilization_ratio", "Time-weighted mean SM utilisation of the process over the last sampler interval, from every nvmlDeviceGetProcessUtilization sample since the previous cycle (smUtil / 100). Absent where per-process samples are unsupported (MIG).")
	procMemBWDesc = processDesc("memory_bandwidth_utilization_ratio", "Time-weighted mean memory-bandwidth utilisation of the process over the last sampler interval (process samples memUtil / 100).")
	procEncDesc   = processDesc("encoder_utilization_ratio", "Time-weighted mean video encoder utilisation of the process over the last sampler interval (process samples encUtil / 100).")
	procDecDesc   = processDesc("decoder_utilization_ratio", "Time-weighted mean video decoder utilisation of the process over the last sampler interval (process samples decUtil / 100).")
	procBusyDesc  = processDesc("sm_busy_seconds_total", "SM busy seconds of the process: its samples' smUtil / 100 integrated over the time each sample covers, since the process was first seen.")
	procInfoDesc  = processDesc("info", "Process on the GPU, value 1: type (compute, graphics, mps), container id and runtime from its cgroup, command line (at most 256 bytes) and numeric uid from procfs.",
		"type", "container_id", "container_runtime", "cmdline", "user")
	procFoldedDesc = desc("process", "folded", "Processes of the GPU folded into the pid=\"other\" series because the GPU has more than --collector.process.max-per-gpu processes.")
	allocInfoDesc  = desc("gpu", "allocation_info", "A pod container the kubelet allocated the GPU (or, with mig_uuid set, one of its MIG devices) to, value 1, whether or not it runs a process yet (kubelet pod-resources API).",
		"mig_uuid", "namespace", "pod", "container")
)

type processCollector struct{ describer }

func newProcessCollector() Collector {
	return processCollector{describer{procMemDesc, procSMDesc, procMemBWDesc, procEncDesc, procDecDesc, procBusyDesc, procInfoDesc, procFoldedDesc, allocInfoDesc}}
}

func (processCollector) NewDevice(d Device) DeviceSampler {
	return &processSampler{st: d.state, uuid: d.UUID}
}

type processSampler struct {
	st   *deviceState
	uuid string
}

// labelValue makes a label value valid UTF-8.
func labelValue(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// processIdentity returns the label values of processLabels.
func processIdentity(p *gpuProcess) []string {
	gi, ci := "", ""
	if p.gi != noInstance {
		gi, ci = strconv.FormatUint(uint64(p.gi), 10), strconv.FormatUint(uint64(p.ci), 10)
	}
	return []string{gi, ci, strconv.FormatUint(uint64(p.pid), 10), p.info.name,
		labelValue(p.namespace), labelValue(p.pod), labelValue(p.container)}
}

// otherIdentity labels the series of the folded processes.
var otherIdentity = []string{"", "", "other", "", "", "", ""}

func (s *processSampler) Sample(r *Reader, e *Emitter, now time.Time) {
	if s.st == nil {
		return
	}
	pr := s.st.processes(r, now)
	if pr.listed {
		for _, p := range pr.kept {
			id := processIdentity(p)
			e.Gauge(procMemDesc, float64(p.memory), id...)
			if p.hasUtil {
				e.Gauge(procSMDesc, p.sm, id...)
				e.Gauge(procMemBWDesc, p.mem, id...)
				e.Gauge(procEncDesc, p.enc, id...)
				e.Gauge(procDecDesc, p.dec, id...)
				e.Counter(procBusyDesc, p.busyTotal, id...)
			}
			a := p.info.attr
			e.Gauge(procInfoDesc, 1, append(id, p.typ, labelValue(a.ContainerID), labelValue(a.Runtime), p.info.cmdline, p.info.user)...)
		}
		if len(pr.folded) > 0 {
			var mem, sm, bw, enc, dec float64
			for _, p := range pr.folded {
				mem += float64(p.memory)
				sm, bw, enc, dec = sm+p.sm, bw+p.mem, enc+p.enc, dec+p.dec
			}
			e.Gauge(procMemDesc, mem, otherIdentity...)
			if pr.utilOK {
				e.Gauge(procSMDesc, sm, otherIdentity...)
				e.Gauge(procMemBWDesc, bw, otherIdentity...)
				e.Gauge(procEncDesc, enc, otherIdentity...)
				e.Gauge(procDecDesc, dec, otherIdentity...)
				e.Counter(procBusyDesc, pr.otherSM, otherIdentity...)
			}
		}
		e.Gauge(procFoldedDesc, float64(len(pr.folded)))
	}
	type allocKey struct{ mig, ns, pod, ctr string }
	seen := map[allocKey]bool{}
	for _, a := range pr.allocs {
		k := allocKey{ns: a.Namespace, pod: a.Pod, ctr: a.Container}
		if a.DeviceID != s.uuid {
			k.mig = a.DeviceID
		}
		if seen[k] {
			continue
		}
		seen[k] = true
		e.Gauge(allocInfoDesc, 1, labelValue(k.mig), labelValue(k.ns), labelValue(k.pod), labelValue(k.ctr))
	}
}
