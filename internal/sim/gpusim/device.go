package gpusim

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpulens/gpulens/internal/gpuid"
)

const mib = 1 << 20

// Noise stream selectors, mixed into a device's key.
const (
	streamUtil uint64 = iota + 1
	streamMemUtil
	streamMemUsed
	streamPower
	streamPowerDerived
	streamEnc
	streamDec
	streamPcieRx
	streamPcieTx
	streamEccCorr
	streamEccUnc
	streamReplays
	streamXid
	streamXidCode
	streamAggregate
)

// Clock event reason bits the simulation sets.
const (
	reasonIdle    = uint64(nvml.ClocksEventReasonGpuIdle)
	reasonPower   = uint64(nvml.ClocksEventReasonSwPowerCap)
	reasonThermal = uint64(nvml.ClocksEventReasonSwThermalSlowdown)
)

const supportedEvents = uint64(nvml.EventTypeXidCriticalError | nvml.EventTypeSingleBitEccError | nvml.EventTypeDoubleBitEccError)

// deviceCalls are the device methods the simulation implements: the names a
// fault's call field may use.
var deviceCalls = []string{
	"GetUUID", "GetName", "GetIndex", "GetMinorNumber", "GetBrand", "GetArchitecture",
	"GetCudaComputeCapability", "GetPciInfo", "GetSerial", "GetVbiosVersion",
	"GetMaxClockInfo", "GetMemoryInfo", "GetMemoryInfo_v2", "GetUtilizationRates",
	"GetEncoderUtilization", "GetDecoderUtilization", "GetTemperature", "GetPowerUsage",
	"GetEnforcedPowerLimit", "GetTotalEnergyConsumption", "GetClockInfo", "GetFanSpeed",
	"GetCurrentClocksEventReasons", "GetPcieThroughput", "GetPcieReplayCounter",
	"GetTotalEccErrors", "GetRemappedRows", "GetPersistenceMode", "GetComputeMode",
	"GetMigMode", "GetSupportedEventTypes", "RegisterEvents",
	"GetComputeRunningProcesses", "GetGraphicsRunningProcesses", "GetMPSComputeRunningProcesses",
	"GetProcessUtilization", "GetMaxMigDeviceCount", "GetMigDeviceHandleByIndex", "IsMigDeviceHandle",
	"GetGpuInstanceId", "GetComputeInstanceId", "GetDeviceHandleFromMigDeviceHandle",
	"GpmQueryDeviceSupport", "GpmSampleGet", "GpmMigSampleGet",
	"GetVirtualizationMode", "GetCurrPcieLinkGeneration", "GetMaxPcieLinkGeneration",
	"GetCurrPcieLinkWidth", "GetMaxPcieLinkWidth", "GetPowerManagementDefaultLimit",
	"GetPowerManagementLimit", "GetEccMode", "GetRetiredPages", "GetRetiredPages_v2",
	"GetRetiredPagesPendingStatus",
}

var deviceCallSet = func() map[string]bool {
	m := map[string]bool{}
	for _, c := range deviceCalls {
		m[c] = true
	}
	return m
}()

func knownCall(name string) bool { return deviceCallSet[name] }

func deviceCallNames() []string {
	out := append([]string(nil), deviceCalls...)
	sort.Strings(out)
	return out
}

// device is one simulated GPU. It embeds go-nvml's mock server device, so
// every nvml.Device method the simulation does not implement behaves like the
// mock (most panic when called); the methods below shadow the mock and never
// record calls, so a long-running simulated exporter does not grow memory.
type device struct {
	*server.Device

	f      *Fleet
	index  int
	spec   *deviceSpec
	key    uint64
	uuid   string
	serial string
	busID  string // 00000000:9A:00.0: upper-case hex, as NVML and CUDA write it
	pci    nvml.PciInfo
	lostAt float64 // +Inf when never lost

	callFaults []*faultSpec
	xidFaults  []*faultSpec

	energy     *integrator // joules
	eccCorr    *process
	eccUnc     *process
	replays    *process
	randomXids *process
	migDevices []*migDevice
	migSlices  int         // compute slices of the whole GPU (7 on H100); 0 outside MIG
	probeCtxs  probeCtxLog // the probe's CUDA contexts (probe_context.go)
	// probeKernels is when the probe's kernels run on the whole GPU
	// (probe_context.go).
	probeKernels spanLog
	// published is when periods held back for the probe were published
	// (procutil.go).
	published publishLog
	// periods memoises GetProcessUtilization's samples by period.
	periods periodMemo
}

var _ nvml.Device = (*device)(nil)

// dgxBuses are the PCI buses of the eight GPUs of a DGX H100 board.
var dgxBuses = [8]uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}

func newDevice(f *Fleet, index int, spec *deviceSpec, identity uint64) *device {
	sd := server.NewDeviceFromConfig(spec.model.cfg, index)
	key := hashN(f.seed, identity)
	d := &device{
		Device: sd,
		f:      f,
		index:  index,
		spec:   spec,
		key:    key,
		lostAt: math.Inf(1),
	}
	d.probeKernels.horizon = probeKernelHorizon * f.sampleBufferScale()
	// UUID: 128 hashed bits with the RFC 4122 version-4 and variant bits set.
	hi, lo := hashN(key, 0x1111), hashN(key, 0x2222)
	hi = hi&^(0xf<<12) | 0x4<<12
	lo = lo&^(0x3<<62) | 0x2<<62
	d.uuid = fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", hi>>32, (hi>>16)&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
	d.serial = fmt.Sprintf("%s%09d", spec.model.serialPrefix, hashN(key, 0x3333)%1_000_000_000)
	domain, bus := uint32(index/8), dgxBuses[index%8]
	d.busID = gpuid.BusID{Domain: domain, Bus: uint8(bus)}.String()
	d.pci = nvml.PciInfo{
		Domain:         domain,
		Bus:            bus,
		Device:         0,
		PciDeviceId:    spec.model.cfg.PciDeviceId,
		PciSubSystemId: spec.model.subsystemID,
	}
	copyCString(d.pci.BusId[:], d.busID)
	copyCString(d.pci.BusIdLegacy[:], fmt.Sprintf("%04X:%02X:00.0", domain, bus))
	sd.UUID = d.uuid
	sd.PciBusID = d.busID

	d.energy = &integrator{f: d.powerW}
	d.eccCorr = newProcess(spec.eccCorrPerHour, hashN(key, streamEccCorr))
	d.eccUnc = newProcess(spec.eccUncPerHour, hashN(key, streamEccUnc))
	d.replays = newProcess(spec.replaysPerHour, hashN(key, streamReplays))
	d.randomXids = newProcess(spec.xidPerHour, hashN(key, streamXid))
	d.migDevices = newMigDevices(d)
	if len(d.migDevices) > 0 {
		_, d.migSlices = migProfilesOf(spec.model)
	}
	return d
}

func copyCString(dst []int8, s string) {
	for i := 0; i < len(s) && i < len(dst)-1; i++ {
		dst[i] = int8(s[i])
	}
}

// enter applies the scenario's per-call behaviour and returns the sim time at
// which the call observes the device.
func (d *device) enter(call string) (float64, nvml.Return) {
	if !d.f.initialised() {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	if lat := d.f.sc.callLatency; lat > 0 {
		time.Sleep(d.f.realDuration(lat))
	}
	t := d.f.elapsed()
	if t >= d.lostAt {
		return t, nvml.ERROR_GPU_IS_LOST
	}
	for _, fs := range d.callFaults {
		if !fs.matches(call, t) {
			continue
		}
		switch fs.kind {
		case faultError:
			return t, fs.ret
		case faultSlow, faultHang:
			time.Sleep(d.f.realDuration(fs.delay))
			t = d.f.elapsed()
			if t >= d.lostAt {
				return t, nvml.ERROR_GPU_IS_LOST
			}
		}
	}
	return t, nvml.SUCCESS
}

// ---- the physical model: pure functions of sim time ----

// With tenants, device utilisation and memory are the sums over the running
// tenants; the device's own util/memory signals are not used. In MIG mode a
// tenant's utilisation is a share of its instance: each instance counts
// (capped at 100 %) in proportion to its compute slices, so a 3g instance
// at 100 % is 3/7 of an H100.
func (d *device) utilPct(t float64) float64 {
	if len(d.spec.tenants) > 0 {
		if len(d.migDevices) > 0 {
			sm, _ := d.migLoad(t)
			return sm
		}
		sm, _, _ := d.tenantLoad(t, -1)
		return math.Min(sm, 100)
	}
	return d.spec.util.at(t, hashN(d.key, streamUtil))
}

// migLoad is a MIG-mode device's SM and memory-bandwidth utilisation at t:
// the instances' loads weighted by their share of the compute slices.
func (d *device) migLoad(t float64) (sm, mem float64) {
	for _, md := range d.migDevices {
		s, m, _ := d.tenantLoad(t, md.idx)
		w := float64(md.prof.slices) / float64(d.migSlices)
		sm += math.Min(s, 100) * w
		mem += math.Min(m, 100) * w
	}
	return math.Min(sm, 100), math.Min(mem, 100)
}

func (d *device) memUtilPct(t float64) float64 {
	if len(d.spec.tenants) > 0 {
		if len(d.migDevices) > 0 {
			_, mem := d.migLoad(t)
			return mem
		}
		_, mem, _ := d.tenantLoad(t, -1)
		return math.Min(mem, 100)
	}
	if d.spec.memUtil != nil {
		return d.spec.memUtil.at(t, hashN(d.key, streamMemUtil))
	}
	return 0.6 * d.utilPct(t)
}

func (d *device) memUsedPct(t float64) float64 {
	if d.spec.memUsed != nil {
		return d.spec.memUsed.at(t, hashN(d.key, streamMemUsed))
	}
	return 0
}

// demandW is the power the board would draw at t at its maximum clocks: the
// power signal, or derived from utilisation (without the noise powerW adds).
func (d *device) demandW(t float64) float64 {
	if d.spec.power != nil {
		return d.spec.power.at(t, hashN(d.key, streamPower))
	}
	m := d.spec.model
	u := d.utilPct(t) / 100
	return m.idleW + (m.tdpW-m.idleW)*math.Pow(u, 1.15)
}

// powerW is the board power draw in watts, capped at the enforced limit.
func (d *device) powerW(t float64) float64 {
	p := d.demandW(t)
	if d.spec.power == nil {
		m := d.spec.model
		p += 0.01 * m.tdpW * smoothNoise(hashN(d.key, streamPowerDerived), t/5)
	}
	return clamp(p, 0, d.spec.powerLimitW)
}

// capFactor is the SM clock ratio that brings a demand of demandW down to
// the power limit, beyond the usual 7 % dip at the limit: dynamic power
// (above idle) taken as proportional to the square of the clock, a middle
// course between f·V² with the voltage scaling with the clock (cube) and at
// its floor (linear). 1 when the demand fits; never below about 0.22.
func (d *device) capFactor(demandW float64) float64 {
	limit, idle := d.spec.powerLimitW, d.spec.model.idleW
	if demandW <= limit {
		return 1
	}
	return math.Sqrt(math.Max(limit-idle, 0.05*(demandW-idle)) / (demandW - idle))
}

// tempC lags power: it follows the mean power of the last minute.
func (d *device) tempC(t float64) float64 {
	var sum float64
	for i := 0; i < 7; i++ {
		sum += d.powerW(math.Max(0, t-10*float64(i)))
	}
	m := d.spec.model
	return d.spec.ambientC + m.deltaTC*(sum/7)/m.tdpW
}

func (d *device) tempRounded(t float64) uint32 { return uint32(math.Round(d.tempC(t))) }

// clocks returns the SM clock (MHz) and the clock event reasons at t.
func (d *device) clocks(t float64) (float64, uint64) {
	m := d.spec.model
	u := d.utilPct(t)
	if u < 5 {
		return m.smIdleMHz, reasonIdle
	}
	sm, reasons := m.smMaxMHz, uint64(0)
	if d.powerW(t) >= 0.95*d.spec.powerLimitW {
		reasons |= reasonPower
		sm *= 0.93 * d.capFactor(d.demandW(t))
	}
	if float64(d.tempRounded(t)) >= m.slowdownC {
		reasons |= reasonThermal
		sm *= 0.9
	}
	return math.Round(sm/15) * 15, reasons
}

// memory is the device's memory as NVML shows it; in a vGPU guest, the
// vGPU profile's framebuffer.
func (d *device) memory(t float64) nvml.Memory_v2 {
	total := d.spec.totalMiB() * mib
	reserved := d.spec.reservedMiB() * mib
	usableMiB := d.spec.totalMiB() - d.spec.reservedMiB()
	used := uint64(math.Round(d.memUsedPct(t)/100*float64(usableMiB))) * mib
	if len(d.spec.tenants) > 0 {
		_, _, b := d.tenantLoad(t, -1)
		used = min(b, usableMiB*mib)
	}
	return nvml.Memory_v2{
		Version:  nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2),
		Total:    total,
		Reserved: reserved,
		Used:     used,
		Free:     total - reserved - used,
	}
}

func (d *device) pcieMiBs(t float64, rx bool) float64 {
	if rx && d.spec.pcieRx != nil {
		return d.spec.pcieRx.at(t, hashN(d.key, streamPcieRx))
	}
	if !rx && d.spec.pcieTx != nil {
		return d.spec.pcieTx.at(t, hashN(d.key, streamPcieTx))
	}
	share, stream := 0.12, streamPcieTx
	if rx {
		share, stream = 0.35, streamPcieRx
	}
	n := 1 + 0.2*smoothNoise(hashN(d.key, stream), t/3)
	return d.utilPct(t) / 100 * d.spec.model.pcieMaxMiBs * share * n
}

// ---- nvml.Device methods ----

func (d *device) GetUUID() (string, nvml.Return) {
	if _, r := d.enter("GetUUID"); r != nvml.SUCCESS {
		return "", r
	}
	return d.uuid, nvml.SUCCESS
}

func (d *device) GetName() (string, nvml.Return) {
	if _, r := d.enter("GetName"); r != nvml.SUCCESS {
		return "", r
	}
	return d.spec.model.cfg.Name, nvml.SUCCESS
}

func (d *device) GetIndex() (int, nvml.Return) {
	if _, r := d.enter("GetIndex"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.index, nvml.SUCCESS
}

func (d *device) GetMinorNumber() (int, nvml.Return) {
	if _, r := d.enter("GetMinorNumber"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.index, nvml.SUCCESS
}

func (d *device) GetBrand() (nvml.BrandType, nvml.Return) {
	if _, r := d.enter("GetBrand"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.model.cfg.Brand, nvml.SUCCESS
}

func (d *device) GetArchitecture() (nvml.DeviceArchitecture, nvml.Return) {
	if _, r := d.enter("GetArchitecture"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.model.cfg.Architecture, nvml.SUCCESS
}

func (d *device) GetCudaComputeCapability() (int, int, nvml.Return) {
	if _, r := d.enter("GetCudaComputeCapability"); r != nvml.SUCCESS {
		return 0, 0, r
	}
	return d.spec.model.cfg.CudaMajor, d.spec.model.cfg.CudaMinor, nvml.SUCCESS
}

func (d *device) GetPciInfo() (nvml.PciInfo, nvml.Return) {
	if _, r := d.enter("GetPciInfo"); r != nvml.SUCCESS {
		return nvml.PciInfo{}, r
	}
	return d.pci, nvml.SUCCESS
}

func (d *device) GetSerial() (string, nvml.Return) {
	if _, r := d.enter("GetSerial"); r != nvml.SUCCESS {
		return "", r
	}
	return d.serial, nvml.SUCCESS
}

func (d *device) GetVbiosVersion() (string, nvml.Return) {
	if _, r := d.enter("GetVbiosVersion"); r != nvml.SUCCESS {
		return "", r
	}
	return d.spec.model.vbios, nvml.SUCCESS
}

func (d *device) GetMaxClockInfo(ct nvml.ClockType) (uint32, nvml.Return) {
	if _, r := d.enter("GetMaxClockInfo"); r != nvml.SUCCESS {
		return 0, r
	}
	m := d.spec.model
	switch ct {
	case nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM:
		return uint32(m.smMaxMHz), nvml.SUCCESS
	case nvml.CLOCK_MEM:
		return uint32(m.memMaxMHz), nvml.SUCCESS
	case nvml.CLOCK_VIDEO:
		return uint32(math.Round(m.smMaxMHz*m.videoClockFrac/15) * 15), nvml.SUCCESS
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *device) GetClockInfo(ct nvml.ClockType) (uint32, nvml.Return) {
	t, r := d.enter("GetClockInfo")
	if r != nvml.SUCCESS {
		return 0, r
	}
	m := d.spec.model
	sm, _ := d.clocks(t)
	switch ct {
	case nvml.CLOCK_GRAPHICS, nvml.CLOCK_SM:
		return uint32(sm), nvml.SUCCESS
	case nvml.CLOCK_MEM:
		return uint32(m.memMaxMHz), nvml.SUCCESS
	case nvml.CLOCK_VIDEO:
		return uint32(math.Round(sm*m.videoClockFrac/15) * 15), nvml.SUCCESS
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *device) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	t, r := d.enter("GetMemoryInfo_v2")
	if r != nvml.SUCCESS {
		return nvml.Memory_v2{}, r
	}
	return d.memory(t), nvml.SUCCESS
}

// GetMemoryInfo is the v1 view: the reservation counts as used.
func (d *device) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	t, r := d.enter("GetMemoryInfo")
	if r != nvml.SUCCESS {
		return nvml.Memory{}, r
	}
	m := d.memory(t)
	return nvml.Memory{Total: m.Total, Used: m.Used + m.Reserved, Free: m.Free}, nvml.SUCCESS
}

func (d *device) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	t, r := d.enter("GetUtilizationRates")
	if r != nvml.SUCCESS {
		return nvml.Utilization{}, r
	}
	if d.migEnabled() {
		return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED // as on real GPUs in MIG mode
	}
	return nvml.Utilization{
		Gpu:    uint32(math.Round(d.utilPct(t))),
		Memory: uint32(math.Round(d.memUtilPct(t))),
	}, nvml.SUCCESS
}

// samplingPeriodUs is what the driver reports for encoder/decoder utilisation.
const samplingPeriodUs = 167000

func (d *device) GetEncoderUtilization() (uint32, uint32, nvml.Return) {
	t, r := d.enter("GetEncoderUtilization")
	if r != nvml.SUCCESS {
		return 0, 0, r
	}
	var v float64
	if d.spec.encUtil != nil {
		v = d.spec.encUtil.at(t, hashN(d.key, streamEnc))
	}
	return uint32(math.Round(v)), samplingPeriodUs, nvml.SUCCESS
}

func (d *device) GetDecoderUtilization() (uint32, uint32, nvml.Return) {
	t, r := d.enter("GetDecoderUtilization")
	if r != nvml.SUCCESS {
		return 0, 0, r
	}
	var v float64
	if d.spec.decUtil != nil {
		v = d.spec.decUtil.at(t, hashN(d.key, streamDec))
	}
	return uint32(math.Round(v)), samplingPeriodUs, nvml.SUCCESS
}

func (d *device) GetTemperature(s nvml.TemperatureSensors) (uint32, nvml.Return) {
	t, r := d.enter("GetTemperature")
	if r != nvml.SUCCESS {
		return 0, r
	}
	if s != nvml.TEMPERATURE_GPU {
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	return d.tempRounded(t), nvml.SUCCESS
}

func (d *device) GetPowerUsage() (uint32, nvml.Return) {
	t, r := d.enter("GetPowerUsage")
	if r != nvml.SUCCESS {
		return 0, r
	}
	return uint32(math.Round(d.powerW(t) * 1000)), nvml.SUCCESS
}

func (d *device) GetEnforcedPowerLimit() (uint32, nvml.Return) {
	if _, r := d.enter("GetEnforcedPowerLimit"); r != nvml.SUCCESS {
		return 0, r
	}
	return uint32(math.Round(d.spec.powerLimitW * 1000)), nvml.SUCCESS
}

// GetTotalEnergyConsumption is the energy (mJ) since sim time zero.
func (d *device) GetTotalEnergyConsumption() (uint64, nvml.Return) {
	t, r := d.enter("GetTotalEnergyConsumption")
	if r != nvml.SUCCESS {
		return 0, r
	}
	return uint64(d.energy.at(t) * 1000), nvml.SUCCESS
}

func (d *device) GetFanSpeed() (uint32, nvml.Return) {
	t, r := d.enter("GetFanSpeed")
	if r != nvml.SUCCESS {
		return 0, r
	}
	if !d.spec.model.fan {
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	return uint32(math.Round(30 + 70*clamp((d.tempC(t)-30)/55, 0, 1))), nvml.SUCCESS
}

func (d *device) GetCurrentClocksEventReasons() (uint64, nvml.Return) {
	t, r := d.enter("GetCurrentClocksEventReasons")
	if r != nvml.SUCCESS {
		return 0, r
	}
	_, reasons := d.clocks(t)
	return reasons, nvml.SUCCESS
}

// GetPcieThroughput returns KB/s (KiB) over the driver's 20 ms window.
func (d *device) GetPcieThroughput(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
	t, r := d.enter("GetPcieThroughput")
	if r != nvml.SUCCESS {
		return 0, r
	}
	switch c {
	case nvml.PCIE_UTIL_TX_BYTES:
		return uint32(math.Round(d.pcieMiBs(t, false) * 1024)), nvml.SUCCESS
	case nvml.PCIE_UTIL_RX_BYTES:
		return uint32(math.Round(d.pcieMiBs(t, true) * 1024)), nvml.SUCCESS
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *device) GetPcieReplayCounter() (int, nvml.Return) {
	t, r := d.enter("GetPcieReplayCounter")
	if r != nvml.SUCCESS {
		return 0, r
	}
	return int(d.replays.count(t)), nvml.SUCCESS
}

// GetTotalEccErrors: volatile counts since sim time zero; aggregate adds a
// seeded lifetime history of about 30 days at the same rate.
// ERROR_NOT_SUPPORTED with ECC disabled (ecc_mode: false).
func (d *device) GetTotalEccErrors(et nvml.MemoryErrorType, ct nvml.EccCounterType) (uint64, nvml.Return) {
	t, r := d.enter("GetTotalEccErrors")
	if r != nvml.SUCCESS {
		return 0, r
	}
	if d.spec.eccOff {
		return 0, nvml.ERROR_NOT_SUPPORTED // no ECC counts with ECC disabled
	}
	var p *process
	switch et {
	case nvml.MEMORY_ERROR_TYPE_CORRECTED:
		p = d.eccCorr
	case nvml.MEMORY_ERROR_TYPE_UNCORRECTED:
		p = d.eccUnc
	default:
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	n := p.count(t)
	switch ct {
	case nvml.VOLATILE_ECC:
		return n, nvml.SUCCESS
	case nvml.AGGREGATE_ECC:
		hist := uint64(unitFloat(hashN(p.key, streamAggregate)) * p.perHour * 24 * 30)
		return n + hist, nvml.SUCCESS
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *device) GetRemappedRows() (int, int, bool, bool, nvml.Return) {
	if _, r := d.enter("GetRemappedRows"); r != nvml.SUCCESS {
		return 0, 0, false, false, r
	}
	rr := d.spec.remapped
	return rr.Correctable, rr.Uncorrectable, rr.Pending, rr.Failure, nvml.SUCCESS
}

func (d *device) GetPersistenceMode() (nvml.EnableState, nvml.Return) {
	if _, r := d.enter("GetPersistenceMode"); r != nvml.SUCCESS {
		return 0, r
	}
	if d.spec.persistence {
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	return nvml.FEATURE_DISABLED, nvml.SUCCESS
}

func (d *device) GetComputeMode() (nvml.ComputeMode, nvml.Return) {
	if _, r := d.enter("GetComputeMode"); r != nvml.SUCCESS {
		return 0, r
	}
	return d.spec.computeMode, nvml.SUCCESS
}

func (d *device) GetSupportedEventTypes() (uint64, nvml.Return) {
	if _, r := d.enter("GetSupportedEventTypes"); r != nvml.SUCCESS {
		return 0, r
	}
	return supportedEvents, nvml.SUCCESS
}

func (d *device) RegisterEvents(types uint64, set nvml.EventSet) nvml.Return {
	if _, r := d.enter("RegisterEvents"); r != nvml.SUCCESS {
		return r
	}
	es, ok := set.(*eventSet)
	if !ok || es.f != d.f {
		return nvml.ERROR_INVALID_ARGUMENT
	}
	if types&^supportedEvents != 0 {
		return nvml.ERROR_NOT_SUPPORTED
	}
	return es.register(d, types)
}
