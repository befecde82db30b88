package verify

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpulens/gpulens/internal/gpuspec"
)

// Thresholds of the checks. docs/verify.md explains each.
const (
	// VRAMWarnShare and VRAMFailShare bound the memory a whole GPU shows
	// (CUDA's total) as a share of its spec: HBM boards show about 99.5 %,
	// GDDR boards with ECC on about 93.75 % (ECC's reservation). Below 90 %
	// something is held back; below 80 % it is a different product (a vGPU
	// profile, a partition).
	VRAMWarnShare = 0.90
	VRAMFailShare = 0.80
	// ExpectVRAMTolerance: --expect.vram is met when the GPU shows at
	// least this much less than asked (an "80GB" H100 shows 79.6 GiB).
	ExpectVRAMTolerance = 0.03
	// FreeWarnShare: memory free to a new context below this share of the
	// total means something else (another process, a leak) holds memory.
	FreeWarnShare = 0.90
	// FillWarnShare: the fill test allocating less than this share of what
	// was reported free means the driver refuses memory it claims to have.
	FillWarnShare = 0.90
	// UnseenUsedWarnBytes: NVML memory in use, with no process visible,
	// above this means a process NVML cannot show (another container or VM).
	UnseenUsedWarnBytes = 1 << 30
	// UnseenBusyWarnPct: NVML's GPU utilisation, with no process visible,
	// above this means a context NVML cannot show runs kernels.
	UnseenBusyWarnPct = 10

	// StolenWarnRatio and StolenFailRatio bound the median share of the
	// stolen-time window lost in gaps. A GPU that is ours alone reads
	// ~0 (timer jitter, driver housekeeping: well under 1 %).
	StolenWarnRatio = 0.05
	StolenFailRatio = 0.20
	// TimeSliceMin: gaps at least this long are time slices given to
	// another context; shorter ones are preemptions or interference.
	TimeSliceMin = 500 * time.Microsecond

	// FigureWarnShare and FigureFailShare bound a measured figure (the
	// median of the runs) as a share of what a healthy card of the model
	// reaches (gpuspec's expected probe figures).
	FigureWarnShare = 0.80
	FigureFailShare = 0.60

	// CVWarn: a figure whose coefficient of variation over the runs exceeds
	// this varies because something else uses the GPU at times (judged with
	// at least CVMinRuns runs).
	CVWarn    = 0.10
	CVMinRuns = 3

	// LaunchLatencyWarn: an empty kernel's round trip (launch + synchronise)
	// takes a few µs on a local GPU; above this the path is virtualised or
	// contended.
	LaunchLatencyWarn = 100 * time.Microsecond

	// PowerLimitTolerance: a power limit this far below the default (as a
	// share) is a deliberate cap, not rounding.
	PowerLimitTolerance = 0.01
)

// Check IDs, stable for tools and tests.
const (
	CheckNVML         = "nvml"
	CheckCUDA         = "cuda"
	CheckGPUsSeen     = "gpus_seen"
	CheckDeviceCount  = "device_count"
	CheckDriver       = "driver_version"
	CheckCUDAVersion  = "cuda_version"
	CheckModel        = "model"
	CheckVRAM         = "vram"
	CheckVRAMExpected = "vram_expected"
	CheckVRAMFree     = "vram_free"
	CheckVirt         = "virtualization"
	CheckMIG          = "mig"
	CheckComputeMode  = "compute_mode"
	CheckProcesses    = "processes"
	CheckStolen       = "stolen_time"
	CheckH2D          = "h2d_bandwidth"
	CheckD2H          = "d2h_bandwidth"
	CheckDeviceCopy   = "device_bandwidth"
	CheckFP32         = "fp32_flops"
	CheckFP16         = "fp16_tensor_flops"
	CheckBF16         = "bf16_tensor_flops"
	CheckLaunch       = "launch_latency"
	CheckVariability  = "variability"
	CheckPCIe         = "pcie_link"
	CheckPCIeExpected = "pcie_expected"
	CheckThrottle     = "throttle"
	CheckPowerLimit   = "power_limit"
	CheckECCMode      = "ecc_mode"
	CheckECCErrors    = "ecc_errors"
	CheckRetirement   = "memory_retirement"
	CheckProbeErrors  = "probe_errors"
)

// notMeasuredPrefix begins the reason of a check that was not measured,
// for people; code reads Check.NotMeasured.
const notMeasuredPrefix = "not measured: "

func check(id, title string, s Status, format string, args ...any) Check {
	return Check{ID: id, Title: title, Status: s, Reason: fmt.Sprintf(format, args...)}
}

func notMeasured(id, title, why string) Check {
	return Check{ID: id, Title: title, Status: StatusWarn, Reason: notMeasuredPrefix + why, NotMeasured: true}
}

// deviceEval judges one device.
type deviceEval struct {
	d      *Device
	spec   *gpuspec.Spec
	o      Options
	rep    *Report
	probed bool // the probe could run on this host
}

// nvmlWhy is why NVML facts are missing for the device ("" when present).
func (e *deviceEval) nvmlWhy() string {
	if e.d.NVML != nil {
		return ""
	}
	if e.rep.Host.NVML == nil {
		return "NVML: " + e.rep.Host.NVMLError
	}
	return "no NVML GPU matches this CUDA device's UUID or PCI bus id"
}

// probeWhy is why the probe's figures are missing ("" when some run
// returned a result).
func (e *deviceEval) probeWhy() string {
	if e.d.CUDA == nil || !e.probed {
		return "CUDA: " + e.rep.Host.CUDAError
	}
	var errs, skips []string
	for _, r := range e.d.Runs {
		if r.Result != nil {
			return ""
		}
		if r.Skipped != nil {
			if w := r.Skipped.Reason + " (" + r.Skipped.Detail + ")"; !slices.Contains(skips, w) {
				skips = append(skips, w)
			}
		}
		if r.Error != "" && !slices.Contains(errs, r.Error) {
			errs = append(errs, r.Error)
		}
	}
	if len(errs) == 0 && len(skips) > 0 {
		// The probe left the GPU alone: say why ("not measured: <reason> (…)").
		return strings.Join(skips, "; ")
	}
	if len(errs) == 0 {
		return "the probe did not run"
	}
	return "every probe failed: " + strings.Join(errs, "; ")
}

// measurementWhy is why one measurement has no figure: its errors from the
// runs, or the probe's reason.
func (e *deviceEval) measurementWhy(measurement string) string {
	if w := e.probeWhy(); w != "" {
		return w
	}
	var errs []string
	for _, r := range e.d.Runs {
		if r.Result == nil {
			continue
		}
		for _, me := range r.Result.Errors {
			if me.Measurement == measurement && !slices.Contains(errs, me.Err) {
				errs = append(errs, me.Err)
			}
		}
	}
	if len(errs) == 0 {
		return "the probe returned no " + measurement + " figure"
	}
	return measurement + ": " + strings.Join(errs, "; ")
}

func (e *deviceEval) specName() string {
	if e.spec == nil {
		return "this GPU"
	}
	return "the " + e.spec.Model
}

// shares scales expected figures to a MIG slice: its SMs over the whole
// GPU's (compute) and its memory over the GPU's (memory bandwidth).
func (e *deviceEval) shares() (compute, memory float64) {
	compute, memory = 1, 1
	if e.d.MIG == nil || e.spec == nil {
		return
	}
	if c := e.d.CUDA; c != nil && c.SMs > 0 && e.spec.SMs > 0 {
		compute = min(1, float64(c.SMs)/float64(e.spec.SMs))
	}
	if t := e.totalBytes(); t > 0 && e.spec.MemoryBytes > 0 {
		memory = min(1, t/float64(e.spec.MemoryBytes))
	}
	return
}

// totalBytes is the device memory the device shows: the probe's total,
// else CUDA's, else NVML's (the MIG instance's for a MIG device).
func (e *deviceEval) totalBytes() float64 {
	if s := e.d.Figures.MemoryTotalBytes; s != nil {
		return s.Median
	}
	if c := e.d.CUDA; c != nil && c.TotalMemoryBytes > 0 {
		return float64(c.TotalMemoryBytes)
	}
	if m := e.d.MIG; m != nil && m.MemoryTotalBytes > 0 {
		return float64(m.MemoryTotalBytes)
	}
	if n := e.d.NVML; n != nil && n.Memory != nil {
		return float64(n.Memory.TotalBytes)
	}
	return 0
}

func (e *deviceEval) checks() []Check {
	cs := []Check{e.model(), e.vram()}
	if e.o.Expect.VRAMBytes > 0 {
		cs = append(cs, e.vramExpected())
	}
	cs = append(cs, e.vramFree(), e.virtualization(), e.mig(), e.computeMode(), e.processes(), e.stolen())
	ex := gpuspec.Expected{}
	if e.spec != nil {
		ex = e.spec.Expected()
	}
	comp, mem := e.shares()
	f := e.d.Figures
	cs = append(cs,
		e.figure(CheckH2D, "Host to device bandwidth", "h2d", f.H2DBytesPerSecond, ex.H2DBytesPerSecond, UnitBytesPerSecond, fmtRate),
		e.figure(CheckD2H, "Device to host bandwidth", "d2h", f.D2HBytesPerSecond, ex.D2HBytesPerSecond, UnitBytesPerSecond, fmtRate),
		e.figure(CheckDeviceCopy, "Device memory bandwidth", "device_copy", f.DeviceCopyBytesPerSecond, ex.DeviceCopyBytesPerSecond*mem, UnitBytesPerSecond, fmtRate),
		e.figure(CheckFP32, "FP32 throughput", "fp32", f.FP32FLOPS, ex.FP32FLOPS*comp, UnitFLOPS, fmtFLOPS),
		e.figure(CheckFP16, "FP16 tensor throughput", "fp16_tensor", f.FP16TensorFLOPS, ex.FP16TensorFLOPS*comp, UnitFLOPS, fmtFLOPS),
		e.figure(CheckBF16, "BF16 tensor throughput", "bf16_tensor", f.BF16TensorFLOPS, ex.BF16TensorFLOPS*comp, UnitFLOPS, fmtFLOPS),
		e.launch(),
	)
	if len(e.d.Runs) >= CVMinRuns {
		cs = append(cs, e.variability())
	}
	cs = append(cs, e.pcie())
	if e.o.Expect.PCIeGen > 0 {
		cs = append(cs, e.pcieExpected())
	}
	figuresOK := true
	for _, c := range cs {
		switch c.ID {
		case CheckDeviceCopy, CheckFP32, CheckFP16, CheckBF16:
			figuresOK = figuresOK && c.Status == StatusPass
		}
	}
	cs = append(cs, e.throttle(figuresOK), e.powerLimit(), e.eccMode(), e.eccErrors(), e.retirement())
	if e.d.CUDA != nil && e.probed {
		cs = append(cs, e.probeErrors())
	}
	return cs
}
