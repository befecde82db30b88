package verify

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpulens/gpulens/internal/clockevent"
)

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
