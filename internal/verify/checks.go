package verify

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpulens/gpulens/internal/clockevent"
	"github.com/gpulens/gpulens/internal/gpuprobe"
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

func (e *deviceEval) model() Check {
	const id, title = CheckModel, "GPU model"
	name := deviceName(e.d)
	detected, ok := gpuspec.Lookup(name)
	if e.o.Expect.GPU != "" {
		want, err := gpuspec.ByKey(e.o.Expect.GPU)
		if err != nil {
			return check(id, title, StatusFail, "%v", err)
		}
		switch {
		case ok && detected.Key == want.Key:
			return check(id, title, StatusPass, "%q is an %s, as expected", name, want.Model)
		case ok:
			return check(id, title, StatusFail, "%q is an %s, not the %s you expect", name, detected.Model, want.Model)
		default:
			return check(id, title, StatusWarn, "%q is not in the spec table, so it cannot be confirmed as an %s; it is judged against the %s's spec", name, want.Model, want.Model)
		}
	}
	if ok {
		return check(id, title, StatusPass, "%q is an %s", name, detected.Model)
	}
	return check(id, title, StatusWarn, "%q is not in the spec table (%s): figures are not judged against a datasheet; pass --expect.gpu to choose one", name, strings.Join(gpuspec.Names(), ", "))
}

func (e *deviceEval) vram() Check {
	const id, title = CheckVRAM, "Visible VRAM vs spec"
	total := e.totalBytes()
	if total == 0 {
		why := e.probeWhy()
		if w := e.nvmlWhy(); w != "" {
			why += "; " + w
		}
		return notMeasured(id, title, why)
	}
	if e.spec == nil {
		return check(id, title, StatusWarn, "you see %s; no spec to compare it with", fmtGiB(total)).measuring(total, UnitBytes)
	}
	specBytes := float64(e.spec.MemoryBytes)
	share := total / specBytes
	var c Check
	switch {
	case e.d.MIG != nil:
		c = check(id, title, StatusWarn, "you see %s of %s's %s: a MIG slice (%s)", fmtGiB(total), e.specName(), fmtGiB(specBytes), e.d.MIG.Profile)
	case share >= VRAMWarnShare:
		c = check(id, title, StatusPass, "you see %s of %s's %s (%s)", fmtGiB(total), e.specName(), fmtGiB(specBytes), fmtPct(share))
	case share >= VRAMFailShare:
		c = check(id, title, StatusWarn, "you see %s of %s's %s (%s): more is held back than ECC or the driver need", fmtGiB(total), e.specName(), fmtGiB(specBytes), fmtPct(share))
	default:
		c = check(id, title, StatusFail, "you see %s of %s's %s: a vGPU profile or partition", fmtGiB(total), e.specName(), fmtGiB(specBytes))
	}
	return c.measuring(total, UnitBytes).against(specBytes, share)
}

func (e *deviceEval) vramExpected() Check {
	const id, title = CheckVRAMExpected, "Visible VRAM vs --expect.vram"
	want := float64(e.o.Expect.VRAMBytes)
	total := e.totalBytes()
	if total == 0 {
		return notMeasured(id, title, e.probeWhy())
	}
	status := StatusFail
	if total >= want*(1-ExpectVRAMTolerance) {
		status = StatusPass
	}
	return check(id, title, status, "you see %s; you expect %s", fmtGiB(total), fmtGiB(want)).measuring(total, UnitBytes).against(want, total/want)
}

func (e *deviceEval) vramFree() Check {
	const id, title = CheckVRAMFree, "VRAM free to a new context"
	f := e.d.Figures
	if f.MemoryFreeBytes == nil || f.MemoryTotalBytes == nil {
		return notMeasured(id, title, e.measurementWhy("memory"))
	}
	free, total := f.MemoryFreeBytes.Min, f.MemoryTotalBytes.Median
	msg := fmt.Sprintf("%s of %s free to a new context", fmtGiB(free), fmtGiB(total))
	status := StatusPass
	if free < total*FreeWarnShare {
		status = StatusWarn
		msg += fmt.Sprintf(": %s held by others (other processes, or a leak)", fmtGiB(total-free))
	}
	if u := f.MemoryUsableBytes; u != nil {
		stopped := e.fillStopped()
		msg += fmt.Sprintf("; the fill test allocated and touched %s (stopped: %s)", fmtGiB(u.Min), stopped)
		if stopped != "limit" && u.Min < free*FillWarnShare {
			status = StatusWarn
			msg += ": less than reported free"
		}
	}
	c := Check{ID: id, Title: title, Status: status, Reason: msg}
	if total > 0 {
		c = c.measuring(free, UnitBytes).against(total, free/total)
	}
	return c
}

func (e *deviceEval) fillStopped() string {
	for _, r := range e.d.Runs {
		if r.Result != nil && r.Result.Memory != nil && r.Result.Memory.FillStopped != "" {
			return r.Result.Memory.FillStopped
		}
	}
	return "unknown"
}

func (e *deviceEval) virtualization() Check {
	const id, title = CheckVirt, "Virtualization"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	n := e.d.NVML
	switch n.Virtualization {
	case "":
		why := n.Why("GetVirtualizationMode")
		if unsupported(n, "GetVirtualizationMode") {
			return check(id, title, StatusPass, "NVML reports no virtualization mode (%s): no vGPU", why)
		}
		return notMeasured(id, title, why)
	case VirtNone:
		return check(id, title, StatusPass, "none: bare metal or a container, no hypervisor shares the GPU")
	case VirtPassthrough:
		return check(id, title, StatusPass, "passthrough: the whole GPU is given to this VM, not shared by the hypervisor")
	case VirtVGPUGuest:
		return check(id, title, StatusWarn, "vGPU guest: shared by a hypervisor (NVIDIA vGPU); the GPU's time or memory is divided between VMs")
	case VirtHostVGPU:
		return check(id, title, StatusWarn, "host vGPU: this host shares its GPU out to VMs as vGPUs")
	case VirtHostVSGA:
		return check(id, title, StatusWarn, "host vSGA: this host shares its GPU out to VMs for graphics")
	}
	return check(id, title, StatusWarn, "unknown virtualization mode %s", n.Virtualization)
}

func (e *deviceEval) mig() Check {
	const id, title = CheckMIG, "MIG partitioning"
	if m := e.d.MIG; m != nil {
		return check(id, title, StatusWarn, "a MIG slice (%s) of the GPU: compute and memory are partitioned in hardware; you get %s of it", orDefault(m.Profile, m.Name), e.sliceShare())
	}
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	n := e.d.NVML
	switch {
	case n.MIGEnabled == nil:
		why := n.Why("GetMigMode")
		if unsupported(n, "GetMigMode") {
			return check(id, title, StatusPass, "MIG not supported on this GPU: the whole GPU")
		}
		return notMeasured(id, title, why)
	case *n.MIGEnabled:
		return check(id, title, StatusWarn, "MIG is on (%d instance(s)) but this CUDA device did not match one: a slice of a GPU", len(n.MIGInstances))
	}
	return check(id, title, StatusPass, "MIG off: the whole GPU")
}

// unsupported says whether NVML answered call with "not supported" (and
// no error): the GPU lacks the feature, which is a fact, not a gap.
func unsupported(n *GPUFacts, call string) bool {
	for _, e := range n.Errors {
		if e.Call == call {
			return false
		}
	}
	return slices.Contains(n.NotAvailable, call)
}

func (e *deviceEval) sliceShare() string {
	if e.spec == nil {
		return "a part"
	}
	comp, mem := e.shares()
	return fmt.Sprintf("%s of the SMs and %s of the memory", fmtPct(comp), fmtPct(mem))
}

func (e *deviceEval) computeMode() Check {
	const id, title = CheckComputeMode, "Compute mode"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	switch e.d.NVML.ComputeMode {
	case "":
		return notMeasured(id, title, e.d.NVML.Why("GetComputeMode"))
	case ComputeProhibited:
		return check(id, title, StatusFail, "prohibited: no CUDA context may be created on this GPU")
	case ComputeExclusiveProcess:
		return check(id, title, StatusPass, "exclusive process: one process at a time, nobody can share the GPU while you use it")
	case ComputeExclusiveThread:
		return check(id, title, StatusPass, "exclusive thread: one context at a time")
	case ComputeDefault:
		return check(id, title, StatusPass, "default: several processes may share the GPU (usual for a dedicated GPU)")
	}
	return check(id, title, StatusWarn, "unknown compute mode %s", e.d.NVML.ComputeMode)
}

func (e *deviceEval) processes() Check {
	const id, title = CheckProcesses, "Other processes"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	n := e.d.NVML
	if n.Processes == nil {
		return notMeasured(id, title, n.Why("GetComputeRunningProcesses", "GetGraphicsRunningProcesses", "GetMPSComputeRunningProcesses"))
	}
	if p := n.Processes; p.Count > 0 {
		pids := make([]string, 0, len(p.PIDs))
		for i, pid := range p.PIDs {
			if i == 5 {
				pids = append(pids, "…")
				break
			}
			pids = append(pids, fmt.Sprint(pid))
		}
		return check(id, title, StatusWarn, "%d other process(es) use this GPU (pid %s; %s): it is shared, unless they are yours", p.Count, strings.Join(pids, ", "), fmtGiB(float64(p.MemoryBytes)))
	}
	busy := n.UtilizationPct != nil && *n.UtilizationPct > UnseenBusyWarnPct
	held := n.Memory != nil && n.Memory.UsedBytes > UnseenUsedWarnBytes
	switch {
	case busy && held:
		return check(id, title, StatusWarn, "no process visible, yet NVML reports the GPU %d%% busy and %s of its memory in use: you are inside a VM or container, and that is somebody else", *n.UtilizationPct, fmtGiB(float64(n.Memory.UsedBytes)))
	case busy:
		return check(id, title, StatusWarn, "no process visible, yet NVML reports the GPU %d%% busy: you are inside a VM or container, and that is somebody else", *n.UtilizationPct)
	case held:
		return check(id, title, StatusWarn, "no process visible, yet %s of GPU memory is in use: you are inside a VM or container, and that is somebody else", fmtGiB(float64(n.Memory.UsedBytes)))
	}
	return check(id, title, StatusPass, "none visible (NVML cannot list processes of other VMs; the stolen-time check covers them)")
}

func (e *deviceEval) stolen() Check {
	const id, title = CheckStolen, "Stolen time (invisible neighbours)"
	f := e.d.Figures
	if f.StolenRatio == nil {
		return notMeasured(id, title, e.measurementWhy("stolen"))
	}
	raw := f.StolenRatio.Median
	st, split := e.invisible()
	med, runs := st.Median, st.N
	gaps := e.gapWords()
	// Who took the rest: the processes NVML shows, or nobody can tell.
	whose := "someone else's work"
	rest := ""
	switch {
	case split && raw-med > StolenWarnRatio:
		whose = "work of contexts NVML does not show"
		rest = fmt.Sprintf(" (%s stolen in all; the processes NVML shows busy explain the rest)", fmtPct(raw))
	case !split:
		rest = " (NVML cannot tell which part its visible processes took" + e.noSplitWhy() + ")"
	}
	switch {
	case med > StolenFailRatio:
		return check(id, title, StatusFail, "the GPU ran %s for %s of the watch window (median of %d runs)%s%s", whose, fmtPct(med), runs, rest, gaps).measuring(med, UnitRatio)
	case med > StolenWarnRatio:
		return check(id, title, StatusWarn, "the GPU ran %s for %s of the watch window (median of %d runs)%s%s", whose, fmtPct(med), runs, rest, gaps).measuring(med, UnitRatio)
	case st.Max > StolenFailRatio:
		seen := 0
		for _, r := range e.d.Runs {
			if v, ok := runInvisible(r, split); ok && v > StolenFailRatio {
				seen++
			}
		}
		return check(id, title, StatusWarn, "intermittent: %d of %d runs lost up to %s of the window to %s (median %s)%s%s", seen, runs, fmtPct(st.Max), whose, fmtPct(med), rest, gaps).measuring(med, UnitRatio)
	}
	// No context outside NVML's view took turns with the probe. That says
	// nothing of work that shares the GPU without pausing the probe.
	unseen := "MPS clients beside an MPS client, and contexts on other MIG instances, never pause the probe and do not show here"
	if e.d.MIG != nil {
		unseen = "other MIG instances never share this instance's SMs and do not show here"
	}
	var msg string
	if split && raw > StolenWarnRatio {
		msg = fmt.Sprintf("%s of the watch window went to the processes NVML shows busy (median of %d runs), %s to contexts it does not show: no invisible context took turns with the probe; %s", fmtPct(raw), runs, fmtPct(med), unseen)
	} else {
		msg = fmt.Sprintf("%s of the watch window lost to gaps (median of %d runs; worst block %s): no other context took turns with the probe; %s", fmtPct(raw), f.StolenRatio.N, fmtPct(f.StolenMaxRatio.Max), unseen)
	}
	return Check{ID: id, Title: title, Status: StatusPass, Reason: msg}.measuring(med, UnitRatio)
}

// invisible is the stolen time the device is judged on: the part the
// processes NVML shows do not explain when every run could tell (split),
// else the raw ratio; nil when stolen time was not measured.
func (e *deviceEval) invisible() (*Stat, bool) {
	f := e.d.Figures
	if f.StolenRatio == nil {
		return nil, false
	}
	if u := f.UnexplainedStolenRatio; u != nil && u.N == f.StolenRatio.N {
		return u, true
	}
	return f.StolenRatio, false
}

// explainedStolen is the median share of the probe's window the processes
// NVML shows busy took (stolen less unexplained); 0 when it cannot tell.
func (e *deviceEval) explainedStolen() float64 {
	f := e.d.Figures
	if u, split := e.invisible(); split {
		return max(0, f.StolenRatio.Median-u.Median)
	}
	return 0
}

// timeSliced: the measurement runs kernels, which take turns with other
// contexts (copies over PCIe do not in this model).
func timeSliced(measurement string) bool {
	switch measurement {
	case gpuprobe.MeasureDeviceCopy, gpuprobe.MeasureFP32, gpuprobe.MeasureFP16, gpuprobe.MeasureBF16:
		return true
	}
	return false
}

// runInvisible is one run's figure as invisible judges it.
func runInvisible(r ProbeRun, split bool) (float64, bool) {
	if r.Result == nil || r.Result.Stolen == nil {
		return 0, false
	}
	if split {
		if r.UnexplainedStolenRatio == nil {
			return 0, false
		}
		return *r.UnexplainedStolenRatio, true
	}
	return r.Result.Stolen.Ratio, true
}

// noSplitWhy says why the stolen time could not be split.
func (e *deviceEval) noSplitWhy() string {
	switch {
	case e.d.MIG != nil:
		return ": no per-process utilisation on a MIG instance"
	case e.d.NVML == nil:
		return ": no NVML"
	}
	return ""
}

// gapWords says what the gap lengths suggest.
func (e *deviceEval) gapWords() string {
	f := e.d.Figures
	if f.StolenGapMedianSeconds == nil {
		return ""
	}
	med := time.Duration(f.StolenGapMedianSeconds.Median * float64(time.Second))
	s := "; gaps of " + fmtDuration(med) + " median"
	if p := f.StolenGapP90Seconds; p != nil {
		s += ", " + fmtSeconds(p.Median) + " p90"
	}
	if m := f.StolenGapMaxSeconds; m != nil {
		s += ", " + fmtSeconds(m.Max) + " max"
	}
	if med >= TimeSliceMin {
		return s + ": time-slicing with another context, in slices of about " + fmtDuration(med)
	}
	return s + ": short preemptions by other work (another context's kernels, MPS clients or the driver)"
}

// figure judges one throughput figure against its expected value.
func (e *deviceEval) figure(id, title, measurement string, st *Stat, expected float64, unitName string, unit func(float64) string) Check {
	if st == nil {
		return notMeasured(id, title, e.measurementWhy(measurement))
	}
	got := unit(st.Median)
	if st.N > 1 {
		got += fmt.Sprintf(" (median of %d, %s–%s)", st.N, unit(st.Min), unit(st.Max))
	}
	if expected <= 0 {
		return check(id, title, StatusWarn, "%s; no reference: the model is not in the spec table", got).measuring(st.Median, unitName)
	}
	share := st.Median / expected
	// Kernels are time-sliced with the processes NVML shows busy (yours,
	// usually): judge what the GPU delivers per unit of the GPU time they
	// left to the probe.
	visible := ""
	if ex := e.explainedStolen(); timeSliced(measurement) && ex > StolenWarnRatio {
		share /= 1 - ex
		visible = fmt.Sprintf(", per unit of the GPU time the processes NVML shows busy left to the probe (they took %s)", fmtPct(ex))
	}
	ref := fmt.Sprintf("%s of the %s a healthy %s reaches%s", fmtPct(share), unit(expected), e.spec.Model, visible)
	if e.d.MIG != nil {
		ref = fmt.Sprintf("%s of the %s a healthy %s slice of this size reaches%s", fmtPct(share), unit(expected), e.spec.Model, visible)
	}
	if e.spec.Estimated() {
		ref += " (estimate)"
	}
	var c Check
	switch {
	case share < FigureFailShare:
		c = check(id, title, StatusFail, "%s: %s%s", got, ref, e.underWhy())
	case share < FigureWarnShare:
		c = check(id, title, StatusWarn, "%s: %s%s", got, ref, e.underWhy())
	default:
		c = check(id, title, StatusPass, "%s: %s", got, ref)
	}
	return c.measuring(st.Median, unitName).against(expected, share)
}

// underWhy names what NVML saw that explains a low figure.
func (e *deviceEval) underWhy() string {
	var why []string
	if n := e.d.NVML; n != nil {
		if l := n.UnderLoad; l != nil {
			for _, r := range l.Reasons {
				if reason, ok := clockevent.Lookup(r); ok && reason.Kind != clockevent.KindNone {
					why = append(why, reason.Words)
				}
			}
		}
		if p := n.Power; p != nil && p.DefaultW > 0 && p.LimitW > 0 && p.LimitW < p.DefaultW*(1-PowerLimitTolerance) {
			why = append(why, fmt.Sprintf("power limit %s W of %s W", trim(p.LimitW, 0), trim(p.DefaultW, 0)))
		}
	}
	if st, split := e.invisible(); st != nil && st.Median > StolenWarnRatio {
		if split {
			why = append(why, fmt.Sprintf("%s of the time stolen by contexts NVML does not show", fmtPct(st.Median)))
		} else {
			why = append(why, fmt.Sprintf("%s of the time stolen", fmtPct(st.Median)))
		}
	}
	if len(why) == 0 {
		return ""
	}
	return "; seen under load: " + strings.Join(why, ", ")
}

func (e *deviceEval) launch() Check {
	const id, title = CheckLaunch, "Kernel launch latency"
	st := e.d.Figures.LaunchLatencySeconds
	if st == nil {
		return notMeasured(id, title, e.measurementWhy("launch"))
	}
	med := time.Duration(st.Median * float64(time.Second))
	msg := "an empty kernel's round trip takes " + fmtDuration(med) + " (median)"
	if p := e.d.Figures.LaunchLatencyP99Seconds; p != nil {
		msg += ", " + fmtSeconds(p.Max) + " p99"
	}
	if med > LaunchLatencyWarn {
		return Check{ID: id, Title: title, Status: StatusWarn, Reason: msg + ": a slow path (virtualised, remote or contended)"}.measuring(st.Median, UnitSeconds)
	}
	return Check{ID: id, Title: title, Status: StatusPass, Reason: msg}.measuring(st.Median, UnitSeconds)
}

func (e *deviceEval) variability() Check {
	const id, title = CheckVariability, "Stability between runs"
	f := e.d.Figures
	var worst string
	var worstCV float64
	for _, x := range []struct {
		name string
		st   *Stat
	}{
		{"device memory bandwidth", f.DeviceCopyBytesPerSecond},
		{"FP32", f.FP32FLOPS},
		{"FP16 tensor", f.FP16TensorFLOPS},
		{"BF16 tensor", f.BF16TensorFLOPS},
	} {
		if x.st != nil && x.st.N >= CVMinRuns && x.st.CV > worstCV {
			worst, worstCV = x.name, x.st.CV
		}
	}
	if worst == "" {
		return notMeasured(id, title, fmt.Sprintf("fewer than %d runs measured the throughput", CVMinRuns))
	}
	if worstCV > CVWarn {
		return check(id, title, StatusWarn, "%s varies by %s between runs (coefficient of variation): something else uses the GPU at times", worst, fmtPct(worstCV)).measuring(worstCV, UnitRatio)
	}
	return check(id, title, StatusPass, "figures vary by at most %s between runs (%s)", fmtPct(worstCV), worst).measuring(worstCV, UnitRatio)
}

// link is the PCIe link to judge: the best seen under load, else at rest.
func (e *deviceEval) link() (gen, width, maxGen, maxWidth int, underLoad bool, ok bool) {
	n := e.d.NVML
	if n == nil || n.PCIe == nil {
		return
	}
	gen, width, maxGen, maxWidth, ok = n.PCIe.CurrentGen, n.PCIe.CurrentWidth, n.PCIe.MaxGen, n.PCIe.MaxWidth, true
	if l := n.UnderLoad; l != nil && l.PCIeGen > 0 && l.PCIeWidth > 0 && e.probeWhy() == "" {
		gen, width, underLoad = max(gen, l.PCIeGen), max(width, l.PCIeWidth), true
	}
	return
}

func (e *deviceEval) pcie() Check {
	const id, title = CheckPCIe, "PCIe link"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	gen, width, maxGen, maxWidth, underLoad, ok := e.link()
	if !ok {
		return notMeasured(id, title, e.d.NVML.Why("GetCurrPcieLinkGeneration", "GetMaxPcieLinkGeneration", "GetCurrPcieLinkWidth", "GetMaxPcieLinkWidth"))
	}
	when := "under load"
	if !underLoad {
		when = "at rest"
	}
	cur := fmt.Sprintf("Gen%d x%d %s (the link supports Gen%d x%d)", gen, width, when, maxGen, maxWidth)
	var c Check
	switch {
	case width < maxWidth:
		c = check(id, title, StatusFail, "%s: %d of %d lanes, %s of the host bandwidth", cur, width, maxWidth, fmtPct(float64(width)/float64(maxWidth)))
	case gen < maxGen && underLoad:
		c = check(id, title, StatusWarn, "%s: the link trained below its generation", cur)
	case e.spec != nil && maxGen < e.spec.PCIeGen:
		c = check(id, title, StatusWarn, "%s: the slot or host caps the link below the %s's Gen%d", cur, e.spec.Model, e.spec.PCIeGen)
	case gen < maxGen:
		c = check(id, title, StatusPass, "%s: the generation drops at rest to save power", cur)
	default:
		c = check(id, title, StatusPass, "%s", cur)
	}
	c = c.measuring(float64(width), UnitLanes)
	if maxWidth > 0 {
		c = c.against(float64(maxWidth), float64(width)/float64(maxWidth))
	}
	return c
}

func (e *deviceEval) pcieExpected() Check {
	const id, title = CheckPCIeExpected, "PCIe link vs --expect.pcie"
	want := fmt.Sprintf("Gen%d", e.o.Expect.PCIeGen)
	if e.o.Expect.PCIeWidth > 0 {
		want += fmt.Sprintf(" x%d", e.o.Expect.PCIeWidth)
	}
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	gen, width, maxGen, _, underLoad, ok := e.link()
	if !ok {
		return notMeasured(id, title, e.d.NVML.Why("GetCurrPcieLinkGeneration", "GetCurrPcieLinkWidth"))
	}
	if !underLoad {
		// At rest the generation may have dropped; judge what it can reach.
		gen = maxGen
	}
	got := fmt.Sprintf("Gen%d x%d", gen, width)
	if gen < e.o.Expect.PCIeGen || width < e.o.Expect.PCIeWidth {
		return check(id, title, StatusFail, "the link runs at %s; you expect %s", got, want)
	}
	return check(id, title, StatusPass, "the link runs at %s; you expect %s", got, want)
}

// throttle judges the clock event reasons seen under load. A software
// power cap alone, at the default power limit and with every throughput
// figure where it should be, is how GPU Boost works under a dense kernel:
// it passes, saying so (figuresOK: every throughput check passed).
func (e *deviceEval) throttle(figuresOK bool) Check {
	const id, title = CheckThrottle, "Throttling under load"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	l := e.d.NVML.UnderLoad
	if w := e.probeWhy(); w != "" || l == nil {
		return notMeasured(id, title, "the GPU was never under load: "+orDefault(w, "no samples"))
	}
	if len(l.Errors) > 0 && l.ClockEventReasons == 0 && l.ReasonSamples == nil {
		return notMeasured(id, title, "NVML "+l.Errors[0].Call+": "+l.Errors[0].Err)
	}
	clock := ""
	if l.MinSMClockMHz > 0 {
		clock = fmt.Sprintf("; SM clock %d–%d MHz", l.MinSMClockMHz, l.MaxSMClockMHz)
		if m := e.d.NVML.MaxSMClockMHz; m > 0 {
			clock += fmt.Sprintf(" of max %d MHz", m)
		}
	}
	var hw, sw []string
	for _, r := range l.Reasons {
		reason, ok := clockevent.Lookup(r)
		if !ok || reason.Kind == clockevent.KindNone {
			continue // idle, application clocks, sync boost, display: benign
		}
		desc := fmt.Sprintf("%s in %d of %d samples", reason.Words, l.ReasonSamples[r], l.Samples)
		switch {
		case reason.Hardware || reason.Kind == clockevent.KindThermal:
			hw = append(hw, desc)
		default:
			sw = append(sw, desc)
		}
	}
	capOnly := l.ClockEventReasons&^(clockevent.GpuIdle|clockevent.ApplicationsClocks|clockevent.SyncBoost|clockevent.DisplayClockSetting) == clockevent.SwPowerCap
	p := e.d.NVML.Power
	atDefault := p != nil && p.DefaultW > 0 && p.LimitW >= p.DefaultW*(1-PowerLimitTolerance)
	switch {
	case len(hw) > 0:
		return check(id, title, StatusFail, "%s%s", strings.Join(append(hw, sw...), "; "), clock)
	case len(sw) > 0 && capOnly && atDefault && figuresOK:
		return check(id, title, StatusPass, "%s%s, at the default power limit with every figure as expected: normal under a dense kernel", strings.Join(sw, "; "), clock)
	case len(sw) > 0:
		return check(id, title, StatusWarn, "%s%s", strings.Join(sw, "; "), clock)
	}
	return check(id, title, StatusPass, "no throttling seen in %d samples under load%s", l.Samples, clock)
}

func (e *deviceEval) powerLimit() Check {
	const id, title = CheckPowerLimit, "Power limit"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	p := e.d.NVML.Power
	if p == nil || p.LimitW == 0 || p.DefaultW == 0 {
		return notMeasured(id, title, orDefault(e.d.NVML.Why("GetPowerManagementLimit", "GetPowerManagementDefaultLimit"), "NVML gave no power limits"))
	}
	c := check(id, title, StatusPass, "%s W (the default is %s W)", trim(p.LimitW, 0), trim(p.DefaultW, 0))
	if p.LimitW < p.DefaultW*(1-PowerLimitTolerance) {
		c = check(id, title, StatusWarn, "%s W of the default %s W (%s): the power is capped; expect lower clocks under load", trim(p.LimitW, 0), trim(p.DefaultW, 0), fmtPct(p.LimitW/p.DefaultW))
	}
	return c.measuring(p.LimitW, UnitWatts).against(p.DefaultW, p.LimitW/p.DefaultW)
}

func (e *deviceEval) eccMode() Check {
	const id, title = CheckECCMode, "ECC"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	ecc := e.d.NVML.ECC
	if ecc == nil {
		return check(id, title, StatusWarn, "ECC %s: memory errors go undetected", orDefault(e.d.NVML.Why("GetEccMode"), "not reported"))
	}
	if !ecc.Enabled {
		msg := "ECC is off: memory errors go undetected"
		if ecc.PendingEnabled {
			msg += " (on after the next reset)"
		}
		return Check{ID: id, Title: title, Status: StatusWarn, Reason: msg}
	}
	return check(id, title, StatusPass, "ECC is on: memory errors are detected and single-bit ones corrected")
}

func (e *deviceEval) eccErrors() Check {
	const id, title = CheckECCErrors, "Uncorrected ECC errors"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	ecc := e.d.NVML.ECC
	if ecc == nil || !ecc.Enabled {
		return notMeasured(id, title, "ECC is off or not available")
	}
	if ecc.UncorrectedAggregate == nil && ecc.UncorrectedVolatile == nil {
		return notMeasured(id, title, e.d.NVML.Why("GetTotalEccErrors(uncorrected,aggregate)", "GetTotalEccErrors(uncorrected,volatile)"))
	}
	var bad []string
	if v := ecc.UncorrectedVolatile; v != nil && *v > 0 {
		bad = append(bad, fmt.Sprintf("%d since the driver loaded", *v))
	}
	if a := ecc.UncorrectedAggregate; a != nil && *a > 0 {
		bad = append(bad, fmt.Sprintf("%d over the GPU's life", *a))
	}
	if len(bad) > 0 {
		return check(id, title, StatusFail, "uncorrected ECC errors: %s: this GPU has lost data before", strings.Join(bad, ", "))
	}
	return check(id, title, StatusPass, "no uncorrected ECC errors")
}

func (e *deviceEval) retirement() Check {
	const id, title = CheckRetirement, "Row remapping / page retirement"
	if w := e.nvmlWhy(); w != "" {
		return notMeasured(id, title, w)
	}
	n := e.d.NVML
	if rr := n.RemappedRows; rr != nil {
		switch {
		case rr.Failure:
			return check(id, title, StatusFail, "a row remap failed: the GPU cannot heal its memory any more and should be replaced")
		case rr.Pending:
			return check(id, title, StatusFail, "a row remap is pending: the GPU needs a reset to heal (%d rows remapped after uncorrectable errors)", rr.Uncorrectable)
		case rr.Uncorrectable > 0:
			return check(id, title, StatusWarn, "%d row(s) remapped after uncorrectable errors, %d after correctable ones: healed, watch for more", rr.Uncorrectable, rr.Correctable)
		}
		return check(id, title, StatusPass, "no rows remapped after uncorrectable errors (%d after correctable ones); none pending", rr.Correctable)
	}
	if rp := n.RetiredPages; rp != nil {
		switch {
		case rp.Pending:
			return check(id, title, StatusFail, "a page retirement is pending: the GPU needs a reset")
		case rp.DoubleBit+rp.MultipleSingleBit > 0:
			return check(id, title, StatusFail, "%d page(s) retired (%d double-bit, %d repeated single-bit errors)", rp.DoubleBit+rp.MultipleSingleBit, rp.DoubleBit, rp.MultipleSingleBit)
		}
		return check(id, title, StatusPass, "no retired pages")
	}
	return notMeasured(id, title, orDefault(n.Why("GetRemappedRows", "GetRetiredPages(double_bit)", "GetRetiredPagesPendingStatus"), "not reported"))
}

func (e *deviceEval) probeErrors() Check {
	const id, title = CheckProbeErrors, "Probe errors"
	if len(e.d.Runs) == 0 {
		return check(id, title, StatusFail, "the probe did not run on this device")
	}
	var errs []string
	n, skipped := 0, 0
	for i, r := range e.d.Runs {
		if r.Error != "" {
			n++
			errs = append(errs, fmt.Sprintf("run %d: %s", i+1, r.Error))
			continue
		}
		if r.Result == nil {
			skipped++ // left the GPU alone (r.Skipped): not an error
			continue
		}
		for _, me := range r.Result.Errors {
			n++
			errs = append(errs, fmt.Sprintf("run %d: %s: %s", i+1, me.Measurement, me.Err))
		}
	}
	if n == 0 && skipped == len(e.d.Runs) {
		return notMeasured(id, title, e.probeWhy())
	}
	if n == 0 {
		return check(id, title, StatusPass, "every measurement of every run completed")
	}
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Sprintf("and %d more", len(errs)-3))
	}
	if e.probeWhy() != "" {
		return check(id, title, StatusFail, "no probe of this device completed: %s", strings.Join(errs, "; "))
	}
	return check(id, title, StatusWarn, "%d measurement error(s): %s", n, strings.Join(errs, "; "))
}
