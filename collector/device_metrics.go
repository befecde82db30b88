package collector

import (
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/clockevent"
)

// describer implements Describe for collectors with a fixed set of descs.
type describer []*prometheus.Desc

func (d describer) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range d {
		ch <- x
	}
}

// ---- memory ----------------------------------------------------------------

var (
	memTotalDesc    = desc("gpu", "memory_total_bytes", "Total framebuffer memory of the GPU (NVML nvmlDeviceGetMemoryInfo_v2 total).")
	memUsedDesc     = desc("gpu", "memory_used_bytes", "Framebuffer memory allocated by processes and the driver (NVML memory info used).")
	memFreeDesc     = desc("gpu", "memory_free_bytes", "Framebuffer memory available for allocation (NVML memory info free).")
	memReservedDesc = desc("gpu", "memory_reserved_bytes", "Framebuffer memory reserved by the driver and firmware (NVML memory info v2 reserved).")
)

type memoryCollector struct{ describer }

func newMemoryCollector() Collector {
	return memoryCollector{describer{memTotalDesc, memUsedDesc, memFreeDesc, memReservedDesc}}
}

func (memoryCollector) NewDevice(Device) DeviceSampler { return &memorySampler{} }

type memorySampler struct{ v1Only bool }

func (s *memorySampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	if !s.v1Only {
		m, ret := callRet(r, "GetMemoryInfo_v2", r.Device.GetMemoryInfo_v2)
		switch {
		case ret == nvml.SUCCESS:
			e.Gauge(memTotalDesc, float64(m.Total))
			e.Gauge(memUsedDesc, float64(m.Used))
			e.Gauge(memFreeDesc, float64(m.Free))
			e.Gauge(memReservedDesc, float64(m.Reserved))
			return
		case ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND:
			s.v1Only = true // older driver: fall back to v1 for good
		default:
			return
		}
	}
	if m, ok := Call(r, "GetMemoryInfo", r.Device.GetMemoryInfo); ok {
		e.Gauge(memTotalDesc, float64(m.Total))
		e.Gauge(memUsedDesc, float64(m.Used))
		e.Gauge(memFreeDesc, float64(m.Free))
	}
}

// ---- utilisation -----------------------------------------------------------

var (
	utilGPUDesc  = desc("gpu", "utilization_ratio", "Fraction of the last NVML sample period (1/6 s to 1 s) during which a kernel ran on the GPU (nvmlDeviceGetUtilizationRates gpu / 100).")
	utilMemDesc  = desc("gpu", "memory_bandwidth_utilization_ratio", "Fraction of the last NVML sample period during which device memory was read or written (nvmlDeviceGetUtilizationRates memory / 100).")
	utilEncDesc  = desc("gpu", "encoder_utilization_ratio", "Video encoder utilisation (nvmlDeviceGetEncoderUtilization / 100).")
	utilDecDesc  = desc("gpu", "decoder_utilization_ratio", "Video decoder utilisation (nvmlDeviceGetDecoderUtilization / 100).")
	busySecsDesc = desc("gpu", "busy_seconds_total", "Seconds the GPU was busy, integrated by the sampler from every utilisation reading (trapezoidal rule); rate() gives the true mean utilisation over any window.")
)

type utilizationCollector struct{ describer }

func newUtilizationCollector() Collector {
	return utilizationCollector{describer{utilGPUDesc, utilMemDesc, utilEncDesc, utilDecDesc, busySecsDesc}}
}

func (utilizationCollector) NewDevice(Device) DeviceSampler { return &utilizationSampler{} }

// trapezoid integrates readings over time with the trapezoidal rule.
type trapezoid struct {
	total  float64
	last   float64   // previous reading
	lastAt time.Time // time of the previous reading; zero before the first
}

// add records a reading taken at now and returns the integral so far.
func (t *trapezoid) add(v float64, now time.Time) float64 {
	if !t.lastAt.IsZero() {
		if dt := now.Sub(t.lastAt).Seconds(); dt > 0 {
			t.total += (t.last + v) / 2 * dt
		}
	}
	t.last, t.lastAt = v, now
	return t.total
}

type utilizationSampler struct {
	busy trapezoid // utilisation ratio over time: busy seconds
}

func (s *utilizationSampler) Sample(r *Reader, e *Emitter, now time.Time) {
	if u, ok := Call(r, "GetUtilizationRates", r.Device.GetUtilizationRates); ok {
		g := float64(u.Gpu) / 100
		e.Gauge(utilGPUDesc, g)
		e.Gauge(utilMemDesc, float64(u.Memory)/100)
		e.Counter(busySecsDesc, s.busy.add(g, now))
	}
	if u, ok := Call(r, "GetEncoderUtilization", func() (uint32, nvml.Return) {
		v, _, ret := r.Device.GetEncoderUtilization()
		return v, ret
	}); ok {
		e.Gauge(utilEncDesc, float64(u)/100)
	}
	if u, ok := Call(r, "GetDecoderUtilization", func() (uint32, nvml.Return) {
		v, _, ret := r.Device.GetDecoderUtilization()
		return v, ret
	}); ok {
		e.Gauge(utilDecDesc, float64(u)/100)
	}
}

// ---- power, energy, temperature, fan --------------------------------------

var (
	powerDesc      = desc("gpu", "power_watts", "Power draw of the GPU board (nvmlDeviceGetPowerUsage mW / 1000).")
	powerLimitDesc = desc("gpu", "power_limit_watts", "Power limit the driver enforces (nvmlDeviceGetEnforcedPowerLimit mW / 1000).")
	energyDesc     = desc("gpu", "energy_joules_total", "Energy consumed since the driver loaded (nvmlDeviceGetTotalEnergyConsumption mJ / 1000); where unsupported, power integrated by the sampler since the exporter started.")
	tempDesc       = desc("gpu", "temperature_celsius", "GPU core temperature (nvmlDeviceGetTemperature NVML_TEMPERATURE_GPU).")
	fanDesc        = desc("gpu", "fan_speed_ratio", "Intended fan speed as a fraction of maximum (nvmlDeviceGetFanSpeed / 100); absent on passively cooled boards.")
)

type powerCollector struct{ describer }

func newPowerCollector() Collector {
	return powerCollector{describer{powerDesc, powerLimitDesc, energyDesc, tempDesc, fanDesc}}
}

func (powerCollector) NewDevice(Device) DeviceSampler { return &powerSampler{} }

type powerSampler struct {
	integrate bool      // energy counter unsupported: integrate power instead
	energy    trapezoid // watts over time: joules
}

func (s *powerSampler) Sample(r *Reader, e *Emitter, now time.Time) {
	mw, powerOK := Call(r, "GetPowerUsage", r.Device.GetPowerUsage)
	watts := float64(mw) / 1000
	if powerOK {
		e.Gauge(powerDesc, watts)
	}
	if mw, ok := Call(r, "GetEnforcedPowerLimit", r.Device.GetEnforcedPowerLimit); ok {
		e.Gauge(powerLimitDesc, float64(mw)/1000)
	}
	if !s.integrate {
		mj, ret := callRet(r, "GetTotalEnergyConsumption", r.Device.GetTotalEnergyConsumption)
		switch ret {
		case nvml.SUCCESS:
			e.Counter(energyDesc, float64(mj)/1000)
		case nvml.ERROR_NOT_SUPPORTED:
			s.integrate = true
		}
	}
	if s.integrate && powerOK {
		e.Counter(energyDesc, s.energy.add(watts, now))
	}
	if t, ok := Call(r, "GetTemperature", func() (uint32, nvml.Return) {
		return r.Device.GetTemperature(nvml.TEMPERATURE_GPU)
	}); ok {
		e.Gauge(tempDesc, float64(t))
	}
	if f, ok := Call(r, "GetFanSpeed", r.Device.GetFanSpeed); ok {
		e.Gauge(fanDesc, float64(f)/100)
	}
}

// ---- clocks and clock events ------------------------------------------------

var (
	clockDesc      = desc("gpu", "clock_hertz", "Current clock frequency (nvmlDeviceGetClockInfo MHz × 1e6).", "clock")
	maxClockDesc   = desc("gpu", "max_clock_hertz", "Maximum clock frequency (nvmlDeviceGetMaxClockInfo MHz × 1e6).", "clock")
	clockEventDesc = desc("gpu", "clock_event_active", "1 while the clock-event (throttle) reason is active, else 0 (nvmlDeviceGetCurrentClocksEventReasons).", "reason")
)

var clockTypes = []struct {
	name string
	typ  nvml.ClockType
}{
	{"graphics", nvml.CLOCK_GRAPHICS},
	{"sm", nvml.CLOCK_SM},
	{"memory", nvml.CLOCK_MEM},
}

type clocksCollector struct{ describer }

func newClocksCollector() Collector {
	return clocksCollector{describer{clockDesc, maxClockDesc, clockEventDesc}}
}

func (clocksCollector) NewDevice(Device) DeviceSampler { return &clocksSampler{} }

type clocksSampler struct {
	max     [3]float64 // Hz, read once: static per device
	maxRead [3]bool
}

func (s *clocksSampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	for i, c := range clockTypes {
		if mhz, ok := Call(r, "GetClockInfo", func() (uint32, nvml.Return) { return r.Device.GetClockInfo(c.typ) }); ok {
			e.Gauge(clockDesc, float64(mhz)*1e6, c.name)
		}
		if !s.maxRead[i] {
			mhz, ret := callRet(r, "GetMaxClockInfo", func() (uint32, nvml.Return) { return r.Device.GetMaxClockInfo(c.typ) })
			if ret == nvml.SUCCESS {
				s.max[i], s.maxRead[i] = float64(mhz)*1e6, true
			}
		}
		if s.maxRead[i] {
			e.Gauge(maxClockDesc, s.max[i], c.name)
		}
	}
	if bits, ok := Call(r, "GetCurrentClocksEventReasons", r.Device.GetCurrentClocksEventReasons); ok {
		for _, reason := range clockevent.All() {
			e.Bool(clockEventDesc, bits&reason.Bit != 0, reason.Name)
		}
	}
}

// ---- PCIe --------------------------------------------------------------------

var (
	pcieThroughputDesc = desc("gpu", "pcie_throughput_bytes_per_second", "PCIe throughput: with GPM (Hopper and newer, gpm collector on), the mean over the sampler interval (GPM PCIE_TX/RX_PER_SEC MiB/s × 1048576); otherwise NVML's 20 ms window (nvmlDeviceGetPcieThroughput KB/s × 1024), read at most every 10 s.", "direction")
	pcieReplayDesc     = desc("gpu", "pcie_replay_errors_total", "PCIe replay counter (nvmlDeviceGetPcieReplayCounter).")
)

// pcieNVMLPeriod is how often nvmlDeviceGetPcieThroughput is called where
// GPM cannot give the PCIe rates: each call samples for about 20 ms, so two
// calls were most of a real GPU's cycle (42 of 53 ms on an H200).
const pcieNVMLPeriod = 10 * time.Second

type pcieCollector struct{ describer }

func newPCIeCollector() Collector {
	return pcieCollector{describer{pcieThroughputDesc, pcieReplayDesc}}
}

func (pcieCollector) NewDevice(d Device) DeviceSampler { return &pcieSampler{st: d.state} }

type pcieSampler struct {
	st *deviceState
	// The last nvmlDeviceGetPcieThroughput reading, when both directions
	// answered.
	readAt time.Time
	tx, rx float64
	have   bool
}

func (s *pcieSampler) Sample(r *Reader, e *Emitter, now time.Time) {
	if tx, rx, ok := s.fromGPM(r); ok {
		e.Gauge(pcieThroughputDesc, tx, "tx")
		e.Gauge(pcieThroughputDesc, rx, "rx")
		s.have = false // back to NVML only after a fresh reading
	} else {
		s.fromNVML(r, e, now)
	}
	if n, ok := Call(r, "GetPcieReplayCounter", r.Device.GetPcieReplayCounter); ok {
		e.Counter(pcieReplayDesc, float64(n))
	}
}

// fromGPM returns the PCIe rates over the last interval from this cycle's
// GPM reading (shared with the gpm collector), where there is one.
func (s *pcieSampler) fromGPM(r *Reader) (tx, rx float64, ok bool) {
	if s.st == nil || !s.st.gpmEnabled {
		return 0, 0, false
	}
	g := s.st.gpmMetrics(r)
	if !g.supported || g.gpu == nil { // no GPM, or its first sample
		return 0, 0, false
	}
	return g.gpu.pcie()
}

// fromNVML reads nvmlDeviceGetPcieThroughput at most every pcieNVMLPeriod
// and emits the last reading in between; a failed reading is retried on
// the next cycle.
func (s *pcieSampler) fromNVML(r *Reader, e *Emitter, now time.Time) {
	if !s.have || now.Sub(s.readAt) >= pcieNVMLPeriod || now.Before(s.readAt) {
		tx, txOK := Call(r, "GetPcieThroughput", func() (uint32, nvml.Return) { return r.Device.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES) })
		rx, rxOK := Call(r, "GetPcieThroughput", func() (uint32, nvml.Return) { return r.Device.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES) })
		s.tx, s.rx, s.have, s.readAt = float64(tx)*1024, float64(rx)*1024, txOK && rxOK, now
		if !s.have {
			if txOK {
				e.Gauge(pcieThroughputDesc, s.tx, "tx")
			}
			if rxOK {
				e.Gauge(pcieThroughputDesc, s.rx, "rx")
			}
			return
		}
	}
	e.Gauge(pcieThroughputDesc, s.tx, "tx")
	e.Gauge(pcieThroughputDesc, s.rx, "rx")
}

// ---- ECC and row remapping -----------------------------------------------------

var (
	eccDesc          = desc("gpu", "ecc_errors_total", "ECC errors since the driver loaded (nvmlDeviceGetTotalEccErrors, volatile counter).", "type")
	remappedDesc     = desc("gpu", "remapped_rows", "Memory rows remapped because of correctable or uncorrectable errors (nvmlDeviceGetRemappedRows).", "type")
	remapPendingDesc = desc("gpu", "remapping_pending", "1 when a row remapping is pending and the GPU needs a reset (nvmlDeviceGetRemappedRows isPending).")
	remapFailedDesc  = desc("gpu", "remapping_failed", "1 when a row remapping failed (nvmlDeviceGetRemappedRows failureOccurred): the GPU should be replaced.")
)

type eccCollector struct{ describer }

func newECCCollector() Collector {
	return eccCollector{describer{eccDesc, remappedDesc, remapPendingDesc, remapFailedDesc}}
}

func (eccCollector) NewDevice(Device) DeviceSampler { return eccSampler{} }

type eccSampler struct{}

type remappedRows struct {
	corr, unc        int
	pending, failure bool
}

func (eccSampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	for _, t := range []struct {
		name string
		typ  nvml.MemoryErrorType
	}{{"corrected", nvml.MEMORY_ERROR_TYPE_CORRECTED}, {"uncorrected", nvml.MEMORY_ERROR_TYPE_UNCORRECTED}} {
		if n, ok := Call(r, "GetTotalEccErrors", func() (uint64, nvml.Return) {
			return r.Device.GetTotalEccErrors(t.typ, nvml.VOLATILE_ECC)
		}); ok {
			e.Counter(eccDesc, float64(n), t.name)
		}
	}
	if rr, ok := Call(r, "GetRemappedRows", func() (remappedRows, nvml.Return) {
		c, u, p, f, ret := r.Device.GetRemappedRows()
		return remappedRows{c, u, p, f}, ret
	}); ok {
		e.Gauge(remappedDesc, float64(rr.corr), "correctable")
		e.Gauge(remappedDesc, float64(rr.unc), "uncorrectable")
		e.Bool(remapPendingDesc, rr.pending)
		e.Bool(remapFailedDesc, rr.failure)
	}
}

// ---- modes ---------------------------------------------------------------------

var (
	persistenceDesc = desc("gpu", "persistence_mode", "1 when persistence mode is enabled (nvmlDeviceGetPersistenceMode).")
	computeModeDesc = desc("gpu", "compute_mode", "Compute mode, one-hot: 1 for the active mode (nvmlDeviceGetComputeMode).", "mode")
	migEnabledDesc  = desc("gpu", "mig_enabled", "1 when MIG mode is currently enabled (nvmlDeviceGetMigMode current).")
)

var computeModes = []struct {
	name string
	mode nvml.ComputeMode
}{
	{"default", nvml.COMPUTEMODE_DEFAULT},
	{"exclusive_thread", nvml.COMPUTEMODE_EXCLUSIVE_THREAD},
	{"prohibited", nvml.COMPUTEMODE_PROHIBITED},
	{"exclusive_process", nvml.COMPUTEMODE_EXCLUSIVE_PROCESS},
}

type modeCollector struct{ describer }

func newModeCollector() Collector {
	return modeCollector{describer{persistenceDesc, computeModeDesc, migEnabledDesc}}
}

func (modeCollector) NewDevice(Device) DeviceSampler { return modeSampler{} }

type modeSampler struct{}

func (modeSampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	if m, ok := Call(r, "GetPersistenceMode", r.Device.GetPersistenceMode); ok {
		e.Bool(persistenceDesc, m == nvml.FEATURE_ENABLED)
	}
	if m, ok := Call(r, "GetComputeMode", r.Device.GetComputeMode); ok {
		for _, cm := range computeModes {
			e.Bool(computeModeDesc, m == cm.mode, cm.name)
		}
	}
	if cur, ok := Call(r, "GetMigMode", func() (int, nvml.Return) {
		c, _, ret := r.Device.GetMigMode()
		return c, ret
	}); ok {
		e.Bool(migEnabledDesc, cur == nvml.DEVICE_MIG_ENABLE)
	}
}
