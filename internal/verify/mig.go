package verify

import (
	"context"
	"fmt"
	"slices"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// Every MIG instance measured: CUDA enumerates one MIG instance per
// process, so gpulens-verify reaches each other instance NVML lists through
// a child process of its own (Sources.Instances: gpuprobe.ChildProber, this
// program with CUDA_VISIBLE_DEVICES=MIG-<uuid>), in turn with the devices
// CUDA shows, under the same deadline, budget and safety checks (the child
// reads the compute mode before any context and gets NVML's free memory
// from this process).

// InstanceProber probes a MIG instance this process's CUDA does not show,
// by its MIG UUID (*gpuprobe.ChildProber).
type InstanceProber interface {
	ProbeInstance(ctx context.Context, uuid string, cfg gpuprobe.Config) (gpuprobe.Result, error)
}

// addHiddenMIG appends a device for every MIG instance NVML lists that no
// CUDA device of this process is, to be probed by a child (when
// instances is set, and --devices does not limit the report to CUDA
// ordinals). Their CUDA facts come with their first probe.
func addHiddenMIG(devices []Device, handles []nvml.Device, host *NVMLHost, nvmlHandles []nvml.Device, instances InstanceProber, want []int) ([]Device, []nvml.Device) {
	if instances == nil || host == nil || len(want) > 0 {
		return devices, handles
	}
	seen := map[string]bool{}
	for _, d := range devices {
		if d.CUDA != nil {
			seen[d.CUDA.UUID] = true
		}
	}
	for gi, g := range host.GPUs {
		for _, m := range g.MIGInstances {
			if m.UUID == "" || seen[m.UUID] {
				continue
			}
			facts, inst := g, m
			d := Device{Label: fmt.Sprintf("NVML GPU %d MIG %s (GPU instance %d)", gi, m.Profile, m.GPUInstanceID), Name: m.Name, UUID: m.UUID,
				PCIBusID: g.PCIBusID, NVML: &facts, MatchedBy: "mig_uuid", MIG: &inst, ProbeChild: true}
			var h nvml.Device
			if gi < len(nvmlHandles) {
				h = nvmlHandles[gi]
			}
			devices = append(devices, d)
			handles = append(handles, h)
		}
	}
	return devices, handles
}

// deviceProber is how d is probed: by this process's prober at its CUDA
// ordinal, or by a child; ok false when it cannot be.
func deviceProber(d *Device, prober gpuprobe.Prober, instances InstanceProber) (p gpuprobe.Prober, ordinal int, ok bool) {
	switch {
	case d.ProbeChild && instances != nil:
		return childProber{instances, d.UUID}, 0, true
	case d.CUDA != nil && !d.ProbeChild:
		return prober, d.CUDA.Ordinal, true
	}
	return nil, 0, false
}

// noteChild fills a child-probed device's CUDA facts from its first
// result that has them (the device as the child sees it: ordinal 0).
func noteChild(d *Device, run ProbeRun) {
	if d.ProbeChild && d.CUDA == nil && run.Result != nil && run.Result.Device.UUID != "" {
		info := run.Result.Device
		d.CUDA = &info
	}
}

// childProber probes one MIG instance through an InstanceProber, as a
// gpuprobe.Prober (the ordinal is ignored: the child sees only it).
type childProber struct {
	p    InstanceProber
	uuid string
}

func (c childProber) Devices(context.Context) ([]gpuprobe.DeviceInfo, error) {
	return nil, fmt.Errorf("verify: the device list of a MIG instance probed by a child is not known")
}

func (c childProber) Probe(ctx context.Context, _ int, cfg gpuprobe.Config) (gpuprobe.Result, error) {
	return c.p.ProbeInstance(ctx, c.uuid, cfg)
}

// childDevices counts the devices reached through children that a child
// has seen (for the device count).
func childDevices(devs []Device) int {
	return len(slices.DeleteFunc(slices.Clone(devs), func(d Device) bool { return !d.ProbeChild || d.CUDA == nil }))
}
