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
//   - every tenant NVML lists with SM activity (a utilisation above 0),
//     MPS clients excepted: their work runs in the MPS server's one
//     context, which takes turns with the probe's (not an MPS client)
//     like any other, with the clients' total demand;
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
// (and the neighbour). While the probe's kernels run, each context gets
// only its turn: a tenant's NVML utilisation is then its share, not its
// demand (procutil.go).

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

// sharing is who takes turns on a GPU (or MIG instance) at one instant:
// the running tenants, the busy contexts time-sliced with the probe's
// besides the invisible neighbour (each with its demand, a share of the
// GPU's time), and the neighbour.
type sharing struct {
	tenants   []tenantActivity
	demands   []float64
	neighbour float64       // the invisible neighbour's share (0: none)
	slice     time.Duration // its slice
}

// tenantActivity is a running tenant at one instant and the context its
// work runs in: an index into sharing.demands, or -1 when it has no SM
// activity (or is the MPS server's own process, whose work is its
// clients').
type tenantActivity struct {
	ts  *tenantSpec
	s   sample
	ctx int
}

// sharingAt fills sh for the whole GPU (inst < 0) or MIG instance inst at
// sim time t. The contexts are each busy tenant's own (a utilisation above
// 0 rounded; MPS clients excepted), the MPS server's, whose demand is its
// busy clients' total (capped at the whole GPU: their work runs in the
// server's one context, whether or not the scenario lists the server's
// process), and, on a whole GPU without tenants, the busy time NVML shows
// with nobody listed.
func (d *device) sharingAt(t float64, inst int, sh *sharing) {
	sh.tenants, sh.demands = sh.tenants[:0], sh.demands[:0]
	sh.neighbour, sh.slice = d.spec.probe.neighbour.at(t)
	if len(d.spec.tenants) == 0 {
		if inst < 0 && len(d.migDevices) == 0 {
			if u := math.Round(d.utilPct(t)); u > 0 {
				sh.demands = append(sh.demands, math.Min(u, 100)/100)
			}
		}
		return
	}
	mps := -1
	for _, ts := range d.spec.tenants {
		if inst >= 0 && ts.migInstance != inst {
			continue
		}
		s := ts.at(t, d.key)
		if !s.active {
			continue
		}
		ta := tenantActivity{ts: ts, s: s, ctx: -1}
		if ts.kind != ProcessMPSServer && math.Round(s.sm) > 0 {
			dm := math.Min(s.sm, 100) / 100
			switch {
			case ts.kind != ProcessMPS:
				ta.ctx = len(sh.demands)
				sh.demands = append(sh.demands, dm)
			case mps < 0:
				mps = len(sh.demands)
				ta.ctx = mps
				sh.demands = append(sh.demands, dm)
			default:
				ta.ctx = mps
				sh.demands[mps] = math.Min(1, sh.demands[mps]+dm)
			}
		}
		sh.tenants = append(sh.tenants, ta)
	}
}

// busyDemands lists the demands (shares of the GPU's, or of MIG instance
// inst's, time) of the contexts time-sliced with the probe at sim time t
// besides the invisible neighbour (sharingAt).
func (d *device) busyDemands(t float64, inst int) []float64 {
	var sh sharing
	d.sharingAt(t, inst, &sh)
	return sh.demands
}

// probeShare is the probe's share of the GPU's time while its kernels run
// in the sharing sh, as the simulated driver gives it (probeNeighbour):
// the max-min fair level of what the neighbour leaves, at least
// 1 − maxNeighbourShare beside busy contexts.
func (sh *sharing) probeShare() float64 {
	if len(sh.demands) == 0 {
		return 1 - math.Min(sh.neighbour, 0.99)
	}
	return 1 - math.Min(maxNeighbourShare, 1-probeShareOf(1-sh.neighbour, sh.demands))
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
		ds := d.busyDemands(t, inst)
		if len(ds) == 0 {
			return n.at(t)
		}
		share, _ := n.at(t)
		p := probeShareOf(1-share, ds)
		return math.Min(maxNeighbourShare, 1-p), tn.slice
	}
}
