package collector

import (
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/nvmlret"
)

// What the continuous probe needs from NVML to stay off a tenant's GPU:
// free memory before it creates a context (CUDA cannot tell it without
// one), and the MIG instances, of which CUDA shows one process only one.

var (
	probeSkippedDesc = desc("probe", "skipped_total",
		"Probe runs that created no context on the device, by reason: compute_mode_exclusive_process, compute_mode_prohibited (the GPU is not ours to share), free_memory_low (free memory below the probe's memory budget plus the context margin), mig_instance_not_visible (CUDA shows one MIG instance per process; this one is not measured).",
		"reason")
	probeNotReportedDesc = desc("probe", "not_reported_total",
		"Probe runs that left a measurement's figure out for a limit of the configuration rather than a failure (not counted in errors_total), by measurement and reason: buffer_budget_below_l2 (--collector.probe.max-memory less the context leaves no room for two device-copy buffers of 4x the L2 cache: the copy would measure the cache).",
		"measurement", "reason")
	probeContextMemDesc = desc("probe", "context_memory_bytes",
		"Device memory the probe's own CUDA context took in its last run (the drop in free memory from NVML's figure before the context to cuMemGetInfo's right after), counted in --collector.probe.max-memory. Absent when free memory was not known before.")
)

// NVMLView is what the probe reads from the sampler's NVML snapshot.
// *Sampler implements it.
type NVMLView interface {
	// Sampled tells whether the snapshot holds every GPU's first reading:
	// before it, FreeMemory and MIGInstances know nothing yet.
	Sampled() bool
	// FreeMemory is the free memory NVML last reported for the GPU or MIG
	// instance with uuid.
	FreeMemory(uuid string) (uint64, bool)
	// MIGInstances lists the MIG instances NVML last reported: GPU and
	// PCIBusID are the parent's, UUID the instance's.
	MIGInstances() []GPUIdentity
	// ProcessPIDs reads NVML's process lists (compute, MPS, graphics) of
	// the GPU or MIG instance with uuid now (gpuprobe.Options.Processes).
	ProcessPIDs(uuid string) ([]uint32, bool)
	// SetProbePID tells the process collectors the exporter's own PID as
	// its probe found it in NVML's process list (gpuprobe.Result.NVMLPID).
	SetProbePID(pid uint32)
	// FallbackSelfPID is the exporter's own PID as the process collectors
	// take it until the probe has found it (ProcessOptions.SelfPID).
	FallbackSelfPID() uint32
	// ComputeMode is the compute mode NVML last reported for the GPU with
	// label gpu (gpuprobe.ComputeMode*: NVML's numbers are CUDA's), when
	// known.
	ComputeMode(gpu string) (int, bool)
}

// FallbackSelfPID implements NVMLView.
func (s *Sampler) FallbackSelfPID() uint32 { return s.cfg.Processes.withDefaults().SelfPID }

// ProcessPIDs implements NVMLView: a live read of the device's process
// lists (the probe calls it on its own thread, around its context's
// creation); ok is false when the device or every list could not be read.
func (s *Sampler) ProcessPIDs(uuid string) ([]uint32, bool) {
	d, ret := s.lib.DeviceGetHandleByUUID(uuid)
	if ret != nvml.SUCCESS {
		return nil, false
	}
	return nvmlret.ProcessPIDs(d)
}

// SetProbePID implements NVMLView.
func (s *Sampler) SetProbePID(pid uint32) { s.probePID.Store(pid) }

// Sampled implements NVMLView: whether the latest snapshot was published
// after every GPU's first cycle. A worker reads the GPU's identity (which
// GPUs reports at once) and samples it before it publishes, so an identity
// known does not mean a sample published.
func (s *Sampler) Sampled() bool { return s.Snapshot().sampled }

// FreeMemory implements NVMLView from the latest snapshot: a GPU's
// gpulens_gpu_memory_free_bytes, or a MIG instance's total less used.
func (s *Sampler) FreeMemory(uuid string) (uint64, bool) {
	var migTotal, migUsed float64
	var haveTotal, haveUsed bool
	for _, m := range s.Snapshot().Metrics {
		var d *prometheus.Desc
		switch m.Desc() {
		case memFreeDesc, migMemTotalDesc, migMemUsedDesc:
			d = m.Desc()
		default:
			continue
		}
		labels, v, ok := readMetric(m)
		if !ok {
			continue
		}
		switch d {
		case memFreeDesc:
			if strings.EqualFold(labels["uuid"], uuid) {
				return uint64(v), true
			}
		case migMemTotalDesc:
			if strings.EqualFold(labels["mig_uuid"], uuid) {
				migTotal, haveTotal = v, true
			}
		case migMemUsedDesc:
			if strings.EqualFold(labels["mig_uuid"], uuid) {
				migUsed, haveUsed = v, true
			}
		}
	}
	if haveTotal && haveUsed && migTotal >= migUsed {
		return uint64(migTotal - migUsed), true
	}
	return 0, false
}

// MIGInstances implements NVMLView from the latest snapshot's
// gpulens_mig_instance_info.
func (s *Sampler) MIGInstances() []GPUIdentity {
	gpus, _ := s.GPUs()
	bus := map[string]string{}
	for _, g := range gpus {
		bus[g.GPU] = g.PCIBusID
	}
	var out []GPUIdentity
	for _, m := range s.Snapshot().Metrics {
		if m.Desc() != migInfoDesc {
			continue
		}
		if labels, _, ok := readMetric(m); ok && labels["mig_uuid"] != "" {
			out = append(out, GPUIdentity{GPU: labels["gpu"], UUID: labels["mig_uuid"], PCIBusID: bus[labels["gpu"]]})
		}
	}
	return out
}

// ComputeMode implements NVMLView from the latest snapshot's one-hot
// gpulens_gpu_compute_mode (the mode collector); unknown without it.
func (s *Sampler) ComputeMode(gpu string) (int, bool) {
	for _, m := range s.Snapshot().Metrics {
		if m.Desc() != computeModeDesc {
			continue
		}
		labels, v, ok := readMetric(m)
		if !ok || v != 1 || labels["gpu"] != gpu {
			continue
		}
		for _, cm := range computeModes {
			if cm.name == labels["mode"] {
				return int(cm.mode), true
			}
		}
	}
	return 0, false
}

// readMetric returns a const metric's labels and gauge or counter value.
func readMetric(m prometheus.Metric) (map[string]string, float64, bool) {
	var pb dto.Metric
	if err := m.Write(&pb); err != nil {
		return nil, 0, false
	}
	labels := make(map[string]string, len(pb.GetLabel()))
	for _, l := range pb.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	switch {
	case pb.Gauge != nil:
		return labels, pb.GetGauge().GetValue(), true
	case pb.Counter != nil:
		return labels, pb.GetCounter().GetValue(), true
	}
	return labels, 0, false
}

// invisibleMIG returns the MIG instances NVML lists that CUDA did not
// (listed: the CUDA devices' keys). Without ProbeOptions.Instances it
// records a run on each as skipped with mig_instance_not_visible and
// returns them to keep, not to probe; with it, probeHidden probes them.
func (p *ProbeCollector) invisibleMIG(listed map[string]bool) hiddenMIG {
	var h hiddenMIG
	if p.opts.NVML == nil {
		return h
	}
	for _, in := range p.opts.NVML.MIGInstances() {
		if listed[in.UUID] {
			continue
		}
		h.keys = append(h.keys, in.UUID)
		if p.opts.Instances != nil {
			h.probe = append(h.probe, in)
			continue
		}
		st := p.instanceState(in)
		if st.runs == 0 {
			p.logger.Info("probe: MIG instance not measured: CUDA shows this process one MIG instance, and probe children are off", "gpu", in.GPU, "mig_uuid", in.UUID)
		}
		st.runs++
		st.skip(gpuprobe.SkipMIGInstanceNotVisible)
		st.result = nil
	}
	return h
}

// hiddenMIG are the MIG instances CUDA does not show this process: keys
// the states to keep, probe those to probe in child processes.
type hiddenMIG struct {
	keys  []string
	probe []GPUIdentity
}

func (h hiddenMIG) has(key string) bool { return slices.Contains(h.keys, key) }

// instanceState is the state of a MIG instance CUDA does not show this
// process, labelled with its parent's gpu and its MIG UUID.
func (p *ProbeCollector) instanceState(in GPUIdentity) *probeDevice {
	st := p.devices[in.UUID]
	if st == nil {
		st = &probeDevice{gpu: in.GPU, uuid: in.UUID, matched: true, errs: map[probeErrKey]float64{}}
		p.devices[in.UUID] = st
	}
	return st
}

// notReported counts a measurement left out for a reason of the
// configuration.
func (st *probeDevice) notReported(nr gpuprobe.NotReported) {
	if st.notReportedRuns == nil {
		st.notReportedRuns = map[probeErrKey]float64{}
	}
	st.notReportedRuns[probeErrKey{nr.Measurement, nr.Reason}]++
}

// skip counts a run that created no context.
func (st *probeDevice) skip(reason string) {
	if st.skips == nil {
		st.skips = map[string]float64{}
	}
	st.skips[reason]++
}
