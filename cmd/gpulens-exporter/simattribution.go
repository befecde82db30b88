package main

import (
	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// simAttributor names a simulated process and its pod from the scenario's
// tenants, standing in for procfs, cgroups and the kubelet.
type simAttributor struct{ fleet *gpusim.Fleet }

func (a simAttributor) Attribute(pid uint32) collector.Attribution {
	for _, p := range a.fleet.Processes() {
		if p.PID == pid {
			at := collector.Attribution{
				Namespace: p.Namespace, Pod: p.Pod, Container: p.Container,
				ProcessName: p.Name, Cmdline: p.Name, User: "1000",
			}
			if p.Pod != "" {
				at.Runtime = "containerd"
			}
			return at
		}
	}
	return collector.Attribution{}
}

// simAllocations answers like the kubelet's pod-resources API for the pods
// of the simulated tenants running now.
type simAllocations struct{ fleet *gpusim.Fleet }

func (a simAllocations) Lookup(deviceIDs ...string) []collector.Allocation {
	var out []collector.Allocation
	seen := map[collector.Allocation]bool{}
	for _, p := range a.fleet.Processes() {
		if p.Pod == "" {
			continue
		}
		for _, id := range deviceIDs {
			al := collector.Allocation{Namespace: p.Namespace, Pod: p.Pod, Container: p.Container, DeviceID: p.GPUUUID}
			if p.GPUUUID == id && !seen[al] {
				seen[al] = true
				out = append(out, al)
			}
		}
	}
	return out
}

// simUsage answers for procfs's /proc/PID/stat and /proc/PID/io of the
// simulated tenants (their scenario `host` sections).
type simUsage struct{ fleet *gpusim.Fleet }

func (s simUsage) ProcessUsage(pid uint32) (collector.ProcessUsage, bool) {
	u, ok := s.fleet.ProcessUsage(pid)
	if !ok {
		return collector.ProcessUsage{}, false
	}
	return collector.ProcessUsage{
		UserSeconds: u.UserSeconds, SystemSeconds: u.SystemSeconds,
		Threads: uint64(u.Threads), ResidentBytes: u.ResidentBytes,
		IO: u.IOReadable, ReadBytes: u.ReadBytes, WrittenBytes: u.WrittenBytes,
	}, true
}

// simHost answers for /proc/pressure and /proc/stat's CPU count of the
// simulated host (the scenario's `host` section).
type simHost struct{ fleet *gpusim.Fleet }

func (s simHost) ReadHost(h *collector.HostReading) {
	h.CPUs = s.fleet.HostCPUs()
	for _, p := range s.fleet.HostPressure() {
		for i, res := range collector.PressureResources {
			if res == p.Resource {
				h.Pressure[i] = collector.Pressure{Some: p.Some, Full: p.Full, HasSome: p.HasSome, HasFull: p.HasFull}
			}
		}
	}
}
