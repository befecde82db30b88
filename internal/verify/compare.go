package verify

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/cudaver"
)

// `gpulens-verify compare`: two or more reports of this tool (the same host
// last month and today, or two providers' hosts) compared figure by figure
// against the first, the baseline. A figure is called better or worse only
// when its medians differ by more than the tolerance and the repeats
// cannot explain the difference: every run of one report lies on one side
// of every run of the other, with enough runs that this is unlikely by
// chance. See docs/verify.md, "Comparing reports".

// CompareSchemaVersion is the version of the comparison's JSON. It changes
// when a field changes meaning or is removed; added fields keep it.
const CompareSchemaVersion = 1

// CompareTool is the comparison's "tool" field; a report has
// "gpulens-verify".
const CompareTool = "gpulens-verify compare"

// Defaults of the comparison's settings.
const (
	// DefaultCompareTolerance is the smallest change of a median, as a share
	// of the baseline's, that counts (figures other than ratios).
	DefaultCompareTolerance = 0.05
	// DefaultCompareRatioTolerance is the smallest change of a ratio figure
	// (stolen time, 0–1) that counts, in absolute terms: 0.05 is 5
	// percentage points, the stolen-time check's warning level
	// (StolenWarnRatio).
	DefaultCompareRatioTolerance = 0.05
	// CompareMaxChance bounds the chance that, with no real difference,
	// every run of one report would lie beyond every run of the other: for
	// n and m runs it is 1 / C(n+m, n) (each ordering of the runs equally
	// likely). 3 runs against 3 (the default --repeat) give 1/20 = 0.05;
	// fewer runs cannot call a difference.
	CompareMaxChance = 0.05
)

// Direction says which way a figure improves.
type Direction string

// Directions.
const (
	HigherIsBetter Direction = "higher_is_better"
	LowerIsBetter  Direction = "lower_is_better"
)

// CompareVerdict is the verdict on one figure of one GPU.
type CompareVerdict string

// Verdicts on a figure.
const (
	// VerdictBetter, VerdictWorse: the medians differ by more than the
	// tolerance, and the runs do not overlap with enough of them.
	VerdictBetter CompareVerdict = "better"
	VerdictWorse  CompareVerdict = "worse"
	// VerdictSame: the medians differ by no more than the tolerance.
	VerdictSame CompareVerdict = "same"
	// VerdictInconclusive: the medians differ by more than the tolerance,
	// but the runs overlap, or there are too few to tell.
	VerdictInconclusive CompareVerdict = "inconclusive"
	// VerdictMissing: only one of the two reports has the figure; it is
	// listed, not compared.
	VerdictMissing CompareVerdict = "missing"
)

// Basis is why a figure got its verdict, for tools (Reason is for people).
type Basis string

// Bases of a verdict.
const (
	BasisWithinTolerance Basis = "within_tolerance"
	BasisRunsOverlap     Basis = "runs_overlap"
	BasisTooFewRuns      Basis = "too_few_runs"
	BasisRunsApart       Basis = "runs_apart"
	BasisOnlyInBaseline  Basis = "only_in_baseline"
	BasisOnlyInOther     Basis = "only_in_other"
)

// Why a figure is missing on one side (FigureComparison.Absent).
const (
	AbsentNotMeasured = "not_measured" // no run measured it
	AbsentNoGap       = "no_gap"       // a gap length: the stolen-time windows saw no gap
)

// How two GPUs were paired (DeviceComparison.MatchedBy).
const (
	MatchedByUUID     = "uuid"     // the same GPU: the same host
	MatchedByModel    = "model"    // the same model name, in order
	MatchedByPosition = "position" // what was left, in order (models differ)
)

// CompareSettings are the comparison's rules.
type CompareSettings struct {
	// Tolerance is the smallest change of a median that counts, as a share
	// of the baseline's median; RatioTolerance the same for ratio figures,
	// in absolute terms (0.05: 5 percentage points).
	Tolerance      float64 `json:"tolerance"`
	RatioTolerance float64 `json:"ratio_tolerance"`
	// MaxChance is CompareMaxChance.
	MaxChance float64 `json:"max_chance"`
}

// Comparison is the whole output of gpulens-verify compare.
type Comparison struct {
	SchemaVersion int             `json:"schema_version"`
	Tool          string          `json:"tool"`
	Version       string          `json:"version,omitempty"`
	Settings      CompareSettings `json:"settings"`
	Baseline      ReportRef       `json:"baseline"`
	// Comparisons has one entry per report after the baseline, in the
	// order given, each compared with the baseline.
	Comparisons []ReportComparison `json:"comparisons"`
	Summary     CompareSummary     `json:"summary"`
}

// ReportRef says which report a side of the comparison is.
type ReportRef struct {
	File      string      `json:"file"`
	Version   string      `json:"version,omitempty"`
	Started   time.Time   `json:"started"`
	Simulated *Simulation `json:"simulated,omitempty"`
	// Driver is NVML's driver version, CUDA the CUDA version the driver
	// supports ("12.4"); empty when the report has none.
	Driver  string `json:"driver_version,omitempty"`
	CUDA    string `json:"cuda_version,omitempty"`
	Repeat  int    `json:"repeat"`
	Devices int    `json:"devices"`
}

// ReportComparison is one report compared with the baseline.
type ReportComparison struct {
	Other ReportRef `json:"other"`
	// SameHost: at least one GPU was matched by its UUID.
	SameHost bool               `json:"same_host"`
	Devices  []DeviceComparison `json:"devices"`
	// GPUs of one report that nothing in the other was paired with.
	OnlyInBaseline []DeviceRef    `json:"only_in_baseline,omitempty"`
	OnlyInOther    []DeviceRef    `json:"only_in_other,omitempty"`
	Counts         CompareCounts  `json:"counts"`
	Verdict        CompareVerdict `json:"verdict"`
}

// DeviceRef names a GPU of a report.
type DeviceRef struct {
	Label    string `json:"label"`
	Name     string `json:"name"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`
}

// DeviceComparison is one GPU of the baseline and the GPU of the other
// report paired with it.
type DeviceComparison struct {
	Baseline DeviceRef `json:"baseline"`
	Other    DeviceRef `json:"other"`
	// MatchedBy is MatchedByUUID, MatchedByModel or MatchedByPosition.
	MatchedBy string             `json:"matched_by"`
	Figures   []FigureComparison `json:"figures"`
	Counts    CompareCounts      `json:"counts"`
	Verdict   CompareVerdict     `json:"verdict"`
}

// FigureComparison is one figure of one GPU in both reports.
type FigureComparison struct {
	// ID is the figure's key in a report's "figures" (context_memory_bytes:
	// the runs' context_memory_bytes).
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Unit      string    `json:"unit"`
	Direction Direction `json:"direction"`
	// Baseline and Other are the figure in each report; one is omitted
	// when the verdict is missing.
	Baseline *Stat `json:"baseline,omitempty"`
	Other    *Stat `json:"other,omitempty"`
	// Difference is Other's median less Baseline's, in Unit;
	// RelativeDifference that over Baseline's median (omitted when that is
	// 0). Tolerance is the smallest difference that counts, in Unit.
	Difference         *float64 `json:"difference,omitempty"`
	RelativeDifference *float64 `json:"relative_difference,omitempty"`
	Tolerance          *float64 `json:"tolerance,omitempty"`
	// RunsOverlap: the min–max ranges of the two reports' runs overlap.
	// Chance, when they do not: 1 / C(n+m, n), the chance of runs this far
	// apart with no real difference.
	RunsOverlap *bool          `json:"runs_overlap,omitempty"`
	Chance      *float64       `json:"chance,omitempty"`
	Verdict     CompareVerdict `json:"verdict"`
	Basis       Basis          `json:"basis"`
	// Absent, with a missing verdict, is why one side lacks the figure:
	// AbsentNotMeasured or AbsentNoGap.
	Absent string `json:"absent,omitempty"`
	Reason string `json:"reason"`
}

// CompareCounts counts the verdicts on figures.
type CompareCounts struct {
	Better       int `json:"better"`
	Worse        int `json:"worse"`
	Same         int `json:"same"`
	Inconclusive int `json:"inconclusive"`
	Missing      int `json:"missing"`
}

func (c *CompareCounts) add(v CompareVerdict) {
	switch v {
	case VerdictBetter:
		c.Better++
	case VerdictWorse:
		c.Worse++
	case VerdictSame:
		c.Same++
	case VerdictInconclusive:
		c.Inconclusive++
	case VerdictMissing:
		c.Missing++
	}
}

func (c *CompareCounts) plus(o CompareCounts) {
	c.Better += o.Better
	c.Worse += o.Worse
	c.Same += o.Same
	c.Inconclusive += o.Inconclusive
	c.Missing += o.Missing
}

// verdict sums the counts up: worse when any figure is worse, else
// inconclusive when any is, else better when any is, else same when any
// is; inconclusive when no figure was compared.
func (c CompareCounts) verdict() CompareVerdict {
	switch {
	case c.Worse > 0:
		return VerdictWorse
	case c.Inconclusive > 0:
		return VerdictInconclusive
	case c.Better > 0:
		return VerdictBetter
	case c.Same > 0:
		return VerdictSame
	}
	return VerdictInconclusive
}

// CompareSummary is the overall verdict and exit status.
type CompareSummary struct {
	Verdict CompareVerdict `json:"verdict"`
	CompareCounts
	// UnmatchedDevices counts the GPUs of either side paired with nothing.
	UnmatchedDevices int `json:"unmatched_devices"`
	// ExitCode is ExitFail when a figure is worse, else ExitPass.
	ExitCode int `json:"exit_code"`
}

// NamedReport is a report and the file it was read from.
type NamedReport struct {
	File   string
	Report *Report
}

// CompareOptions parameterise Compare.
type CompareOptions struct {
	Tool, Version string
	// Tolerance and RatioTolerance as in CompareSettings (not negative).
	Tolerance, RatioTolerance float64
}

// Compare compares every report of others with base.
func Compare(base NamedReport, others []NamedReport, o CompareOptions) *Comparison {
	c := &Comparison{
		SchemaVersion: CompareSchemaVersion, Tool: o.Tool, Version: o.Version,
		Settings: CompareSettings{Tolerance: o.Tolerance, RatioTolerance: o.RatioTolerance, MaxChance: CompareMaxChance},
		Baseline: refOf(base), Comparisons: []ReportComparison{},
	}
	var total CompareCounts
	for _, other := range others {
		rc := compareReports(base.Report, other, c.Settings)
		total.plus(rc.Counts)
		c.Summary.UnmatchedDevices += len(rc.OnlyInBaseline) + len(rc.OnlyInOther)
		c.Comparisons = append(c.Comparisons, rc)
	}
	c.Summary.CompareCounts = total
	c.Summary.Verdict = total.verdict()
	c.Summary.ExitCode = ExitPass
	if total.Worse > 0 {
		c.Summary.ExitCode = ExitFail
	}
	return c
}

func refOf(n NamedReport) ReportRef {
	r := n.Report
	ref := ReportRef{File: n.File, Version: r.Version, Started: r.Started, Simulated: r.Simulated,
		Repeat: r.Settings.Repeat, Devices: len(r.Devices)}
	if r.Host.NVML != nil {
		ref.Driver = r.Host.NVML.DriverVersion
	}
	if v, _ := cudaDriverVersion(r.Host); v > 0 {
		ref.CUDA = cudaver.Format(v)
	}
	return ref
}

func deviceRef(d *Device) DeviceRef {
	return DeviceRef{Label: d.Label, Name: d.Name, UUID: d.UUID, PCIBusID: d.PCIBusID}
}

func compareReports(base *Report, other NamedReport, s CompareSettings) ReportComparison {
	rc := ReportComparison{Other: refOf(other), Devices: []DeviceComparison{}}
	pairs, onlyBase, onlyOther := matchDevices(base.Devices, other.Report.Devices)
	for _, p := range pairs {
		a, b := &base.Devices[p.base], &other.Report.Devices[p.other]
		dc := DeviceComparison{Baseline: deviceRef(a), Other: deviceRef(b), MatchedBy: p.by, Figures: []FigureComparison{}}
		for _, def := range compareFigures {
			if def.get(a) == nil && def.get(b) == nil {
				continue // in neither report
			}
			fc := compareFigure(def, a, b, s)
			dc.Counts.add(fc.Verdict)
			dc.Figures = append(dc.Figures, fc)
		}
		dc.Verdict = dc.Counts.verdict()
		rc.Counts.plus(dc.Counts)
		rc.SameHost = rc.SameHost || p.by == MatchedByUUID
		rc.Devices = append(rc.Devices, dc)
	}
	for _, i := range onlyBase {
		rc.OnlyInBaseline = append(rc.OnlyInBaseline, deviceRef(&base.Devices[i]))
	}
	for _, i := range onlyOther {
		rc.OnlyInOther = append(rc.OnlyInOther, deviceRef(&other.Report.Devices[i]))
	}
	rc.Verdict = rc.Counts.verdict()
	return rc
}

// devicePair is the index of a GPU in each report.
type devicePair struct {
	base, other int
	by          string
}

// matchDevices pairs the GPUs of two reports: first by UUID (the same GPU,
// so the same host), then what is left by model name in order (the k-th
// H100 of one with the k-th H100 of the other: another host, or a GPU the
// provider replaced), then what is still left by position. Pairs come in
// the baseline's order.
func matchDevices(base, other []Device) (pairs []devicePair, onlyBase, onlyOther []int) {
	bUsed, oUsed := make([]bool, len(base)), make([]bool, len(other))
	pair := func(same func(a, b *Device) bool, by string) {
		for i := range base {
			if bUsed[i] {
				continue
			}
			for j := range other {
				if !oUsed[j] && same(&base[i], &other[j]) {
					bUsed[i], oUsed[j] = true, true
					pairs = append(pairs, devicePair{i, j, by})
					break
				}
			}
		}
	}
	pair(func(a, b *Device) bool { return a.UUID != "" && a.UUID == b.UUID }, MatchedByUUID)
	pair(func(a, b *Device) bool { return a.Name == b.Name }, MatchedByModel)
	pair(func(a, b *Device) bool { return true }, MatchedByPosition)
	slices.SortFunc(pairs, func(x, y devicePair) int { return x.base - y.base })
	for i, u := range bUsed {
		if !u {
			onlyBase = append(onlyBase, i)
		}
	}
	for j, u := range oUsed {
		if !u {
			onlyOther = append(onlyOther, j)
		}
	}
	return pairs, onlyBase, onlyOther
}

// figureDef is a figure gpulens-verify compares.
type figureDef struct {
	ID, Name, Unit string
	Direction      Direction
	get            func(d *Device) *Stat
	// absent says whether a device lacks the figure because its runs saw
	// nothing to measure (AbsentNoGap) rather than did not measure it.
	absent func(d *Device) bool
}

// noGaps: a gap figure is absent when the stolen-time window ran and saw no
// gap, not only when it was not measured.
func noGaps(d *Device) bool { return d.Figures.StolenRatio != nil }

// compareFigures are the figures compared, in the report's order, each
// with its direction. Every field of Figures is here
// (TestCompareFiguresCoverEveryFigure), and the context's memory from the
// runs.
var compareFigures = []figureDef{
	{ID: "memory_total_bytes", Name: "Memory total", Unit: UnitBytes, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.MemoryTotalBytes }},
	{ID: "memory_free_bytes", Name: "Memory free to a new context", Unit: UnitBytes, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.MemoryFreeBytes }},
	{ID: "memory_usable_bytes", Name: "Memory allocated (fill test)", Unit: UnitBytes, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.MemoryUsableBytes }},
	{ID: "context_memory_bytes", Name: "Probe context's memory", Unit: UnitBytes, Direction: LowerIsBetter, get: contextMemory},
	{ID: "h2d_bytes_per_second", Name: "Host to device", Unit: UnitBytesPerSecond, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.H2DBytesPerSecond }},
	{ID: "d2h_bytes_per_second", Name: "Device to host", Unit: UnitBytesPerSecond, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.D2HBytesPerSecond }},
	{ID: "device_copy_bytes_per_second", Name: "Device memory (copy)", Unit: UnitBytesPerSecond, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.DeviceCopyBytesPerSecond }},
	{ID: "fp32_flops", Name: "FP32 (FMA)", Unit: UnitFLOPS, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.FP32FLOPS }},
	{ID: "fp16_tensor_flops", Name: "FP16 tensor (mma.sync)", Unit: UnitFLOPS, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.FP16TensorFLOPS }},
	{ID: "bf16_tensor_flops", Name: "BF16 tensor (mma.sync)", Unit: UnitFLOPS, Direction: HigherIsBetter, get: func(d *Device) *Stat { return d.Figures.BF16TensorFLOPS }},
	{ID: "launch_latency_seconds", Name: "Launch latency", Unit: UnitSeconds, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.LaunchLatencySeconds }},
	{ID: "launch_latency_p99_seconds", Name: "Launch latency p99", Unit: UnitSeconds, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.LaunchLatencyP99Seconds }},
	{ID: "stolen_ratio", Name: "Stolen time", Unit: UnitRatio, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.StolenRatio }},
	{ID: "stolen_max_ratio", Name: "Stolen time, worst block", Unit: UnitRatio, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.StolenMaxRatio }},
	{ID: "unexplained_stolen_ratio", Name: "Stolen time, unexplained", Unit: UnitRatio, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.UnexplainedStolenRatio }},
	{ID: "stolen_gap_median_seconds", Name: "Stolen gap median", Unit: UnitSeconds, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.StolenGapMedianSeconds }, absent: noGaps},
	{ID: "stolen_gap_p90_seconds", Name: "Stolen gap p90", Unit: UnitSeconds, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.StolenGapP90Seconds }, absent: noGaps},
	{ID: "stolen_gap_max_seconds", Name: "Stolen gap max", Unit: UnitSeconds, Direction: LowerIsBetter, get: func(d *Device) *Stat { return d.Figures.StolenGapMaxSeconds }, absent: noGaps},
}

// contextMemory is the probe context's own memory over the runs that
// measured it (gpuprobe.Result.ContextMemoryBytes; 0 is unknown).
func contextMemory(d *Device) *Stat {
	var v []float64
	for _, r := range d.Runs {
		if r.Result != nil && r.Result.ContextMemoryBytes > 0 {
			v = append(v, float64(r.Result.ContextMemoryBytes))
		}
	}
	return NewStat(v)
}

// compareFigure judges one figure of two paired GPUs.
func compareFigure(def figureDef, a, b *Device, s CompareSettings) FigureComparison {
	fc := FigureComparison{ID: def.ID, Name: def.Name, Unit: def.Unit, Direction: def.Direction,
		Baseline: def.get(a), Other: def.get(b)}
	if fc.Baseline == nil || fc.Other == nil {
		fc.Verdict, fc.Absent = VerdictMissing, AbsentNotMeasured
		side, lacking, dev := "the other report", "the baseline", a
		fc.Basis = BasisOnlyInOther
		if fc.Other == nil {
			side, lacking, dev = "the baseline", "the other report", b
			fc.Basis = BasisOnlyInBaseline
		}
		why := "no run measured it"
		if def.absent != nil && def.absent(dev) {
			fc.Absent, why = AbsentNoGap, "its stolen-time windows saw no gap"
		}
		fc.Reason = fmt.Sprintf("only in %s: %s lacks it (%s); not compared", side, lacking, why)
		return fc
	}
	j := judgeFigure(def.Direction, def.Unit == UnitRatio, *fc.Baseline, *fc.Other, s)
	fc.Difference, fc.Tolerance, fc.RunsOverlap = &j.diff, &j.tol, &j.overlap
	if fc.Baseline.Median != 0 {
		rel := j.diff / math.Abs(fc.Baseline.Median)
		fc.RelativeDifference = &rel
	}
	if !j.overlap {
		fc.Chance = &j.chance
	}
	fc.Verdict, fc.Basis = j.verdict, j.basis
	fc.Reason = figureReason(def, fc, j)
	return fc
}

// judgement is the verdict rule's result.
type judgement struct {
	verdict CompareVerdict
	basis   Basis
	// diff is other − baseline medians; tol the smallest diff that counts;
	// overlap whether the min–max ranges overlap; chance 1/C(n+m, n).
	diff, tol, chance float64
	overlap           bool
}

// judgeFigure is the verdict rule. With d the difference of the medians
// (other − baseline) and t the tolerance (ratio: RatioTolerance; else
// Tolerance × |baseline median|):
//
//   - |d| ≤ t: same (no practical difference, whatever the spread);
//   - else, the runs' min–max ranges overlap: inconclusive (the repeats
//     do not separate the two);
//   - else, 1/C(n+m, n) > MaxChance: inconclusive (too few runs for runs
//     this far apart to be more than chance);
//   - else better or worse, by the figure's direction.
//
// So a difference within either report's spread, or below the tolerance,
// is never worse.
func judgeFigure(dir Direction, ratio bool, a, b Stat, s CompareSettings) judgement {
	j := judgement{diff: b.Median - a.Median}
	if ratio {
		j.tol = s.RatioTolerance
	} else {
		j.tol = s.Tolerance * math.Abs(a.Median)
	}
	j.overlap = b.Min <= a.Max && a.Min <= b.Max
	j.chance = 1 / binomial(a.N+b.N, a.N)
	switch {
	case math.Abs(j.diff) <= j.tol:
		j.verdict, j.basis = VerdictSame, BasisWithinTolerance
	case j.overlap:
		j.verdict, j.basis = VerdictInconclusive, BasisRunsOverlap
	case j.chance > s.MaxChance*(1+1e-9):
		j.verdict, j.basis = VerdictInconclusive, BasisTooFewRuns
	case (j.diff > 0) == (dir == HigherIsBetter):
		j.verdict, j.basis = VerdictBetter, BasisRunsApart
	default:
		j.verdict, j.basis = VerdictWorse, BasisRunsApart
	}
	return j
}

// binomial is C(n, k) as a float (exact for the run counts of a report).
func binomial(n, k int) float64 {
	if k < 0 || k > n {
		return 0
	}
	if k > n-k {
		k = n - k
	}
	c := 1.0
	for i := 1; i <= k; i++ {
		c = c * float64(n-k+i) / float64(i)
	}
	return math.Round(c)
}

// figureReason says the verdict in words: the change, then why.
func figureReason(def figureDef, fc FigureComparison, j judgement) string {
	f := unitFormat(def.Unit)
	a, b := fc.Baseline, fc.Other
	change := fmt.Sprintf("%s → %s (%s)", f(a.Median), f(b.Median), fmtChange(fc))
	tol := fmtTolerance(def.Unit, j.tol)
	runs := fmt.Sprintf("runs %s vs %s", fmtRange(f, a), fmtRange(f, b))
	switch fc.Basis {
	case BasisWithinTolerance:
		return fmt.Sprintf("%s: within the tolerance of %s", change, tol)
	case BasisRunsOverlap:
		return fmt.Sprintf("%s, beyond the tolerance of %s, but the %s overlap: the repeats do not tell the two apart", change, tol, runs)
	case BasisTooFewRuns:
		return fmt.Sprintf("%s, beyond the tolerance of %s, and the %s are apart, but with %d and %d run(s) that happens by chance 1 time in %s: more runs needed (--repeat)",
			change, tol, runs, a.N, b.N, trim(1/j.chance, 0))
	}
	return fmt.Sprintf("%s, beyond the tolerance of %s; every run of one is beyond every run of the other (%s; chance 1 in %s)",
		change, tol, runs, trim(1/j.chance, 0))
}

// unitFormat returns the formatter of a unit's values.
func unitFormat(unit string) func(float64) string {
	switch unit {
	case UnitBytes:
		return bytesize.Human
	case UnitBytesPerSecond:
		return fmtRate
	case UnitFLOPS:
		return fmtFLOPS
	case UnitSeconds:
		return fmtSeconds
	case UnitRatio:
		return fmtPct
	}
	return func(v float64) string { return trim(v, 3) }
}

func fmtRange(f func(float64) string, s *Stat) string {
	return f(s.Min) + "–" + f(s.Max)
}

// fmtChange formats a figure's change: percentage points for a ratio, else
// relative to the baseline ("-75 %"), or the difference in its unit when
// the baseline's median is 0.
func fmtChange(fc FigureComparison) string {
	if fc.Difference == nil {
		return ""
	}
	d := *fc.Difference
	var s string
	switch {
	case fc.Unit == UnitRatio:
		s = trim(math.Abs(d)*100, 1) + " pts"
	case fc.RelativeDifference != nil:
		s = fmtPct(math.Abs(*fc.RelativeDifference))
	default:
		s = unitFormat(fc.Unit)(math.Abs(d))
	}
	switch {
	case s == "0 pts" || s == "0 %":
		return s
	case d < 0:
		return "-" + s
	}
	return "+" + s
}

// fmtTolerance formats the tolerance of a figure: "5 points" for a ratio,
// else the absolute value in the figure's unit.
func fmtTolerance(unit string, tol float64) string {
	if unit == UnitRatio {
		return trim(tol*100, 1) + " points"
	}
	return unitFormat(unit)(tol)
}
