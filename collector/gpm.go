package collector

import (
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
)

// gpmMetric is one GPM metric the collector reads, as a ratio.
type gpmMetric struct {
	id       nvml.GpmMetricId
	gpu, mig *prometheus.Desc
}

var migIDLabels = []string{"mig_uuid", "gpu_instance_id", "compute_instance_id"}

var gpmMetrics = []gpmMetric{
	{nvml.GPM_METRIC_SM_UTIL,
		desc("gpu", "sm_activity_ratio", "Fraction of SMs busy, averaged over the sampler interval (GPM NVML_GPM_METRIC_SM_UTIL / 100, between two samples one cycle apart)."),
		desc("mig", "sm_activity_ratio", "Fraction of the MIG instance's SMs busy over the sampler interval (GPM SM_UTIL of nvmlGpmMigSampleGet samples / 100).", migIDLabels...)},
	{nvml.GPM_METRIC_SM_OCCUPANCY,
		desc("gpu", "sm_occupancy_ratio", "Resident warps as a fraction of the SMs' maximum, averaged over the sampler interval (GPM SM_OCCUPANCY / 100)."),
		desc("mig", "sm_occupancy_ratio", "SM occupancy of the MIG instance over the sampler interval (GPM SM_OCCUPANCY / 100).", migIDLabels...)},
	{nvml.GPM_METRIC_ANY_TENSOR_UTIL,
		desc("gpu", "tensor_activity_ratio", "Fraction of time any tensor core pipe was active over the sampler interval (GPM ANY_TENSOR_UTIL / 100)."),
		desc("mig", "tensor_activity_ratio", "Tensor-core activity of the MIG instance over the sampler interval (GPM ANY_TENSOR_UTIL / 100).", migIDLabels...)},
	{nvml.GPM_METRIC_DRAM_BW_UTIL,
		desc("gpu", "dram_bandwidth_utilization_ratio", "DRAM bandwidth used as a fraction of the peak over the sampler interval (GPM DRAM_BW_UTIL / 100)."),
		desc("mig", "dram_bandwidth_utilization_ratio", "DRAM bandwidth of the MIG instance as a fraction of its peak over the sampler interval (GPM DRAM_BW_UTIL / 100).", migIDLabels...)},
	{nvml.GPM_METRIC_GRAPHICS_UTIL,
		desc("gpu", "graphics_activity_ratio", "Fraction of time the graphics engine was active over the sampler interval (GPM GRAPHICS_UTIL / 100)."),
		desc("mig", "graphics_activity_ratio", "Graphics-engine activity of the MIG instance over the sampler interval (GPM GRAPHICS_UTIL / 100).", migIDLabels...)},
}

var gpmSupportedDesc = desc("gpm", "supported", "1 when the GPU supports GPU Performance Monitoring (nvmlGpmQueryDeviceSupport; Hopper and newer), 0 when it does not (A100, A30: MIG instances then have memory series only).")

// gpmPCIeMetrics are read for the whole GPU only, for the pcie collector:
// PCIe traffic in MiB/s, averaged between the two samples.
var gpmPCIeMetrics = []nvml.GpmMetricId{nvml.GPM_METRIC_PCIE_TX_PER_SEC, nvml.GPM_METRIC_PCIE_RX_PER_SEC}

// gpmValues holds the ratios of gpmMetrics for one GPU or instance, then,
// for a GPU, the PCIe rates of gpmPCIeMetrics (MiB/s); ok[i] is false
// where the metric was not returned.
type gpmValues struct {
	v  [7]float64
	ok [7]bool
}

// gpmPair holds the two samples of one GPU or MIG instance: prev is the
// previous cycle's, cur is filled this cycle; they swap after each reading.
type gpmPair struct {
	prev, cur nvml.GpmSample
	havePrev  bool
	seen      bool // used this cycle
}

// gpmTracker allocates GPM samples once per GPU and per MIG instance and
// computes each cycle's metrics between the previous cycle's sample and
// this one's. Samples are freed when an instance disappears or the GPU is
// lost.
type gpmTracker struct {
	support int // 0 unknown, 1 supported, -1 not supported
	gpu     *gpmPair
	mig     map[int]*gpmPair // by GPU instance id
}

// gpmReading is a GPU's GPM metrics in one cycle.
type gpmReading struct {
	known, supported bool
	gpu              *gpmValues
	mig              map[int]*gpmValues // by GPU instance id
}

func (t *gpmTracker) read(r *Reader, lib nvml.Interface, mig *migReading) *gpmReading {
	out := &gpmReading{}
	if t.support == 0 {
		s, ret := callRet(r, "GpmQueryDeviceSupport", r.Device.GpmQueryDeviceSupport)
		switch {
		case ret == nvml.SUCCESS && s.IsSupportedDevice != 0:
			t.support = 1
		case ret == nvml.SUCCESS, ret == nvml.ERROR_NOT_SUPPORTED, ret == nvml.ERROR_FUNCTION_NOT_FOUND:
			t.support = -1
		default:
			return out // try again next cycle
		}
	}
	out.known, out.supported = true, t.support == 1
	if !out.supported {
		return out
	}
	if t.gpu == nil {
		t.gpu = allocPair(r, lib)
	}
	if t.gpu != nil {
		out.gpu = t.gpu.take(r, lib, func(s nvml.GpmSample) nvml.Return { return r.Device.GpmSampleGet(s) }, "GpmSampleGet", true)
	}
	if mig != nil && mig.enabled {
		out.mig = map[int]*gpmValues{}
		for _, p := range t.mig {
			p.seen = false
		}
		for _, in := range mig.instances {
			p := t.mig[in.gi]
			if p == nil {
				if p = allocPair(r, lib); p == nil {
					continue
				}
				t.mig[in.gi] = p
			}
			if p.seen {
				continue // several compute instances in one GPU instance: one GPM reading
			}
			p.seen = true
			gi := in.gi
			if v := p.take(r, lib, func(s nvml.GpmSample) nvml.Return { return r.Device.GpmMigSampleGet(gi, s) }, "GpmMigSampleGet", false); v != nil {
				out.mig[gi] = v
			}
		}
		for gi, p := range t.mig {
			if !p.seen {
				p.free(lib)
				delete(t.mig, gi)
			}
		}
	} else {
		t.freeMIG(lib)
	}
	if r.Lost() {
		t.release(lib)
	}
	return out
}

// release frees every sample (the GPU is lost; a new reading allocates
// again once it answers).
func (t *gpmTracker) release(lib nvml.Interface) {
	if t.gpu != nil {
		t.gpu.free(lib)
		t.gpu = nil
	}
	t.freeMIG(lib)
	t.support = 0
}

func (t *gpmTracker) freeMIG(lib nvml.Interface) {
	for gi, p := range t.mig {
		p.free(lib)
		delete(t.mig, gi)
	}
}

func allocPair(r *Reader, lib nvml.Interface) *gpmPair {
	a, ok := Call(r, "GpmSampleAlloc", lib.GpmSampleAlloc)
	if !ok {
		return nil
	}
	b, ok := Call(r, "GpmSampleAlloc", lib.GpmSampleAlloc)
	if !ok {
		_ = lib.GpmSampleFree(a)
		return nil
	}
	return &gpmPair{prev: a, cur: b}
}

func (p *gpmPair) free(lib nvml.Interface) {
	_ = lib.GpmSampleFree(p.prev)
	_ = lib.GpmSampleFree(p.cur)
}

// take fills cur, computes the metrics between prev and cur when there is a
// previous sample, and swaps the two. withPCIe adds gpmPCIeMetrics.
func (p *gpmPair) take(r *Reader, lib nvml.Interface, get func(nvml.GpmSample) nvml.Return, name string, withPCIe bool) *gpmValues {
	if _, ok := Call(r, name, func() (struct{}, nvml.Return) { return struct{}{}, get(p.cur) }); !ok {
		p.havePrev = false
		return nil
	}
	var out *gpmValues
	if p.havePrev {
		n := len(gpmMetrics)
		m := &nvml.GpmMetricsGetType{Version: nvml.GPM_METRICS_GET_VERSION, Sample1: p.prev, Sample2: p.cur}
		for i, gm := range gpmMetrics {
			m.Metrics[i].MetricId = uint32(gm.id)
		}
		if withPCIe {
			for i, id := range gpmPCIeMetrics {
				m.Metrics[n+i].MetricId = uint32(id)
			}
			n += len(gpmPCIeMetrics)
		}
		m.NumMetrics = uint32(n)
		if _, ok := Call(r, "GpmMetricsGet", func() (struct{}, nvml.Return) { return struct{}{}, lib.GpmMetricsGet(m) }); ok {
			out = &gpmValues{}
			for i := range n {
				if nvml.Return(m.Metrics[i].NvmlReturn) == nvml.SUCCESS {
					out.v[i], out.ok[i] = m.Metrics[i].Value, true
					if i < len(gpmMetrics) {
						out.v[i] /= 100 // percent
					}
				}
			}
		}
	}
	p.prev, p.cur, p.havePrev = p.cur, p.prev, true
	return out
}

// sm returns the SM activity ratio, if read.
func (v *gpmValues) sm() (float64, bool) { return v.v[0], v.ok[0] }

// dram returns the DRAM bandwidth utilisation ratio, if read.
func (v *gpmValues) dram() (float64, bool) { return v.v[3], v.ok[3] }

// pcie returns the GPU's PCIe transmit and receive rates in bytes/s, if
// both were read.
func (v *gpmValues) pcie() (tx, rx float64, ok bool) {
	i := len(gpmMetrics)
	return v.v[i] * (1 << 20), v.v[i+1] * (1 << 20), v.ok[i] && v.ok[i+1]
}

// ---- collector ----

type gpmCollector struct{ describer }

func newGPMCollector() Collector {
	d := describer{gpmSupportedDesc}
	for _, m := range gpmMetrics {
		d = append(d, m.gpu, m.mig)
	}
	return gpmCollector{d}
}

func (gpmCollector) NewDevice(d Device) DeviceSampler {
	if d.state != nil {
		d.state.gpmEnabled = true // the pcie collector may read GPM too
	}
	return &gpmSampler{st: d.state}
}

type gpmSampler struct{ st *deviceState }

func (s *gpmSampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	if s.st == nil {
		return
	}
	g := s.st.gpmMetrics(r)
	if !g.known {
		return
	}
	e.Bool(gpmSupportedDesc, g.supported)
	if g.gpu != nil {
		for i, m := range gpmMetrics {
			if g.gpu.ok[i] {
				e.Gauge(m.gpu, g.gpu.v[i])
			}
		}
	}
	if len(g.mig) == 0 {
		return
	}
	for _, in := range s.st.migInstances(r).instances {
		v := g.mig[in.gi]
		if v == nil {
			continue
		}
		gi, ci := strconv.Itoa(in.gi), strconv.Itoa(in.ci)
		for i, m := range gpmMetrics {
			if v.ok[i] {
				e.Gauge(m.mig, v.v[i], in.uuid, gi, ci)
			}
		}
	}
}
