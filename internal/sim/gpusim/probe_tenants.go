package gpusim

import (
	"math"
	"slices"
	"time"
)

// The probe time-sliced with every busy context on its GPU, as on a real
// GPU without MPS or MIG: the CUDA time-slice scheduler gives each context
// with work queued a slice in turn. On a simulated GPU at sim time t the
// contexts beside the probe's are
//
//   - the scenario's invisible neighbour (probe.neighbour), which takes its
//     `share` of the GPU's time off the top while active (another VM under
//     a vGPU or hypervisor scheduler, or a context NVML does not list);
//   - every tenant NVML lists with SM activity (a utilisation sample above
//     0), MPS clients excepted: those run inside the MPS server's context
//     beside the probe's and never pause it;
//   - on a GPU without tenants whose utilisation signal is above 0, the
//     busy time NVML shows with nobody listed: one more context that NVML
//     cannot name (inside a VM or container that is somebody else).
//
// What the neighbour leaves is shared max-min fairly between the probe
// (which always has work queued while it measures) and the other contexts:
// a context that needs less than an equal turn (its SM utilisation, as a
// share of the GPU, is its demand) takes what it needs, and the rest is
// split evenly. So the probe's kernels get share p of the GPU, and the
// stolen-time kernel sees gaps of the tenants' slice (probe.tenants.slice,
// default 2 ms; the neighbour's own slice when it is alone) covering 1 − p
// of its window. On a MIG instance only the tenants of that instance count
// (and the neighbour). Utilisation samples do not change under the probe:
// the simulation keeps each tenant's own signal.

type rawProbeTenants struct {
	Slice string `yaml:"slice"`
}

type probeTenantsSpec struct {
	slice time.Duration // the gaps the probe sees while tenants run
}

func validateProbeTenants(l *errList, path string, r *rawProbeTenants) *probeTenantsSpec {
	ts := &probeTenantsSpec{slice: defaultSlice}
	if r == nil {
		return ts
	}
	before := len(l.errs)
	ts.slice = parseDuration(l, path+".slice", r.Slice, defaultSlice)
	if len(l.errs) == before && (ts.slice < minSlice || ts.slice > maxSlice) {
		l.add(path+".slice", "slice %s must be between %s and %s", r.Slice, minSlice, maxSlice)
	}
	return ts
}

// busyDemands lists the demands (shares of the GPU's, or of MIG instance
// inst's, time) of the contexts time-sliced with the probe at sim time t
// besides the invisible neighbour: the busy non-MPS tenants, or the busy
// time of a GPU without tenants.
func (d *device) busyDemands(t float64, inst int) []float64 {
	var out []float64
	if len(d.spec.tenants) == 0 {
		if inst < 0 && len(d.migDevices) == 0 {
			if u := math.Round(d.utilPct(t)); u > 0 {
				out = append(out, math.Min(u, 100)/100)
			}
		}
		return out
	}
	for _, ts := range d.spec.tenants {
		if ts.kind == ProcessMPS || (inst >= 0 && ts.migInstance != inst) {
			continue
		}
		if s := ts.at(t, d.key); s.active && math.Round(s.sm) > 0 {
			out = append(out, math.Min(s.sm, 100)/100)
		}
	}
	return out
}

// probeShareOf is the probe's share of capacity c when it takes turns with
// contexts of the given demands (max-min fair: the probe wants everything).
func probeShareOf(c float64, demands []float64) float64 {
	ds := slices.Clone(demands)
	slices.Sort(ds)
	n := len(ds) + 1
	for _, dm := range ds {
		fair := c / float64(n)
		if dm >= fair {
			break
		}
		c -= dm
		n--
	}
	return c / float64(n)
}

// probeNeighbour is the simulated CUDA device's Neighbour: the share of the
// GPU's time other contexts take from the probe at a time of the driver's
// clock, and the length of their slices. On the whole GPU (inst < 0) or
// MIG instance inst.
func (d *device) probeNeighbour(inst int) func(time.Time) (float64, time.Duration) {
	n, tn := d.spec.probe.neighbour, d.spec.probe.tenants
	if tn == nil {
		tn = &probeTenantsSpec{slice: defaultSlice}
	}
	f := d.f
	return func(at time.Time) (float64, time.Duration) {
		t := f.simSeconds(at)
		share, slice := n.at(t)
		ds := d.busyDemands(t, inst)
		if len(ds) == 0 {
			return share, slice
		}
		p := probeShareOf(1-share, ds)
		return math.Min(maxNeighbourShare, 1-p), tn.slice
	}
}
