package verify

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

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
