package verify

import (
	"fmt"
	"strings"
)

// Buyer's questions, by answer ID.
const (
	AnswerSharing  = "sharing"
	AnswerVRAM     = "vram"
	AnswerReserved = "reserved"
	AnswerLatency  = "neighbours"
	AnswerVersions = "versions"
	AnswerFailure  = "failure_handling"
)

var questions = map[string]string{
	AnswerSharing:  "Shared, partitioned or dedicated?",
	AnswerVRAM:     "How much VRAM is usable?",
	AnswerReserved: "Are compute and memory bandwidth reserved?",
	AnswerLatency:  "Do neighbours affect latency?",
	AnswerVersions: "Are CUDA and the driver what you need?",
	AnswerFailure:  "What happens when the GPU fails?",
}

// Question returns the question an answer ID stands for.
func Question(id string) string { return questions[id] }

func byID(cs []Check) map[string]Check {
	m := make(map[string]Check, len(cs))
	for _, c := range cs {
		m[c.ID] = c
	}
	return m
}

// worst is the worst verdict among the checks with these IDs (pass when
// none is present).
func worst(m map[string]Check, ids ...string) Status {
	s := StatusPass
	for _, id := range ids {
		if c, ok := m[id]; ok {
			s = Worse(s, c.Status)
		}
	}
	return s
}

func (e *deviceEval) answers() []Answer {
	m := byID(e.d.Checks)
	answer := func(id string, status Status, text string) Answer {
		return Answer{ID: id, Question: questions[id], Status: status, Answer: text}
	}
	return []Answer{
		answer(AnswerSharing, worst(m, CheckVirt, CheckMIG, CheckProcesses, CheckStolen, CheckComputeMode), e.sharing(m)),
		answer(AnswerVRAM, worst(m, CheckVRAM, CheckVRAMExpected, CheckVRAMFree), e.usableVRAM(m)),
		answer(AnswerReserved, worst(m, CheckDeviceCopy, CheckFP32, CheckFP16, CheckBF16, CheckThrottle, CheckPowerLimit, CheckPCIe),
			e.reserved(m)),
		answer(AnswerLatency, worst(m, CheckStolen, CheckVariability, CheckLaunch), e.neighbours(m)),
		answer(AnswerFailure, worst(m, CheckECCMode, CheckECCErrors, CheckRetirement), e.failure(m)),
	}
}

func (e *deviceEval) sharing(m map[string]Check) string {
	var how []string
	kind := "dedicated"
	if mig := e.d.MIG; mig != nil {
		kind = "partitioned"
		how = append(how, fmt.Sprintf("a MIG slice (%s) of %s, isolated in hardware", orDefault(mig.Profile, mig.Name), e.specNameOr("a GPU")))
	}
	if n := e.d.NVML; n != nil {
		switch n.Virtualization {
		case VirtVGPUGuest:
			kind = "shared"
			how = append(how, "by a hypervisor (NVIDIA vGPU guest)")
		case VirtHostVGPU, VirtHostVSGA:
			kind = "shared"
			how = append(how, "this host shares its GPU out to VMs")
		}
		if p := n.Processes; p != nil && p.Count > 0 {
			kind = "shared"
			how = append(how, fmt.Sprintf("with %d other visible process(es)", p.Count))
		}
	}
	if st, _ := e.invisible(); st != nil && (st.Median > StolenWarnRatio || st.Max > StolenFailRatio) {
		kind = "shared"
		s := fmt.Sprintf("time-sliced with a neighbour you cannot see, which took %s of the GPU time", fmtPct(st.Median))
		if st.Median <= StolenWarnRatio {
			s = fmt.Sprintf("time-sliced at times: up to %s of the GPU time went to a neighbour you cannot see", fmtPct(st.Max))
		}
		if g := e.d.Figures.StolenGapMedianSeconds; g != nil {
			s += " in slices of about " + fmtSeconds(g.Median)
		}
		how = append(how, s)
	}
	if kind == "dedicated" {
		var parts []string
		if n := e.d.NVML; n != nil && n.Virtualization == VirtPassthrough {
			parts = append(parts, "the whole GPU, passed through to this VM")
		} else {
			parts = append(parts, "the whole GPU, no hypervisor sharing it")
		}
		if c, ok := m[CheckProcesses]; ok && !c.NotMeasured {
			parts = append(parts, "no other process visible")
		}
		if st, _ := e.invisible(); st != nil {
			parts = append(parts, fmt.Sprintf("no time taken by contexts NVML does not show (%s)", fmtPct(st.Median)))
		} else {
			parts = append(parts, "stolen time not measured")
		}
		return "dedicated: " + strings.Join(parts, ", ")
	}
	return kind + ": " + strings.Join(how, "; ")
}

func (e *deviceEval) specNameOr(def string) string {
	if e.spec == nil {
		return def
	}
	return "an " + e.spec.Model
}

func (e *deviceEval) usableVRAM(m map[string]Check) string {
	f := e.d.Figures
	total := e.totalBytes()
	var s string
	switch {
	case f.MemoryUsableBytes != nil:
		s = fmt.Sprintf("%s allocated and touched, %s free to a new context, of %s visible", fmtGiB(f.MemoryUsableBytes.Min), fmtGiB(f.MemoryFreeBytes.Min), fmtGiB(total))
	case f.MemoryFreeBytes != nil:
		s = fmt.Sprintf("%s free to a new context, of %s visible", fmtGiB(f.MemoryFreeBytes.Min), fmtGiB(total))
	case total > 0:
		s = fmt.Sprintf("%s visible (free memory not measured)", fmtGiB(total))
	default:
		return "not measured"
	}
	if e.spec != nil {
		s += fmt.Sprintf("; the %s has %s", e.spec.Model, fmtGiB(float64(e.spec.MemoryBytes)))
	}
	if c := m[CheckVRAM]; c.Status != StatusPass {
		s += " (" + c.Reason + ")"
	}
	return s
}

func (e *deviceEval) reserved(m map[string]Check) string {
	type fig struct {
		id, name string
		st       *Stat
	}
	f := e.d.Figures
	var ok, low, missing []string
	for _, x := range []fig{
		{CheckDeviceCopy, "memory bandwidth", f.DeviceCopyBytesPerSecond},
		{CheckFP32, "FP32", f.FP32FLOPS},
		{CheckFP16, "FP16 tensor", f.FP16TensorFLOPS},
		{CheckBF16, "BF16 tensor", f.BF16TensorFLOPS},
	} {
		c, judged := m[x.id]
		switch {
		case !judged || c.NotMeasured || x.st == nil:
			missing = append(missing, x.name)
		case c.Share == nil:
			ok = append(ok, x.name+" unjudged")
		case c.Status == StatusPass:
			ok = append(ok, x.name+" "+fmtPct(*c.Share))
		default:
			low = append(low, x.name+" "+fmtPct(*c.Share))
		}
	}
	var s string
	switch {
	case len(low) > 0:
		s = "no: " + strings.Join(low, ", ") + " of a healthy card"
		if len(ok) > 0 {
			s += " (" + strings.Join(ok, ", ") + ")"
		}
	case len(ok) > 0 && e.spec != nil:
		s = "yes: " + strings.Join(ok, ", ") + " of a healthy " + e.spec.Model
	case len(ok) > 0:
		s = "measured, not judged (no spec): " + strings.Join(ok, ", ")
	default:
		return "not measured: " + e.probeWhy()
	}
	if len(missing) > 0 {
		s += "; not measured: " + strings.Join(missing, ", ")
	}
	for _, id := range []string{CheckThrottle, CheckPowerLimit, CheckPCIe} {
		if c, ok := m[id]; ok && c.Status != StatusPass && !c.NotMeasured {
			s += "; " + strings.ToLower(c.Title) + ": " + c.Reason
		}
	}
	return s
}

func (e *deviceEval) neighbours(m map[string]Check) string {
	var parts []string
	verdict := "no"
	if c, ok := m[CheckStolen]; ok {
		if st := e.d.Figures.StolenRatio; st != nil {
			if u, split := e.invisible(); split {
				parts = append(parts, fmt.Sprintf("%s of the GPU time stolen, %s by contexts NVML does not show", fmtPct(st.Median), fmtPct(u.Median)))
			} else {
				parts = append(parts, fmt.Sprintf("%s of the GPU time stolen", fmtPct(st.Median)))
			}
		}
		if c.Status != StatusPass {
			if c.NotMeasured {
				verdict = "unknown"
			} else {
				verdict = "yes"
			}
		}
	}
	if c, ok := m[CheckVariability]; ok && !c.NotMeasured {
		if c.Status != StatusPass && verdict != "yes" {
			verdict = "likely"
		}
		parts = append(parts, c.Reason)
	}
	if st := e.d.Figures.LaunchLatencySeconds; st != nil {
		parts = append(parts, "kernel round trip "+fmtSeconds(st.Median))
	}
	if len(parts) == 0 {
		return "unknown: " + e.measurementWhy("stolen")
	}
	return verdict + ": " + strings.Join(parts, "; ")
}

func (e *deviceEval) failure(m map[string]Check) string {
	var parts []string
	for _, id := range []string{CheckECCMode, CheckECCErrors, CheckRetirement} {
		if c, ok := m[id]; ok {
			parts = append(parts, c.Reason)
		}
	}
	return strings.Join(parts, "; ") + ". gpulens cannot test the provider's repair or replacement policy: ask for it"
}
