package gpuprobe

import (
	"slices"
	"time"
)

// The unexplained stolen time: the part of the probe's stolen time that the
// contexts NVML shows on the GPU do not explain, worked out per stolen-time
// window (StolenResult.Windows) from NVML's per-process utilisation samples
// as NVML documents them (docs/metrics.md, "Stolen time", states the
// bounds and their error):
//
//   - a sample of process q at time ts says q's SM utilisation u over the
//     sample period (ts − P, ts]: q ran u·P of it;
//   - a process that did not run in a period has no sample for it (NVML
//     emits no 0 % samples): a period without a sample of q is 0 for q;
//   - so a window is judged only once NVML has been read up to its end
//     plus a period (every sample whose period overlaps it exists), and
//     only if NVML shows any sample overlapping it at all while the probe,
//     busy in it, ran (else NVML does not see this GPU's contexts: a
//     process list or sample buffer NOT_FOUND on a busy GPU is unknown,
//     not "nobody").
//
// Within a window of length W where the probe lost the share r (its raw
// ratio) and got p = 1 − r, a visible context c (a process, or the MPS
// server's context with its clients) ran for a time inside the window of
// which the samples give bounds: from sample (ts, u) overlapping the window
// by o, at most min(o, u·P) and at least max(0, u·P − (P − o)); and under
// the driver's round-robin time-slicing at most p·W (an equal turn with the
// probe, which always had work queued). The figure is the least the
// visible contexts can leave unexplained,
//
//	lower = max(0, r·W − Σ_c min(p·W, Σ_samples min(o, u·P))) / W,
//
// so a visible tenant is never counted as a neighbour however its busy time
// fell inside its sample periods (a bursty tenant busy only inside the
// window, or whose load locks onto the probe's interval); Upper is the
// most (the same with the lower bounds of c's time), and Upper − Ratio is
// the estimate's error bound: 0 when every sample period lies inside a
// window or has no sample, and up to min(r, p) per window when a period
// much longer than the window holds a busy visible tenant (NVML cannot tell
// then whether the tenant or an invisible neighbour took the window). The
// run's figure is the windows' figures weighted by their length: the share
// of the watched time, as the raw ratio is.

// Reasons an unexplained figure is not known (Unexplained.Reason), the
// reason label of gpulens_probe_unexplained_stolen_time_unknown.
const (
	// UnknownNoProcessUtilization: nothing reads NVML's per-process
	// utilisation for this GPU (no NVML, or the exporter's process
	// collectors are off).
	UnknownNoProcessUtilization = "no_process_utilization"
	// UnknownMIG: a MIG instance; NVML has no per-process utilisation
	// there.
	UnknownMIG = "mig"
	// UnknownUtilizationFailed: reading the per-process utilisation
	// failed (an NVML error other than NOT_FOUND or NOT_SUPPORTED).
	UnknownUtilizationFailed = "utilization_read_failed"
	// UnknownSamplesNotRead: NVML's samples were not read up to a
	// window's end plus a sample period in time.
	UnknownSamplesNotRead = "samples_not_read"
	// UnknownNoSamples: NVML showed no sample at all (not even the
	// probe's own) over a window in which the probe ran and lost time:
	// its per-process samples do not see this GPU's contexts.
	UnknownNoSamples = "no_samples_during_probe"
	// UnknownNoWindows: the stolen-time result has no windows to judge.
	UnknownNoWindows = "no_windows"
)

// UnknownReasons lists every reason.
var UnknownReasons = []string{UnknownNoProcessUtilization, UnknownMIG, UnknownUtilizationFailed, UnknownSamplesNotRead, UnknownNoSamples, UnknownNoWindows}

// Bases of an unexplained figure (Unexplained.Basis), the basis label of
// gpulens_probe_unexplained_stolen_time_ratio.
const (
	// BasisVisible: the raw ratio less what NVML's visible processes
	// explain (EstimateUnexplained).
	BasisVisible = "visible_processes"
	// BasisRaw: NVML has no per-process utilisation on this GPU
	// (NOT_SUPPORTED, as in a vGPU guest): the raw stolen ratio, nothing
	// subtracted, so the tenant's own busy processes beside the probe
	// count too (RawUnexplained).
	BasisRaw = "raw"
)

// ProcessSample is one of NVML's per-process utilisation samples
// (nvmlProcessUtilizationSample_t).
type ProcessSample struct {
	PID uint32
	// Time is the sample's CPU timestamp (NVML's µs): the end of the
	// sample period it covers.
	Time time.Time
	SM   float64 // SM utilisation over the period, 0-1
}

// NVMLSample is a ProcessSample from an NVML sample's fields: its PID,
// timestamp (µs) and SM utilisation (percent).
func NVMLSample(pid uint32, timeStampMicros uint64, smPercent uint32) ProcessSample {
	return ProcessSample{PID: pid, Time: time.UnixMicro(int64(timeStampMicros)), SM: float64(smPercent) / 100}
}

// NVMLActivity is what NVML showed of one GPU's processes around a probe.
type NVMLActivity struct {
	// Samples are NVML's per-process samples near the probe's windows,
	// of every process (the probe's own included: they show NVML sees
	// the GPU's contexts).
	Samples []ProcessSample
	// ReadUpTo is when NVML's samples were last read: every sample
	// stamped up to then is in Samples, as far as the driver had
	// reported it (see Final).
	ReadUpTo time.Time
	// Final is the caller's last look. A driver reports a period once it
	// is over by its own clock, which can lag the reader's: until some
	// sample (the probe's own included: it is busy through its windows)
	// reaches a window's end, the window waits (UnknownSamplesNotRead);
	// on the last look it is judged with what NVML showed
	// (UnknownNoSamples when nothing).
	Final bool
	// Period is NVML's sample period; 0: the smallest gap between two
	// samples of one process in Samples (SamplePeriod).
	Period time.Duration
	// Probe lists the probe's own PIDs as NVML reports them: not tenants.
	Probe []uint32
	// MPSClients run inside the MPS server's context: they and the
	// server (MPSServer, when known) are one context (MPSContext), which
	// takes turns with the probe like any other and whose time is at
	// most one equal turn, whichever of them NVML's samples name.
	MPSClients []uint32
	MPSServer  []uint32
}

// MPSContext is the key of the MPS server's context in
// UnexplainedWindow.Visible.
const MPSContext = 0

// Unexplained is the unexplained stolen time of one probe.
type Unexplained struct {
	// Basis is BasisVisible or BasisRaw; "" when unknown.
	Basis string `json:"basis,omitempty"`
	// Ratio is the figure: the least share of the watched time that
	// contexts NVML does not show can have taken (see above), the
	// windows' figures weighted by their length.
	Ratio float64 `json:"ratio"`
	// Upper is the most that share can be; Upper − Ratio is the error
	// bound of the figure.
	Upper float64 `json:"upper"`
	// Period is the sample period used (0 with BasisRaw or unknown).
	Period time.Duration `json:"sample_period_ns,omitempty"`
	// Windows are the per-window figures, in StolenResult.Windows order.
	Windows []UnexplainedWindow `json:"windows,omitempty"`
	// Reason is why the figure is unknown (one of UnknownReasons), ""
	// when known.
	Reason string `json:"reason,omitempty"`
}

// Known reports whether u holds a figure.
func (u Unexplained) Known() bool { return u.Reason == "" && u.Basis != "" }

// UnexplainedWindow is one window's unexplained share.
type UnexplainedWindow struct {
	Ratio float64 `json:"ratio"` // the least unexplained share
	Upper float64 `json:"upper"` // the most
	// Visible is, per visible context (a PID, or MPSContext), the most of
	// the window it can have taken (bounded by the probe's share).
	Visible map[uint32]float64 `json:"visible,omitempty"`
	Reason  string             `json:"reason,omitempty"` // why it could not be judged
}

// Allowances of the bounds.
const (
	// utilStep is NVML's utilisation resolution (1 %): a sample's u may
	// be up to this much below or above the process's true share.
	utilStep = 0.01
	// periodSlack widens an inferred sample period for the upper bound
	// of a process's time (timestamps that jitter make the smallest gap
	// a little shorter than the period).
	periodSlack = 1.1
	// UnknownPeriod is the sample period assumed when no process has two
	// samples one period apart: the longest NVML's drivers are known to
	// use (it only widens the bounds and the wait).
	UnknownPeriod = time.Second
)

// SamplePeriod is NVML's sample period as the samples show it: the smallest
// positive gap between two samples of one process (0: no process has two).
func SamplePeriod(samples []ProcessSample) time.Duration {
	by := map[uint32][]time.Time{}
	for _, s := range samples {
		by[s.PID] = append(by[s.PID], s.Time)
	}
	var period time.Duration
	for _, ts := range by {
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := 1; i < len(ts); i++ {
			if g := ts[i].Sub(ts[i-1]); g > 0 && (period == 0 || g < period) {
				period = g
			}
		}
	}
	return period
}

// Coverage is how long after a window's end NVML must have been read for
// every sample overlapping the window to exist.
func (a NVMLActivity) Coverage() time.Duration {
	p := a.Period
	if p <= 0 {
		p = SamplePeriod(a.Samples)
	}
	if p <= 0 {
		return time.Duration(float64(UnknownPeriod) * periodSlack)
	}
	return time.Duration(float64(p) * periodSlack)
}

// Unknown is an unexplained figure that is not known, for reason.
func Unknown(reason string) Unexplained { return Unexplained{Reason: reason} }

// RawUnexplained is the figure where NVML has no per-process utilisation
// (BasisRaw): the raw stolen ratio.
func RawUnexplained(st *StolenResult) Unexplained {
	if st == nil {
		return Unknown(UnknownNoWindows)
	}
	u := Unexplained{Basis: BasisRaw, Ratio: st.Ratio, Upper: st.Ratio}
	for _, w := range st.Windows {
		u.Windows = append(u.Windows, UnexplainedWindow{Ratio: w.Ratio, Upper: w.Ratio})
	}
	return u
}

// EstimateUnexplained works out the unexplained stolen time of st's windows
// from what NVML showed (see above). It is known only when every window
// could be judged: a window without stolen time needs no sample (it is 0),
// any other needs NVML read up to its end plus a period and at least one
// sample overlapping it; else Reason says why not.
func EstimateUnexplained(st *StolenResult, a NVMLActivity) Unexplained {
	if st == nil || len(st.Windows) == 0 {
		return Unknown(UnknownNoWindows)
	}
	period := a.Period
	if period <= 0 {
		period = SamplePeriod(a.Samples)
	}
	known := period > 0
	if !known {
		period = UnknownPeriod
	}
	wide := time.Duration(float64(period) * periodSlack)
	probe := func(pid uint32) bool { return slices.Contains(a.Probe, pid) }
	context := func(pid uint32) uint32 {
		if slices.Contains(a.MPSClients, pid) || slices.Contains(a.MPSServer, pid) {
			return MPSContext
		}
		return pid
	}
	out := Unexplained{Basis: BasisVisible, Period: period}
	var lower, upper, total float64
	for _, w := range st.Windows {
		uw := judgeWindow(w, a, period, wide, known, probe, context)
		out.Windows = append(out.Windows, uw)
		if uw.Reason != "" {
			if out.Reason == "" {
				out.Reason = uw.Reason
			}
			continue
		}
		// Weighted as StolenResult.Ratio weights the windows.
		length := w.Window.Seconds()
		if length <= 0 {
			length = w.End.Sub(w.Start).Seconds()
		}
		lower += uw.Ratio * length
		upper += uw.Upper * length
		total += length
	}
	if out.Reason != "" {
		out.Basis = ""
		return out
	}
	if total > 0 {
		out.Ratio, out.Upper = lower/total, upper/total
	}
	return out
}

// judgeWindow is one window's figure (see EstimateUnexplained).
func judgeWindow(w StolenWindow, a NVMLActivity, period, wide time.Duration, periodKnown bool,
	probe func(uint32) bool, context func(uint32) uint32) UnexplainedWindow {
	r := min(max(w.Ratio, 0), 1)
	if r == 0 {
		return UnexplainedWindow{}
	}
	if a.ReadUpTo.Before(w.End.Add(wide)) {
		return UnexplainedWindow{Reason: UnknownSamplesNotRead}
	}
	if !a.Final && !slices.ContainsFunc(a.Samples, func(s ProcessSample) bool { return !s.Time.Before(w.End) }) {
		return UnexplainedWindow{Reason: UnknownSamplesNotRead}
	}
	length := w.End.Sub(w.Start)
	if length <= 0 {
		return UnexplainedWindow{Reason: UnknownNoWindows}
	}
	overlap := func(end time.Time, p time.Duration) time.Duration {
		from, to := end.Add(-p), end
		if w.Start.After(from) {
			from = w.Start
		}
		if w.End.Before(to) {
			to = w.End
		}
		return max(0, to.Sub(from))
	}
	hi, lo := map[uint32]float64{}, map[uint32]float64{}
	seen := false
	for _, s := range a.Samples {
		oWide := overlap(s.Time, wide)
		if oWide <= 0 {
			continue
		}
		seen = true
		if probe(s.PID) {
			continue
		}
		c := context(s.PID)
		u := min(max(s.SM, 0), 1)
		// At most: all its time in the period (wide, u rounded up) fell
		// inside the window.
		busyHi := (u + utilStep) * wide.Seconds()
		hi[c] += min(oWide.Seconds(), busyHi)
		// At least: as much as does not fit in the part of the period
		// outside the window (only with a period that is known).
		if periodKnown {
			o := overlap(s.Time, period)
			busyLo := max(0, u-utilStep) * period.Seconds()
			lo[c] += max(0, busyLo-(period-o).Seconds())
		}
	}
	if !seen {
		return UnexplainedWindow{Reason: UnknownNoSamples}
	}
	W := length.Seconds()
	p := 1 - r
	var explHi, explLo float64
	out := UnexplainedWindow{Visible: map[uint32]float64{}}
	for c, t := range hi {
		share := min(p, t/W)
		explHi += share
		out.Visible[c] = share
		explLo += min(p, lo[c]/W)
	}
	out.Ratio = min(max(r-explHi, 0), r)
	out.Upper = min(max(r-explLo, 0), r)
	return out
}

// UnexplainedStolen is the unexplained share of one window given its raw
// ratio and the SM utilisation (0-1) of each busy process NVML shows over
// it: each explains at most an equal turn with the probe (p = 1 − raw) and
// at most what it used, and the rest, clamped to [0, raw], is unexplained.
// It is EstimateUnexplained's rule for utilisations known over exactly the
// window.
func UnexplainedStolen(raw float64, visible []float64) float64 {
	p := 1 - raw
	var explained float64
	for _, u := range visible {
		explained += min(max(u, 0), p)
	}
	return min(max(raw-explained, 0), raw)
}
