package main

import (
	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/gpusim"
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
