// Package collector samples NVIDIA GPUs through NVML in the background and
// serves the latest immutable snapshot as Prometheus metrics. The scrape path
// never calls NVML: a hung or slow GPU cannot slow a scrape down or take the
// other GPUs' metrics with it.
package collector

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const namespace = "gpulens"

// Device identifies one GPU to the collectors.
type Device struct {
	Index    int
	UUID     string
	Name     string
	PCIBusID string
	Serial   string
	VBIOS    string

	// state is shared by every collector of this GPU: readings that several
	// collectors need (process list and samples, MIG instances, GPM samples)
	// are taken once per cycle through it. Nil outside a Sampler.
	state *deviceState
}

// Collector samples one capability of every GPU. NewDevice is called once per
// GPU, after its identity was read; the DeviceSampler it returns runs only on
// that GPU's sampler goroutine, so it may keep state between cycles (previous
// values to integrate) without locking.
type Collector interface {
	Describe(ch chan<- *prometheus.Desc)
	NewDevice(d Device) DeviceSampler
}

// DeviceSampler reads one GPU through r and emits its metrics through e. It
// must not keep references to r or e after returning.
type DeviceSampler interface {
	Sample(r *Reader, e *Emitter, now time.Time)
}

// Factory describes a collector that can be switched on and off with
// --collector.NAME / --no-collector.NAME.
type Factory struct {
	Name           string
	Help           string
	DefaultEnabled bool
	New            func() Collector
}

// Factories lists every per-device collector in the order its metrics are
// rendered.
func Factories() []Factory {
	return []Factory{
		{Name: "memory", Help: "Framebuffer memory: total, used, free, reserved.", DefaultEnabled: true, New: newMemoryCollector},
		{Name: "utilization", Help: "GPU, memory-bandwidth, encoder and decoder utilisation, and the integrated busy-time counter.", DefaultEnabled: true, New: newUtilizationCollector},
		{Name: "power", Help: "Power draw and limit, energy counter, temperature, fan speed.", DefaultEnabled: true, New: newPowerCollector},
		{Name: "clocks", Help: "Current and maximum clocks and active clock-event (throttle) reasons.", DefaultEnabled: true, New: newClocksCollector},
		{Name: "pcie", Help: "PCIe throughput and replay errors.", DefaultEnabled: true, New: newPCIeCollector},
		{Name: "ecc", Help: "ECC error counters and row remapping state.", DefaultEnabled: true, New: newECCCollector},
		{Name: "mode", Help: "Persistence mode, compute mode and MIG mode.", DefaultEnabled: true, New: newModeCollector},
		{Name: "process", Help: "Per-process GPU memory and utilisation, with container and pod attribution and pod allocations.", DefaultEnabled: true, New: newProcessCollector},
		{Name: "mig", Help: "MIG GPU and compute instances: identity and memory.", DefaultEnabled: true, New: newMIGCollector},
		{Name: "gpm", Help: "GPU Performance Monitoring (Hopper and newer): SM activity and occupancy, tensor, DRAM and graphics activity per GPU and per MIG instance.", DefaultEnabled: true, New: newGPMCollector},
		{Name: "contention", Help: "Sharing mode, active processes, contention ratio, per-process time shares and MIG instance saturation.", DefaultEnabled: true, New: newContentionCollector},
	}
}

// XIDFactoryName is the name of the event-driven XID collector, switched like
// the others with --collector.xid.
const XIDFactoryName = "xid"

func desc(subsystem, name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(
		prometheus.BuildFQName(namespace, subsystem, name), help,
		append([]string{"gpu", "uuid"}, labels...), nil)
}
