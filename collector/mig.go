package collector

import (
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// noInstance is the instance id NVML reports outside MIG.
const noInstance = 0xFFFFFFFF

var (
	migInfoDesc = desc("mig", "instance_info",
		"MIG instance (one GPU instance and compute instance) of a GPU in MIG mode, value 1. profile is the GPU-instance profile (1g.10gb).",
		"mig_uuid", "gpu_instance_id", "compute_instance_id", "profile")
	migMemTotalDesc = desc("mig", "memory_total_bytes", "Memory of the MIG instance (nvmlDeviceGetMemoryInfo_v2 on the MIG device handle).",
		"mig_uuid", "gpu_instance_id", "compute_instance_id")
	migMemUsedDesc = desc("mig", "memory_used_bytes", "Memory used in the MIG instance (nvmlDeviceGetMemoryInfo_v2 used on the MIG device handle).",
		"mig_uuid", "gpu_instance_id", "compute_instance_id")
)

// migIdentity is the static identity of one MIG device handle.
type migIdentity struct {
	uuid    string
	gi, ci  int
	profile string
}

// migInstance is one MIG device as read in one cycle.
type migInstance struct {
	*migIdentity
	handle           nvml.Device
	memTotal, memUse uint64
	memOK            bool
}

// migReading is a GPU's MIG state in one cycle.
type migReading struct {
	modeKnown bool
	enabled   bool
	instances []*migInstance // by handle index
}

// byIDs returns the instance with the GPU and compute instance ids.
func (m *migReading) byIDs(gi, ci uint32) *migInstance {
	for _, in := range m.instances {
		if uint32(in.gi) == gi && uint32(in.ci) == ci {
			return in
		}
	}
	return nil
}

// migTracker enumerates MIG devices every cycle (instances can be created
// and destroyed at run time) and reads each handle's identity once.
type migTracker struct {
	byHandle map[nvml.Device]*migIdentity
}

func (t *migTracker) read(r *Reader) *migReading {
	out := &migReading{}
	cur, ret := callRet(r, "GetMigMode", func() (int, nvml.Return) {
		c, _, ret := r.Device.GetMigMode()
		return c, ret
	})
	if ret != nvml.SUCCESS {
		return out
	}
	out.modeKnown, out.enabled = true, cur == nvml.DEVICE_MIG_ENABLE
	if !out.enabled {
		clear(t.byHandle)
		return out
	}
	n, ok := Call(r, "GetMaxMigDeviceCount", r.Device.GetMaxMigDeviceCount)
	if !ok {
		return out
	}
	seen := make(map[nvml.Device]bool, n)
	for i := 0; i < n; i++ {
		h, ok := Call(r, "GetMigDeviceHandleByIndex", func() (nvml.Device, nvml.Return) {
			h, ret := r.Device.GetMigDeviceHandleByIndex(i)
			if ret == nvml.ERROR_NOT_FOUND {
				ret = nvml.ERROR_NOT_SUPPORTED // no instance at this index: absent, not an error
			}
			return h, ret
		})
		if !ok || h == nil {
			continue
		}
		id := t.byHandle[h]
		if id == nil {
			if id = readMIGIdentity(r, h); id == nil {
				continue
			}
			t.byHandle[h] = id
		}
		seen[h] = true
		in := &migInstance{migIdentity: id, handle: h}
		if m, ret := callRet(r, "GetMemoryInfo_v2", h.GetMemoryInfo_v2); ret == nvml.SUCCESS {
			in.memTotal, in.memUse, in.memOK = m.Total, m.Used, true
		} else if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
			if m, ok := Call(r, "GetMemoryInfo", h.GetMemoryInfo); ok {
				in.memTotal, in.memUse, in.memOK = m.Total, m.Used, true
			}
		}
		out.instances = append(out.instances, in)
	}
	for h := range t.byHandle {
		if !seen[h] {
			delete(t.byHandle, h)
		}
	}
	return out
}

func readMIGIdentity(r *Reader, h nvml.Device) *migIdentity {
	uuid, ok := Call(r, "GetUUID", h.GetUUID)
	if !ok {
		return nil
	}
	gi, ok := Call(r, "GetGpuInstanceId", h.GetGpuInstanceId)
	if !ok {
		return nil
	}
	ci, ok := Call(r, "GetComputeInstanceId", h.GetComputeInstanceId)
	if !ok {
		return nil
	}
	id := &migIdentity{uuid: uuid, gi: gi, ci: ci}
	if name, ok := Call(r, "GetName", h.GetName); ok {
		id.profile = migProfile(name)
	}
	return id
}

// migProfile extracts the profile from a MIG device name
// ("NVIDIA H100 80GB HBM3 MIG 1g.10gb" -> "1g.10gb").
func migProfile(name string) string {
	if i := strings.LastIndex(name, "MIG "); i >= 0 {
		return strings.TrimSpace(name[i+len("MIG "):])
	}
	return ""
}

// ---- collector ----

type migCollector struct{ describer }

func newMIGCollector() Collector {
	return migCollector{describer{migInfoDesc, migMemTotalDesc, migMemUsedDesc}}
}

func (migCollector) NewDevice(d Device) DeviceSampler { return &migSampler{st: d.state} }

type migSampler struct{ st *deviceState }

func (s *migSampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	if s.st == nil {
		return
	}
	m := s.st.migInstances(r)
	for _, in := range m.instances {
		gi, ci := strconv.Itoa(in.gi), strconv.Itoa(in.ci)
		e.Gauge(migInfoDesc, 1, in.uuid, gi, ci, in.profile)
		if in.memOK {
			e.Gauge(migMemTotalDesc, float64(in.memTotal), in.uuid, gi, ci)
			e.Gauge(migMemUsedDesc, float64(in.memUse), in.uuid, gi, ci)
		}
	}
}
