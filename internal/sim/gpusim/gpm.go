package gpusim

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// gpmSample is the simulation's nvml.GpmSample: the device (and GPU
// instance) and sim time it was taken at.
type gpmSample struct {
	mock.GpmSample

	mu    sync.Mutex
	dev   *device
	inst  int // MIG instance index, -1 for the whole GPU
	t     float64
	taken bool
}

func (s *gpmSample) Get(d nvml.Device) nvml.Return { return d.GpmSampleGet(s) }

func (s *gpmSample) MigGet(d nvml.Device, gi int) nvml.Return { return d.GpmMigSampleGet(gi, s) }

func (s *gpmSample) Free() nvml.Return { return nvml.SUCCESS }

func (s *gpmSample) read() (dev *device, inst int, t float64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev, s.inst, s.t, s.taken
}

func (s *gpmSample) record(d *device, inst int, t float64) {
	s.mu.Lock()
	s.dev, s.inst, s.t, s.taken = d, inst, t, true
	s.mu.Unlock()
}

func (l *library) GpmSampleAlloc() (nvml.GpmSample, nvml.Return) {
	if !l.f.initialised() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	return &gpmSample{inst: -1}, nvml.SUCCESS
}

func (l *library) GpmSampleFree(s nvml.GpmSample) nvml.Return { return s.Free() }

func (d *device) GpmQueryDeviceSupport() (nvml.GpmSupport, nvml.Return) {
	if _, r := d.enter("GpmQueryDeviceSupport"); r != nvml.SUCCESS {
		return nvml.GpmSupport{}, r
	}
	s := nvml.GpmSupport{Version: 1}
	if d.spec.model.gpmSupported {
		s.IsSupportedDevice = 1
	}
	return s, nvml.SUCCESS
}

func (d *device) GpmSampleGet(s nvml.GpmSample) nvml.Return {
	t, r := d.enter("GpmSampleGet")
	if r != nvml.SUCCESS {
		return r
	}
	gs, ok := s.(*gpmSample)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.spec.model.gpmSupported {
		return nvml.ERROR_NOT_SUPPORTED
	}
	gs.record(d, -1, t)
	return nvml.SUCCESS
}

func (d *device) GpmMigSampleGet(gi int, s nvml.GpmSample) nvml.Return {
	t, r := d.enter("GpmMigSampleGet")
	if r != nvml.SUCCESS {
		return r
	}
	gs, ok := s.(*gpmSample)
	if !ok {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if !d.spec.model.gpmSupported {
		return nvml.ERROR_NOT_SUPPORTED
	}
	for _, m := range d.migDevices {
		if m.giID == gi {
			gs.record(d, m.idx, t)
			return nvml.SUCCESS
		}
	}
	return nvml.ERROR_INVALID_ARGUMENT
}

// gpmActivity is the mean activity over (t1, t2] from 20 midpoint samples:
// SM and memory-bandwidth utilisation (percent) and PCIe MiB/s; the
// activity at t1 when no sim time passed between the samples (a fleet whose
// Start is still ahead holds sim time at 0).
func (d *device) gpmActivity(inst int, t1, t2 float64) (sm, dram, tx, rx float64) {
	const n = 20
	for i := 0; i < n; i++ {
		t := t1 + (t2-t1)*(float64(i)+0.5)/n
		if inst >= 0 {
			s, m, _ := d.tenantLoad(t, inst)
			sm += min(s, 100)
			dram += min(m, 100)
		} else {
			sm += d.utilPct(t)
			dram += d.memUtilPct(t)
		}
		tx += d.pcieMiBs(t, false)
		rx += d.pcieMiBs(t, true)
	}
	return sm / n, dram / n, tx / n, rx / n
}

// GpmMetricsGet computes metrics between two samples of the same device (or
// instance): GRAPHICS_UTIL and SM_UTIL are the mean SM utilisation,
// SM_OCCUPANCY 0.6 and ANY_TENSOR_UTIL 0.45 of it, DRAM_BW_UTIL the mean
// memory-bandwidth utilisation (all percent), PCIE_TX/RX_PER_SEC in MiB/s.
// Other metric ids get ERROR_NOT_SUPPORTED in their NvmlReturn.
func (l *library) GpmMetricsGet(m *nvml.GpmMetricsGetType) nvml.Return {
	if !l.f.initialised() {
		return nvml.ERROR_UNINITIALIZED
	}
	if m == nil || m.Version != nvml.GPM_METRICS_GET_VERSION || int(m.NumMetrics) > len(m.Metrics) {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	s1, ok1 := m.Sample1.(*gpmSample)
	s2, ok2 := m.Sample2.(*gpmSample)
	if !ok1 || !ok2 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	d1, i1, t1, ok1 := s1.read()
	d2, i2, t2, ok2 := s2.read()
	if !ok1 || !ok2 || d1 != d2 || i1 != i2 || t2 < t1 {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	sm, dram, tx, rx := d1.gpmActivity(i1, t1, t2)
	for i := 0; i < int(m.NumMetrics); i++ {
		mt := &m.Metrics[i]
		mt.NvmlReturn = uint32(nvml.SUCCESS)
		switch nvml.GpmMetricId(mt.MetricId) {
		case nvml.GPM_METRIC_GRAPHICS_UTIL, nvml.GPM_METRIC_SM_UTIL:
			mt.Value = sm
		case nvml.GPM_METRIC_SM_OCCUPANCY:
			mt.Value = 0.6 * sm
		case nvml.GPM_METRIC_ANY_TENSOR_UTIL:
			mt.Value = 0.45 * sm
		case nvml.GPM_METRIC_DRAM_BW_UTIL:
			mt.Value = dram
		case nvml.GPM_METRIC_PCIE_TX_PER_SEC:
			mt.Value = tx
		case nvml.GPM_METRIC_PCIE_RX_PER_SEC:
			mt.Value = rx
		default:
			mt.Value = 0
			mt.NvmlReturn = uint32(nvml.ERROR_NOT_SUPPORTED)
		}
	}
	return nvml.SUCCESS
}
