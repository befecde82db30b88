package verify

import (
	"fmt"
	"strings"

	"github.com/gpulens/gpulens/internal/gpuspec"
)

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
