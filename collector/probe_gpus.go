package collector

import (
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/internal/gpuid"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// GPUIdentity names one NVML GPU: the labels probe results carry.
type GPUIdentity struct {
	GPU      string // NVML index, the gpu label
	UUID     string
	PCIBusID string // NVML's format, "00000000:18:00.0"
}

// GPUDirectory lists the NVML GPUs that CUDA devices are matched against.
// *Sampler implements it.
type GPUDirectory interface {
	// GPUs returns the GPUs whose identity is known, and whether every
	// GPU's identity is.
	GPUs() (gpus []GPUIdentity, complete bool)
}

// GPUs implements GPUDirectory: the GPUs whose worker has read the identity.
func (s *Sampler) GPUs() ([]GPUIdentity, bool) {
	out := make([]GPUIdentity, 0, len(s.workers))
	for _, w := range s.workers {
		if w.uuid.Load() == nil {
			continue
		}
		// readIdentity sets w.info before it stores w.uuid and never
		// changes it afterwards: having seen uuid, reading info is safe.
		out = append(out, GPUIdentity{GPU: w.gpu, UUID: w.info.UUID, PCIBusID: w.info.PCIBusID})
	}
	return out, len(out) == len(s.workers)
}

func deviceKey(d gpuprobe.DeviceInfo) string {
	if d.UUID != "" {
		return d.UUID
	}
	return "cuda:" + strconv.Itoa(d.Ordinal)
}

// device returns the state of d, labelled after the NVML GPU it is.
func (p *ProbeCollector) device(d gpuprobe.DeviceInfo, gpus []GPUIdentity) *probeDevice {
	key := deviceKey(d)
	st := p.devices[key]
	if st == nil {
		st = &probeDevice{errs: map[probeErrKey]float64{}}
		p.devices[key] = st
	}
	info := d
	st.info = &info
	gpu, uuid, ok := matchGPU(d, gpus)
	if !ok && st.matched {
		return st // keep the labels found before (the GPU may be unreadable now)
	}
	if !ok && !st.warned {
		st.warned = true
		p.logger.Warn("probe: CUDA device not found among NVML's GPUs; labelled gpu=\"\"", "cuda_ordinal", d.Ordinal, "uuid", d.UUID, "pci_bus_id", d.PCIBusID)
	}
	st.gpu, st.uuid, st.matched = gpu, uuid, ok
	return st
}

// matchGPU finds the NVML GPU of a CUDA device (gpuid.MatchCUDA: by UUID,
// else by PCI bus id). A MIG instance, whose CUDA UUID is the instance's, is
// labelled with its parent's gpu and its own MIG UUID.
func matchGPU(d gpuprobe.DeviceInfo, gpus []GPUIdentity) (gpu, uuid string, ok bool) {
	ids := make([]gpuid.GPU, len(gpus))
	for i, g := range gpus {
		ids[i] = gpuid.GPU{UUID: g.UUID, BusID: g.PCIBusID}
	}
	m, ok := gpuid.MatchCUDA(d.UUID, d.PCIBusID, ids)
	if !ok {
		return "", d.UUID, false
	}
	g := gpus[m.GPU]
	if m.By == gpuid.ByBusID && strings.HasPrefix(d.UUID, "MIG-") {
		return g.GPU, d.UUID, true
	}
	return g.GPU, g.UUID, true
}
