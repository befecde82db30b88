package gpusim

import (
	"math"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// The tenant's view: what the CUDA probe (internal/gpuprobe) measures on a
// simulated GPU. A device group's `probe:` section describes what NVML
// cannot show a tenant inside a VM or a container: a neighbour time-sliced
// on the same GPU, and (optionally) a slowdown of the figures.

type rawProbe struct {
	Neighbour *rawNeighbour    `yaml:"neighbour"`
	Slowdown  *float64         `yaml:"slowdown"`
	Tenants   *rawProbeTenants `yaml:"tenants"`
}

type rawNeighbour struct {
	Share  *float64 `yaml:"share"`
	Slice  string   `yaml:"slice"`
	Start  string   `yaml:"start"`
	Active string   `yaml:"active"`
	Every  string   `yaml:"every"`
}

// probeSpec is a device group's validated probe section.
type probeSpec struct {
	slowdown  float64 // 0: derived from the power limit and the temperature
	neighbour *neighbourSpec
	tenants   *probeTenantsSpec // the tenants' slice; nil: the default
}

// neighbourSpec is another context time-sliced with the probe's, invisible
// to NVML. Times are seconds of sim time.
type neighbourSpec struct {
	share                float64 // of the GPU's time while active
	slice                time.Duration
	start, active, every float64 // active 0: from start on; every 0: once
}

// Limits of a neighbour.
const (
	maxNeighbourShare  = 0.95
	defaultSlice       = 2 * time.Millisecond
	minSlice, maxSlice = 50 * time.Microsecond, time.Second
)

func validateProbe(l *errList, path string, r *rawProbe) probeSpec {
	var ps probeSpec
	if r == nil {
		return ps
	}
	if r.Slowdown != nil {
		if v := *r.Slowdown; !finite(v) || v <= 0 || v > 1 {
			l.add(path+".slowdown", "slowdown %v must be above 0 and at most 1 (the fraction of the model's figures delivered)", v)
		} else {
			ps.slowdown = v
		}
	}
	ps.tenants = validateProbeTenants(l, path+".tenants", r.Tenants)
	if r.Neighbour == nil {
		return ps
	}
	n, np := r.Neighbour, path+".neighbour"
	// On any error Parse returns no scenario: ns need not be consistent then.
	ns := &neighbourSpec{}
	switch {
	case n.Share == nil:
		l.add(np+".share", "missing share (the neighbour's share of the GPU's time while active, e.g. 0.5)")
	case !finite(*n.Share) || *n.Share <= 0 || *n.Share > maxNeighbourShare:
		l.add(np+".share", "share %v must be above 0 and at most %v", *n.Share, maxNeighbourShare)
	default:
		ns.share = *n.Share
	}
	before := len(l.errs)
	ns.slice = parseDuration(l, np+".slice", n.Slice, defaultSlice)
	if len(l.errs) == before && (ns.slice < minSlice || ns.slice > maxSlice) {
		l.add(np+".slice", "slice %s must be between %s and %s", n.Slice, minSlice, maxSlice)
	}
	ns.start = secs(parseDuration(l, np+".start", n.Start, 0))
	before = len(l.errs)
	active := parseDuration(l, np+".active", n.Active, 0)
	if n.Active != "" && len(l.errs) == before && active < time.Second {
		l.add(np+".active", "active %s must be at least 1s", n.Active)
	}
	ns.active = secs(active)
	if n.Every != "" {
		every := parseDuration(l, np+".every", n.Every, 0)
		switch {
		case n.Active == "":
			l.add(np+".every", "every needs active: the neighbour runs for active, then again every period")
		case every < active || every < time.Second:
			l.add(np+".every", "every %s must be at least active (%s) and 1s", n.Every, n.Active)
		}
		ns.every = secs(every)
	}
	ps.neighbour = ns
	return ps
}

// at is the neighbour's share of the GPU's time and its time slice at sim
// time t (0, 0 when it is not running).
func (n *neighbourSpec) at(t float64) (float64, time.Duration) {
	if n == nil || t < n.start {
		return 0, 0
	}
	local := t - n.start
	if n.every > 0 {
		local -= math.Floor(local/n.every) * n.every
	}
	if n.active > 0 && local >= n.active {
		return 0, 0
	}
	return n.share, n.slice
}

// probeSlowdown is the fraction of the model's probe figures the device
// delivers at sim time t: probe.slowdown when the scenario sets it, else
// the SM clock ratio under the probe's full load relative to a board at its
// default limit (whose figures the model's already are):
// capFactor(TDP) for the power limit, times 0.9 while the GPU is at or above
// its slowdown temperature, the same rules as GetClockInfo's.
func (d *device) probeSlowdown(t float64) float64 {
	if s := d.spec.probe.slowdown; s > 0 {
		return s
	}
	m := d.spec.model
	f := d.capFactor(m.tdpW)
	if float64(d.tempRounded(t)) >= m.slowdownC {
		f *= 0.9
	}
	return f
}

// ProbeDriver returns a simulated CUDA driver over the fleet's GPUs, for
// gpuprobe.New: the tenant's view of the same devices NVML shows. Each GPU
// is one CUDA device with its NVML UUID and PCI bus id, its model's probe
// figures (H2D/D2H scaled by the current PCIe link), the memory NVML shows
// less the driver's reservation (a vGPU guest's profile), the memory of the
// scenario's tenants as used by others, the slowdown of probeSlowdown and
// the scenario's invisible neighbour, all evaluated on the fleet's clock. A
// GPU in MIG mode is one CUDA device per MIG instance (MIG UUID, the
// instance's memory and multiprocessors; compute and device-memory figures
// scaled by the instance's share of the SMs and of the memory); like CUDA,
// the driver shows one process a single MIG instance, the first
// (simdriver.Visible). Compute modes, other processes' contexts, the
// context's own memory and the L2 size: computemode.go. Lost GPUs still
// answer the probe.
func (f *Fleet) ProbeDriver() gpuprobe.Driver { return f.ProbeDriverVisible("") }

// ProbeDriverVisible is ProbeDriver for a process whose
// CUDA_VISIBLE_DEVICES is visible ("": every device): the devices it names
// (UUIDs, "MIG-…" ones included, or indices), in its order, and at most one
// MIG instance, the first it names, as CUDA enumerates them. A probe child
// given CUDA_VISIBLE_DEVICES=MIG-<uuid> sees that instance alone.
func (f *Fleet) ProbeDriverVisible(visible string) gpuprobe.Driver {
	return simdriver.New(f.probeDevices(), simdriver.Options{
		Now:            f.now,
		Seed:           int64(f.seed),
		DriverVersion:  f.sc.cudaVersion,
		VisibleDevices: visible,
		Lag:            f.lags.tracker(),
	})
}

func (f *Fleet) probeDevices() []simdriver.Device {
	var out []simdriver.Device
	for _, d := range f.devices {
		base := d.probeDevice()
		if len(d.migDevices) == 0 {
			base.UsedByOthers = func(t time.Time) uint64 { return d.memory(f.simSeconds(t)).Used }
			d.withProbeSafety(&base, nil)
			out = append(out, base)
			continue
		}
		pf := d.spec.model.probe
		for _, md := range d.migDevices {
			c := base
			smShare := float64(md.prof.sms) / float64(pf.sms)
			memShare := float64(md.prof.memoryMiB) / float64(d.spec.model.cfg.MemoryMB)
			c.Name = d.spec.model.cfg.Name + " MIG " + md.prof.name
			c.UUID = md.uuid
			c.SMs = md.prof.sms
			c.TotalMemoryBytes = md.prof.memoryMiB * mib
			c.MemoryBusWidthBit = int(math.Round(float64(pf.memBusWidthBit) * memShare))
			c.DeviceCopyBytesPerSecond *= memShare
			c.FP32FLOPS *= smShare
			c.FP16TensorFLOPS *= smShare
			c.BF16TensorFLOPS *= smShare
			c.UsedByOthers = func(t time.Time) uint64 { return md.memory(f.simSeconds(t)).Used }
			c.Neighbour = d.probeNeighbour(md.idx)
			c.Kernel = nil // NVML has no per-process samples in MIG mode
			d.withProbeSafety(&c, md)
			c.Context = d.probeContext(md.idx)
			out = append(out, c)
		}
	}
	return out
}

// probeDevice is the whole GPU as CUDA sees it, without UsedByOthers.
func (d *device) probeDevice() simdriver.Device {
	f, m := d.f, d.spec.model
	pf := m.probe
	link := d.spec.linkScale()
	dev := simdriver.Device{
		Name:                     m.cfg.Name,
		UUID:                     d.uuid,
		PCIBusID:                 d.busID,
		CCMajor:                  m.cfg.CudaMajor,
		CCMinor:                  m.cfg.CudaMinor,
		SMs:                      pf.sms,
		TotalMemoryBytes:         (d.spec.totalMiB() - d.spec.reservedMiB()) * mib,
		ClockRateKHz:             int(m.smMaxMHz * 1000),
		MemoryClockKHz:           int(m.memMaxMHz * 1000),
		MemoryBusWidthBit:        pf.memBusWidthBit,
		H2DBytesPerSecond:        pf.h2dGBs * 1e9 * link,
		D2HBytesPerSecond:        pf.d2hGBs * 1e9 * link,
		DeviceCopyBytesPerSecond: pf.copyGBs * 1e9,
		FP32FLOPS:                pf.fp32TFLOPS * 1e12,
		FP16TensorFLOPS:          pf.fp16TFLOPS * 1e12,
		BF16TensorFLOPS:          pf.bf16TFLOPS * 1e12,
		LaunchLatency:            pf.launch,
		TimerResolution:          pf.timerRes,
		Slowdown:                 func(t time.Time) float64 { return d.probeSlowdown(f.simSeconds(t)) },
	}
	dev.Neighbour = d.probeNeighbour(-1)
	dev.Context = d.probeContext(-1)
	dev.Kernel = d.probeKernel
	return dev
}
