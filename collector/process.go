package collector

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
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
	ds := []*prometheus.Desc{procMemDesc, procSMDesc, procMemBWDesc, procEncDesc, procDecDesc, procBusyDesc, procInfoDesc, procFoldedDesc, allocInfoDesc}
	return processCollector{describer(append(ds, hostDescs...))}
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

// processSeries are the label pairs of one process's series on one GPU,
// built when its labels change (rarely: a pod learnt, a command line read)
// and shared by the series of every cycle. MustNewConstMetric would build
// and sort them anew for every series of every cycle: most of the process
// collector's cost with many processes.
type processSeries struct {
	// What the labels were built from.
	from                      *procInfo
	namespace, pod, container string
	typ, containerID, runtime string
	built                     bool

	base      []*dto.LabelPair    // gpu, uuid and processLabels
	cpu       [2][]*dto.LabelPair // and mode="user", mode="system"
	infoPairs []*dto.LabelPair    // and the info series' own labels

	// The host series of the last usage reading (process_host.go).
	host    []prometheus.Metric
	hostSeq uint64
}

// label makes the label pairs current for p on the device with label
// values device (gpu, uuid); false when they are not valid label values.
func (ps *processSeries) label(device []string, p *gpuProcess) bool {
	a := &p.info.attr
	if ps.built && ps.from == p.info && ps.namespace == p.namespace && ps.pod == p.pod && ps.container == p.container &&
		ps.typ == p.typ && ps.containerID == a.ContainerID && ps.runtime == a.Runtime {
		return true
	}
	id := processIdentity(p)
	lv := make([]string, 0, len(device)+len(id)+5)
	lv = append(append(lv, device...), id...)
	infoLV := append(slices.Clone(lv), p.typ, labelValue(a.ContainerID), labelValue(a.Runtime), p.info.cmdline, p.info.user)
	if _, err := prometheus.NewConstMetric(procInfoDesc, prometheus.GaugeValue, 1, infoLV...); err != nil {
		ps.built = false
		return false
	}
	ps.base = prometheus.MakeLabelPairs(procMemDesc, lv)
	ps.cpu[0] = prometheus.MakeLabelPairs(hostCPUDesc, append(slices.Clone(lv), "user"))
	ps.cpu[1] = prometheus.MakeLabelPairs(hostCPUDesc, append(lv, "system"))
	ps.infoPairs = prometheus.MakeLabelPairs(procInfoDesc, infoLV)
	ps.from, ps.namespace, ps.pod, ps.container = p.info, p.namespace, p.pod, p.container
	ps.typ, ps.containerID, ps.runtime = p.typ, a.ContainerID, a.Runtime
	ps.built, ps.host = true, nil
	return true
}

// fixedMetric is a const metric with label pairs built beforehand (see
// processSeries) and its value's message built in place, so that writing
// it allocates nothing (as client_golang's const metrics). Immutable once
// set; never copied.
type fixedMetric struct {
	desc    *prometheus.Desc
	labels  []*dto.LabelPair
	val     float64
	counter dto.Counter
	gauge   dto.Gauge
	isCount bool
}

func (m *fixedMetric) set(d *prometheus.Desc, labels []*dto.LabelPair, typ prometheus.ValueType, v float64) {
	m.desc, m.labels, m.val = d, labels, v
	if typ == prometheus.CounterValue {
		m.isCount, m.counter.Value = true, &m.val
	} else {
		m.gauge.Value = &m.val
	}
}

func (m *fixedMetric) Desc() *prometheus.Desc { return m.desc }

func (m *fixedMetric) Write(out *dto.Metric) error {
	out.Label = m.labels
	if m.isCount {
		out.Counter = &m.counter
	} else {
		out.Gauge = &m.gauge
	}
	return nil
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
			ps := s.st.procs.seriesOf(p)
			if !ps.label(e.labels, p) {
				continue // label values that are not valid (cannot happen: they are made valid)
			}
			// One allocation for the process's series of this cycle.
			ms := new([7]fixedMetric)
			n := 0
			add := func(d *prometheus.Desc, pairs []*dto.LabelPair, typ prometheus.ValueType, v float64) {
				ms[n].set(d, pairs, typ, v)
				e.metrics = append(e.metrics, &ms[n])
				n++
			}
			add(procMemDesc, ps.base, prometheus.GaugeValue, float64(p.memory))
			if p.hasUtil {
				add(procSMDesc, ps.base, prometheus.GaugeValue, p.sm)
				add(procMemBWDesc, ps.base, prometheus.GaugeValue, p.mem)
				add(procEncDesc, ps.base, prometheus.GaugeValue, p.enc)
				add(procDecDesc, ps.base, prometheus.GaugeValue, p.dec)
				add(procBusyDesc, ps.base, prometheus.CounterValue, p.busyTotal)
			}
			add(procInfoDesc, ps.infoPairs, prometheus.GaugeValue, 1)
			s.st.usage.emit(e, p, ps, s.st.cycle)
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
