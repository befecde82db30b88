package gpusim

import (
	"math"
	"time"
)

// The probe time-sliced with the scenario's own tenants. A device group's
// `probe: {tenants: {slice: 2ms}}` says that the probe's CUDA context shares
// the GPU's time with the tenants NVML shows on it, as it does on a real GPU
// without MPS or MIG: while k tenants run with SM activity, the probe is one
// of k + 1 contexts taking turns, so its kernels get 1/(k+1) of the GPU and
// the stolen-time kernel sees gaps of `slice` covering k/(k+1) of its window.
// This is what a tenant measures beside processes it can see (a workload of
// its own, or neighbours on a host where NVML lists them): the host's view
// (NVML: how many processes, their time shares) and the tenant's view
// (stolen time) then describe the same contention. Every such tenant is
// taken to have work queued all the time (a training or benchmark loop), so
// its own utilisation figure does not change its share. Without the section
// (every other scenario) tenants take none of the probe's time: they stand
// for work in the same container or VM as the probe, or for an idle server.

type rawProbeTenants struct {
	Slice string `yaml:"slice"`
}

type probeTenantsSpec struct {
	slice time.Duration // the gaps the probe sees while a tenant runs
}

func validateProbeTenants(l *errList, path string, r *rawProbeTenants) *probeTenantsSpec {
	if r == nil {
		return nil
	}
	ts := &probeTenantsSpec{}
	before := len(l.errs)
	ts.slice = parseDuration(l, path+".slice", r.Slice, defaultSlice)
	if len(l.errs) == before && (ts.slice < minSlice || ts.slice > maxSlice) {
		l.add(path+".slice", "slice %s must be between %s and %s", r.Slice, minSlice, maxSlice)
	}
	return ts
}

// busyTenants counts the tenants running on the device at sim time t with
// SM activity (a utilisation sample NVML would report above 0): on the
// whole GPU (inst < 0) or on MIG instance inst.
func (d *device) busyTenants(t float64, inst int) int {
	n := 0
	for _, ts := range d.spec.tenants {
		if inst >= 0 && ts.migInstance != inst {
			continue
		}
		if s := ts.at(t, d.key); s.active && math.Round(s.sm) > 0 {
			n++
		}
	}
	return n
}

// probeNeighbour is the simulated CUDA device's Neighbour: the share of the
// GPU's time other contexts take from the probe at a time of the driver's
// clock, and their time slice. On the whole GPU (inst < 0) or MIG instance
// inst (whose contexts are time-sliced with that instance's tenants only;
// the scenario's invisible neighbour applies to every instance). The
// invisible neighbour takes its share; with probe.tenants, what is left is
// split evenly between the probe and the busy tenants. Nil when the scenario
// gives the probe nobody to share with.
func (d *device) probeNeighbour(inst int) func(time.Time) (float64, time.Duration) {
	n, tn := d.spec.probe.neighbour, d.spec.probe.tenants
	if n == nil && tn == nil {
		return nil
	}
	f := d.f
	return func(at time.Time) (float64, time.Duration) {
		t := f.simSeconds(at)
		share, slice := n.at(t)
		if tn == nil {
			return share, slice
		}
		k := d.busyTenants(t, inst)
		if k == 0 {
			return share, slice
		}
		return math.Min(maxNeighbourShare, 1-(1-share)/float64(k+1)), tn.slice
	}
}
