package verify

import (
	"fmt"
	"strings"

	"github.com/gpulens/gpulens/internal/clockevent"
)

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
