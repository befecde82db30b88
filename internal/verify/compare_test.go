package verify

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// st is a Stat of n runs with the given median, min and max.
func st(n int, median, min, max float64) *Stat {
	return &Stat{N: n, Median: median, Min: min, Max: max}
}

var defaultRules = CompareSettings{Tolerance: DefaultCompareTolerance, RatioTolerance: DefaultCompareRatioTolerance, MaxChance: CompareMaxChance}

// TestJudgeFigure is the verdict rule on real figures: a difference within
// either report's spread or below the tolerance is never worse; the
// direction decides better from worse.
func TestJudgeFigure(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		dir    Direction
		ratio  bool
		a, b   *Stat
		rules  CompareSettings
		want   CompareVerdict
		basis  Basis
		chance float64 // checked when > 0
	}{
		// FP32 of a dedicated H100 against the same GPU time-sliced with a
		// neighbour (the simulated fleet's figures).
		{"fp32 a quarter", HigherIsBetter, false, st(3, 60.1e12, 59.9e12, 60.2e12), st(3, 15e12, 14.9e12, 15.02e12), defaultRules, VerdictWorse, BasisRunsApart, 0.05},
		{"fp32 four times", HigherIsBetter, false, st(3, 15e12, 14.9e12, 15.02e12), st(3, 60.1e12, 59.9e12, 60.2e12), defaultRules, VerdictBetter, BasisRunsApart, 0.05},
		// Lower is better: a launch latency that grows is worse.
		{"launch latency up", LowerIsBetter, false, st(3, 8e-6, 7.9e-6, 8.3e-6), st(3, 12e-6, 11.5e-6, 12.6e-6), defaultRules, VerdictWorse, BasisRunsApart, 0.05},
		{"launch latency down", LowerIsBetter, false, st(3, 12e-6, 11.5e-6, 12.6e-6), st(3, 8e-6, 7.9e-6, 8.3e-6), defaultRules, VerdictBetter, BasisRunsApart, 0.05},
		// Runs apart but the medians within the 5 % tolerance: the same.
		{"apart within tolerance", HigherIsBetter, false, st(3, 2.9e12, 2.89e12, 2.91e12), st(3, 2.78e12, 2.77e12, 2.79e12), defaultRules, VerdictSame, BasisWithinTolerance, 0},
		// Exactly at the tolerance is still the same: 100 → 95 at 5 %.
		{"at the tolerance", HigherIsBetter, false, st(3, 100, 99, 101), st(3, 95, 94, 96), defaultRules, VerdictSame, BasisWithinTolerance, 0},
		{"just beyond the tolerance", HigherIsBetter, false, st(3, 100, 99, 101), st(3, 94.9, 94, 96), defaultRules, VerdictWorse, BasisRunsApart, 0.05},
		// 20 % lower, but the runs overlap (a noisy host): inconclusive.
		{"runs overlap", HigherIsBetter, false, st(3, 50e9, 38e9, 53e9), st(3, 40e9, 30e9, 39e9), defaultRules, VerdictInconclusive, BasisRunsOverlap, 0},
		{"other within baseline's range", LowerIsBetter, false, st(5, 9e-6, 8e-6, 30e-6), st(5, 20e-6, 18e-6, 22e-6), defaultRules, VerdictInconclusive, BasisRunsOverlap, 0},
		{"ranges touch", HigherIsBetter, false, st(3, 100, 90, 110), st(3, 80, 70, 90), defaultRules, VerdictInconclusive, BasisRunsOverlap, 0},
		// Apart, but too few runs for that to be more than chance.
		{"one run each", HigherIsBetter, false, st(1, 100, 100, 100), st(1, 50, 50, 50), defaultRules, VerdictInconclusive, BasisTooFewRuns, 0.5},
		{"one run against three", HigherIsBetter, false, st(1, 100, 100, 100), st(3, 50, 49, 51), defaultRules, VerdictInconclusive, BasisTooFewRuns, 0.25},
		{"two runs each", HigherIsBetter, false, st(2, 100, 99, 101), st(2, 50, 49, 51), defaultRules, VerdictInconclusive, BasisTooFewRuns, 1.0 / 6},
		{"two against five", HigherIsBetter, false, st(2, 100, 99, 101), st(5, 50, 49, 51), defaultRules, VerdictWorse, BasisRunsApart, 1.0 / 21},
		{"one against nineteen", HigherIsBetter, false, st(1, 100, 100, 100), st(19, 50, 49, 51), defaultRules, VerdictWorse, BasisRunsApart, 1.0 / 20},
		{"one against eighteen", HigherIsBetter, false, st(1, 100, 100, 100), st(18, 50, 49, 51), defaultRules, VerdictInconclusive, BasisTooFewRuns, 1.0 / 19},
		// Ratios: the tolerance is absolute (5 points), not relative.
		{"stolen 0 to 4 %", LowerIsBetter, true, st(3, 0, 0, 0), st(3, 0.04, 0.03, 0.045), defaultRules, VerdictSame, BasisWithinTolerance, 0},
		{"stolen 0 to 50 %", LowerIsBetter, true, st(3, 0, 0, 0.001), st(3, 0.5, 0.4998, 0.5004), defaultRules, VerdictWorse, BasisRunsApart, 0.05},
		{"stolen 50 % to 0", LowerIsBetter, true, st(3, 0.5, 0.4998, 0.5004), st(3, 0, 0, 0.001), defaultRules, VerdictBetter, BasisRunsApart, 0.05},
		{"stolen 50 % to 54 %", LowerIsBetter, true, st(3, 0.5, 0.49, 0.51), st(3, 0.54, 0.53, 0.55), defaultRules, VerdictSame, BasisWithinTolerance, 0},
		{"stolen sometimes", LowerIsBetter, true, st(3, 0.01, 0, 0.02), st(3, 0.3, 0.01, 0.5), defaultRules, VerdictInconclusive, BasisRunsOverlap, 0},
		// Tolerance 0: any difference beyond the spread counts; none is the same.
		{"zero tolerance, identical", HigherIsBetter, false, st(3, 52e9, 52e9, 52e9), st(3, 52e9, 52e9, 52e9), CompareSettings{MaxChance: CompareMaxChance}, VerdictSame, BasisWithinTolerance, 0},
		{"zero tolerance, 1 % apart", HigherIsBetter, false, st(3, 52e9, 51.9e9, 52.1e9), st(3, 51.4e9, 51.3e9, 51.5e9), CompareSettings{MaxChance: CompareMaxChance}, VerdictWorse, BasisRunsApart, 0.05},
		// A wider tolerance makes the time-sliced FP32 no different.
		{"tolerance 80 %", HigherIsBetter, false, st(3, 60.1e12, 59.9e12, 60.2e12), st(3, 15e12, 14.9e12, 15.02e12), CompareSettings{Tolerance: 0.8, MaxChance: CompareMaxChance}, VerdictSame, BasisWithinTolerance, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := judgeFigure(tc.dir, tc.ratio, *tc.a, *tc.b, tc.rules)
			if j.verdict != tc.want || j.basis != tc.basis {
				t.Errorf("%s (%s), want %s (%s); %+v", j.verdict, j.basis, tc.want, tc.basis, j)
			}
			if tc.chance > 0 && math.Abs(j.chance-tc.chance) > 1e-12 {
				t.Errorf("chance %g, want %g", j.chance, tc.chance)
			}
			if d := tc.b.Median - tc.a.Median; j.diff != d {
				t.Errorf("diff %g, want %g", j.diff, d)
			}
			// Never worse within the spread or the tolerance.
			withinSpread := tc.b.Median >= tc.a.Min && tc.b.Median <= tc.a.Max || tc.a.Median >= tc.b.Min && tc.a.Median <= tc.b.Max
			if j.verdict == VerdictWorse && (withinSpread || math.Abs(j.diff) <= j.tol) {
				t.Errorf("worse within the spread or the tolerance")
			}
		})
	}
}

func TestBinomial(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		n, k int
		want float64
	}{{6, 3, 20}, {4, 2, 6}, {7, 2, 21}, {20, 10, 184756}, {3, 0, 1}, {3, 4, 0}} {
		if got := binomial(tc.n, tc.k); got != tc.want {
			t.Errorf("C(%d, %d) = %g, want %g", tc.n, tc.k, got, tc.want)
		}
	}
}

// TestCompareFiguresCoverEveryFigure: every figure of a report is compared,
// under its JSON key, with a direction; a figure added to Figures without
// a direction fails here.
func TestCompareFiguresCoverEveryFigure(t *testing.T) {
	t.Parallel()
	defs := map[string]figureDef{}
	for _, def := range compareFigures {
		if _, dup := defs[def.ID]; dup {
			t.Errorf("figure %s listed twice", def.ID)
		}
		if def.Direction != HigherIsBetter && def.Direction != LowerIsBetter {
			t.Errorf("%s: direction %q", def.ID, def.Direction)
		}
		defs[def.ID] = def
	}
	ft := reflect.TypeOf(Figures{})
	for i := 0; i < ft.NumField(); i++ {
		key, _, _ := strings.Cut(ft.Field(i).Tag.Get("json"), ",")
		def, ok := defs[key]
		if !ok {
			t.Errorf("Figures.%s (%s) is not compared: add it to compareFigures with its direction", ft.Field(i).Name, key)
			continue
		}
		// get reads that field and no other.
		var d Device
		want := st(1, float64(i+1), float64(i+1), float64(i+1))
		reflect.ValueOf(&d.Figures).Elem().Field(i).Set(reflect.ValueOf(want))
		if got := def.get(&d); got != want {
			t.Errorf("%s reads %v, want Figures.%s", key, got, ft.Field(i).Name)
		}
		// The unit is the key's suffix.
		for suffix, unit := range map[string]string{"_bytes_per_second": UnitBytesPerSecond, "_bytes": UnitBytes, "_flops": UnitFLOPS, "_seconds": UnitSeconds, "_ratio": UnitRatio} {
			if strings.HasSuffix(key, suffix) && def.Unit != unit {
				t.Errorf("%s: unit %s, want %s", key, def.Unit, unit)
			}
		}
	}
	if len(defs) != ft.NumField()+1 { // + the context's memory, from the runs
		t.Errorf("%d figures compared, Figures has %d (+1)", len(defs), ft.NumField())
	}
	// Directions a buyer would give them.
	for id, dir := range map[string]Direction{"fp32_flops": HigherIsBetter, "device_copy_bytes_per_second": HigherIsBetter, "memory_total_bytes": HigherIsBetter,
		"launch_latency_p99_seconds": LowerIsBetter, "unexplained_stolen_ratio": LowerIsBetter, "stolen_gap_max_seconds": LowerIsBetter, "context_memory_bytes": LowerIsBetter} {
		if defs[id].Direction != dir {
			t.Errorf("%s: %s, want %s", id, defs[id].Direction, dir)
		}
	}
}

// device is a report's device with the given figures.
func device(label, name, uuid string, f Figures) Device {
	return Device{Label: label, Name: name, UUID: uuid, Figures: f}
}

const a100 = "NVIDIA A100-SXM4-80GB"

func TestMatchDevices(t *testing.T) {
	t.Parallel()
	h := func(label, uuid string) Device { return device(label, h100, uuid, Figures{}) }
	a := func(label, uuid string) Device { return device(label, a100, uuid, Figures{}) }
	const uuid2, uuid3 = "GPU-22222222-0000-4000-8000-000000000000", "GPU-33333333-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		name                string
		base, other         []Device
		want                []devicePair
		onlyBase, onlyOther []int
	}{
		{"same host, listed in another order", []Device{h("CUDA 0", uuid0), h("CUDA 1", uuid1)}, []Device{h("CUDA 0", uuid1), h("CUDA 1", uuid0)},
			[]devicePair{{0, 1, MatchedByUUID}, {1, 0, MatchedByUUID}}, nil, nil},
		{"same host, a GPU gone", []Device{h("CUDA 0", uuid0), h("CUDA 1", uuid1)}, []Device{h("CUDA 0", uuid1)},
			[]devicePair{{1, 0, MatchedByUUID}}, []int{0}, nil},
		{"same host, a GPU replaced", []Device{h("CUDA 0", uuid0), h("CUDA 1", uuid1)}, []Device{h("CUDA 0", uuid2), h("CUDA 1", uuid1)},
			[]devicePair{{0, 0, MatchedByModel}, {1, 1, MatchedByUUID}}, nil, nil},
		{"other hosts, models in another order", []Device{h("CUDA 0", uuid0), a("CUDA 1", uuid1)}, []Device{a("CUDA 0", uuid2), h("CUDA 1", uuid3)},
			[]devicePair{{0, 1, MatchedByModel}, {1, 0, MatchedByModel}}, nil, nil},
		{"other hosts, other models", []Device{h("CUDA 0", uuid0), h("CUDA 1", uuid1)}, []Device{a("CUDA 0", uuid2)},
			[]devicePair{{0, 0, MatchedByPosition}}, []int{1}, nil},
		{"one GPU against eight", []Device{h("CUDA 0", uuid0)}, []Device{h("CUDA 0", uuid2), h("CUDA 1", uuid3), h("CUDA 2", "")},
			[]devicePair{{0, 0, MatchedByModel}}, nil, []int{1, 2}},
		{"no UUIDs", []Device{h("NVML GPU 0", ""), h("NVML GPU 1", "")}, []Device{h("NVML GPU 0", ""), h("NVML GPU 1", "")},
			[]devicePair{{0, 0, MatchedByModel}, {1, 1, MatchedByModel}}, nil, nil},
		{"no GPU", nil, []Device{h("CUDA 0", uuid0)}, nil, nil, []int{0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pairs, ob, oo := matchDevices(tc.base, tc.other)
			if !reflect.DeepEqual(pairs, tc.want) || !reflect.DeepEqual(ob, tc.onlyBase) || !reflect.DeepEqual(oo, tc.onlyOther) {
				t.Errorf("pairs %v, only in baseline %v, only in other %v; want %v, %v, %v", pairs, ob, oo, tc.want, tc.onlyBase, tc.onlyOther)
			}
		})
	}
}

var cmpT0 = time.Date(2026, 2, 1, 9, 30, 0, 0, time.UTC)

// lastMonth and today are two reports of one host of two H100s. Today GPU
// 0 is time-sliced with a neighbour (FP32 and device copy a quarter,
// stolen time 75 %, gaps of 2 ms), its launch latency noisy; GPU 1 has
// lost its device-copy figure and gained BF16, and a third GPU appeared,
// listed first.
func lastMonth() *Report {
	r := &Report{SchemaVersion: SchemaVersion, Tool: ReportTool, Version: "v0.9.0", Started: cmpT0,
		Settings: Settings{Repeat: 3},
		Host:     Host{NVML: &NVMLHost{DriverVersion: "550.54.15"}, CUDADriverVersion: cuda124}}
	r.Devices = []Device{
		device("CUDA 0", h100, uuid0, Figures{
			MemoryTotalBytes:         st(3, 79.5*gib, 79.5*gib, 79.5*gib),
			H2DBytesPerSecond:        st(3, 52.04e9, 52.01e9, 52.05e9),
			DeviceCopyBytesPerSecond: st(3, 2.9e12, 2.89e12, 2.91e12),
			FP32FLOPS:                st(3, 60.1e12, 59.9e12, 60.2e12),
			LaunchLatencySeconds:     st(3, 8e-6, 7.9e-6, 8.3e-6),
			StolenRatio:              st(3, 0, 0, 0.0004),
			UnexplainedStolenRatio:   st(3, 0, 0, 0),
		}),
		device("CUDA 1", h100, uuid1, Figures{
			DeviceCopyBytesPerSecond: st(3, 2.9e12, 2.89e12, 2.91e12),
			FP32FLOPS:                st(3, 55e12, 54e12, 56e12),
			StolenRatio:              st(3, 0.5, 0.49, 0.51),
			StolenGapMedianSeconds:   st(3, 0.002, 0.002, 0.0021),
		}),
	}
	r.Devices[0].Runs = []ProbeRun{{Result: &gpuprobe.Result{ContextMemoryBytes: 520 * mib}}, {Result: &gpuprobe.Result{ContextMemoryBytes: 520 * mib}}, {Error: "deadline"}}
	return r
}

func today() *Report {
	r := &Report{SchemaVersion: SchemaVersion, Tool: ReportTool, Version: "v1.0.0", Started: cmpT0.AddDate(0, 1, 0),
		Simulated: &Simulation{Scenario: "rented-timesliced", Seed: 1}, Settings: Settings{Repeat: 3},
		Host: Host{NVML: &NVMLHost{DriverVersion: "560.35.03"}, CUDADriverVersion: 12060}}
	r.Devices = []Device{
		device("CUDA 0", `<b>H100</b> & "co"`, "GPU-99999999-0000-4000-8000-000000000000", Figures{FP32FLOPS: st(3, 60e12, 60e12, 60e12)}),
		device("CUDA 1", h100, uuid0, Figures{
			MemoryTotalBytes:         st(3, 79.5*gib, 79.5*gib, 79.5*gib),
			H2DBytesPerSecond:        st(3, 51.9e9, 51.8e9, 52e9),
			DeviceCopyBytesPerSecond: st(3, 725e9, 724.7e9, 725.1e9),
			FP32FLOPS:                st(3, 15e12, 14.9e12, 15.02e12),
			LaunchLatencySeconds:     st(3, 9.5e-6, 8.1e-6, 30e-6),
			StolenRatio:              st(3, 0.75, 0.7500, 0.7502),
			UnexplainedStolenRatio:   st(3, 0.5002, 0.5001, 0.5004),
			StolenGapMedianSeconds:   st(3, 0.002, 0.002, 0.002),
		}),
		device("CUDA 2", h100, uuid1, Figures{
			FP32FLOPS:              st(3, 60e12, 59.8e12, 60.1e12),
			BF16TensorFLOPS:        st(3, 600e12, 599e12, 600e12),
			StolenRatio:            st(3, 0, 0, 0),
			StolenGapMedianSeconds: nil,
		}),
	}
	r.Devices[1].Runs = []ProbeRun{{Result: &gpuprobe.Result{ContextMemoryBytes: 600 * mib}}, {Result: &gpuprobe.Result{ContextMemoryBytes: 620 * mib}}, {Result: &gpuprobe.Result{ContextMemoryBytes: 610 * mib}}}
	return r
}

func sampleComparison() *Comparison {
	return Compare(NamedReport{File: "last-month.json", Report: lastMonth()}, []NamedReport{{File: "today.json", Report: today()}},
		CompareOptions{Tool: CompareTool, Version: "v0.test", Tolerance: DefaultCompareTolerance, RatioTolerance: DefaultCompareRatioTolerance})
}

func figureOf(t *testing.T, dc DeviceComparison, id string) FigureComparison {
	t.Helper()
	for _, f := range dc.Figures {
		if f.ID == id {
			return f
		}
	}
	t.Fatalf("%s: no figure %s", dc.Baseline.Label, id)
	return FigureComparison{}
}

func TestCompare(t *testing.T) {
	t.Parallel()
	c := sampleComparison()
	if len(c.Comparisons) != 1 {
		t.Fatalf("%d comparisons", len(c.Comparisons))
	}
	rc := c.Comparisons[0]
	if !rc.SameHost || len(rc.Devices) != 2 || len(rc.OnlyInBaseline) != 0 || len(rc.OnlyInOther) != 1 || rc.OnlyInOther[0].Label != "CUDA 0" {
		t.Fatalf("same host %v, %d pairs, only in baseline %v, only in other %v", rc.SameHost, len(rc.Devices), rc.OnlyInBaseline, rc.OnlyInOther)
	}
	g0, g1 := rc.Devices[0], rc.Devices[1]
	if g0.Baseline.UUID != uuid0 || g0.Other.Label != "CUDA 1" || g0.MatchedBy != MatchedByUUID || g1.Other.Label != "CUDA 2" {
		t.Fatalf("pairs %+v / %+v", g0, g1)
	}
	for _, tc := range []struct {
		dc     DeviceComparison
		id     string
		want   CompareVerdict
		basis  Basis
		reason string
	}{
		{g0, "fp32_flops", VerdictWorse, BasisRunsApart, "60.1 TFLOP/s → 15 TFLOP/s (-75 %), beyond the tolerance of 3 TFLOP/s; every run of one is beyond every run of the other (runs 59.9 TFLOP/s–60.2 TFLOP/s vs 14.9 TFLOP/s–15 TFLOP/s; chance 1 in 20)"},
		{g0, "device_copy_bytes_per_second", VerdictWorse, BasisRunsApart, "2.9 TB/s → 725 GB/s (-75 %)"},
		{g0, "h2d_bytes_per_second", VerdictSame, BasisWithinTolerance, "52 GB/s → 51.9 GB/s (-0.27 %): within the tolerance of 2.6 GB/s"},
		{g0, "memory_total_bytes", VerdictSame, BasisWithinTolerance, "79.5 GiB → 79.5 GiB (0 %)"},
		{g0, "launch_latency_seconds", VerdictInconclusive, BasisRunsOverlap, "8 µs → 9.5 µs (+19 %), beyond the tolerance of 400 ns, but the runs 7.9 µs–8.3 µs vs 8.1 µs–30 µs overlap"},
		{g0, "stolen_ratio", VerdictWorse, BasisRunsApart, "0 % → 75 % (+75 pts), beyond the tolerance of 5 points"},
		{g0, "unexplained_stolen_ratio", VerdictWorse, BasisRunsApart, "0 % → 50 % (+50 pts)"},
		{g0, "context_memory_bytes", VerdictInconclusive, BasisTooFewRuns, "520 MiB → 610 MiB (+17 %), beyond the tolerance of 26 MiB, and the runs 520 MiB–520 MiB vs 600 MiB–620 MiB are apart, but with 2 and 3 run(s) that happens by chance 1 time in 10: more runs needed (--repeat)"},
		{g0, "stolen_gap_median_seconds", VerdictMissing, BasisOnlyInOther, "only in the other report: the baseline lacks it (its stolen-time windows saw no gap); not compared"},
		{g1, "fp32_flops", VerdictBetter, BasisRunsApart, "55 TFLOP/s → 60 TFLOP/s (+9.1 %)"},
		{g1, "stolen_ratio", VerdictBetter, BasisRunsApart, "50 % → 0 % (-50 pts)"},
		{g1, "device_copy_bytes_per_second", VerdictMissing, BasisOnlyInBaseline, "only in the baseline: the other report lacks it (no run measured it); not compared"},
		{g1, "bf16_tensor_flops", VerdictMissing, BasisOnlyInOther, "only in the other report: the baseline lacks it (no run measured it)"},
		{g1, "stolen_gap_median_seconds", VerdictMissing, BasisOnlyInBaseline, "(its stolen-time windows saw no gap)"},
	} {
		f := figureOf(t, tc.dc, tc.id)
		if f.Verdict != tc.want || f.Basis != tc.basis || !strings.Contains(f.Reason, tc.reason) {
			t.Errorf("%s %s: %s (%s) %q; want %s (%s) with %q", tc.dc.Baseline.Label, tc.id, f.Verdict, f.Basis, f.Reason, tc.want, tc.basis, tc.reason)
		}
	}
	// The context's memory: 520 MiB in 2 runs (the third failed) against
	// 3 runs: apart, but 1 in C(5, 2) = 10 is too likely by chance.
	if f := figureOf(t, g0, "context_memory_bytes"); f.Baseline.N != 2 || f.Other.N != 3 || *f.Chance != 0.1 {
		t.Errorf("context memory %+v / %+v, chance %v", f.Baseline, f.Other, *f.Chance)
	}
	// Figures in neither report are left out.
	for _, dc := range rc.Devices {
		for _, f := range dc.Figures {
			if f.ID == "fp16_tensor_flops" || f.ID == "memory_usable_bytes" {
				t.Errorf("%s: %s is in neither report but listed", dc.Baseline.Label, f.ID)
			}
		}
	}
	want := CompareCounts{Worse: 4, Better: 2, Same: 2, Inconclusive: 2, Missing: 4}
	if rc.Counts != want || c.Summary.CompareCounts != want || c.Summary.Verdict != VerdictWorse || c.Summary.ExitCode != ExitFail || c.Summary.UnmatchedDevices != 1 {
		t.Errorf("counts %+v, summary %+v; want %+v, worse, exit 1, 1 unmatched", rc.Counts, c.Summary, want)
	}
	if g0.Verdict != VerdictWorse || g1.Verdict != VerdictBetter {
		t.Errorf("device verdicts %s, %s", g0.Verdict, g1.Verdict)
	}
	if c.Baseline.Driver != "550.54.15" || c.Baseline.CUDA != "12.4" || rc.Other.CUDA != "12.6" || rc.Other.Devices != 3 || rc.Other.Simulated == nil {
		t.Errorf("refs %+v / %+v", c.Baseline, rc.Other)
	}
}

// TestCompareExitStatus: only a worse figure fails; better, inconclusive,
// missing figures and unmatched GPUs do not.
func TestCompareExitStatus(t *testing.T) {
	t.Parallel()
	one := func(name string, f Figures) *Report {
		return &Report{SchemaVersion: SchemaVersion, Tool: ReportTool, Devices: []Device{device("CUDA 0", name, "", f)}}
	}
	base := one(h100, Figures{FP32FLOPS: st(3, 60e12, 59e12, 61e12), StolenRatio: st(3, 0.01, 0, 0.02)})
	for _, tc := range []struct {
		name    string
		others  []*Report
		verdict CompareVerdict
		exit    int
	}{
		{"itself", []*Report{base}, VerdictSame, ExitPass},
		{"faster", []*Report{one(h100, Figures{FP32FLOPS: st(3, 66e12, 65e12, 67e12), StolenRatio: st(3, 0.01, 0, 0.02)})}, VerdictBetter, ExitPass},
		{"slower but noisy", []*Report{one(h100, Figures{FP32FLOPS: st(3, 50e12, 40e12, 60e12), StolenRatio: st(3, 0.01, 0, 0.02)})}, VerdictInconclusive, ExitPass},
		{"slower with one run", []*Report{one(h100, Figures{FP32FLOPS: st(1, 50e12, 50e12, 50e12)})}, VerdictInconclusive, ExitPass},
		// Nothing compared: nothing can be said.
		{"nothing measured", []*Report{one(h100, Figures{})}, VerdictInconclusive, ExitPass},
		{"no GPU", []*Report{{SchemaVersion: SchemaVersion, Tool: ReportTool}}, VerdictInconclusive, ExitPass},
		{"another model, slower", []*Report{one(a100, Figures{FP32FLOPS: st(3, 17e12, 16.9e12, 17.1e12)})}, VerdictWorse, ExitFail},
		{"neighbour in the second of two", []*Report{base, one(h100, Figures{FP32FLOPS: st(3, 60e12, 59e12, 61e12), StolenRatio: st(3, 0.5, 0.45, 0.55)})}, VerdictWorse, ExitFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var others []NamedReport
			for i, r := range tc.others {
				others = append(others, NamedReport{File: filepath.Join("r", string(rune('a'+i))+".json"), Report: r})
			}
			c := Compare(NamedReport{File: "base.json", Report: base}, others, CompareOptions{Tolerance: 0.05, RatioTolerance: 0.05})
			if c.Summary.Verdict != tc.verdict || c.Summary.ExitCode != tc.exit {
				t.Errorf("%s, exit %d; want %s, exit %d (%+v)", c.Summary.Verdict, c.Summary.ExitCode, tc.verdict, tc.exit, c.Summary)
			}
		})
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReadReportFile: anything but a report of this schema version is
// refused naming the file and the field.
func TestReadReportFile(t *testing.T) {
	t.Parallel()
	var good strings.Builder
	if err := WriteJSON(&good, lastMonth()); err != nil {
		t.Fatal(err)
	}
	r, err := ReadReportFile(writeFile(t, "good.json", good.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Devices) != 2 || r.Devices[0].Figures.FP32FLOPS.Median != 60.1e12 {
		t.Errorf("read %+v", r.Devices)
	}
	var cmp strings.Builder
	if err := WriteCompareJSON(&cmp, sampleComparison()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"empty", "", []string{"not a gpulens-verify JSON report", "unexpected end of JSON input"}},
		{"text", "Verdict: PASS", []string{"not a gpulens-verify JSON report", "invalid character"}},
		{"array", "[1, 2]", []string{"not a gpulens-verify JSON report", "cannot unmarshal array"}},
		{"no tool", `{"schema_version": 1}`, []string{`it has no field "tool"`}},
		{"another tool", `{"tool": "nvidia-smi", "schema_version": 1}`, []string{`field "tool" is "nvidia-smi", not "gpulens-verify"`}},
		{"a burn", `{"tool": "gpulens-verify burn", "schema_version": 1}`, []string{`field "tool" is "gpulens-verify burn"`}},
		{"a comparison", cmp.String(), []string{`field "tool" is "gpulens-verify compare"`, "a comparison: compare the reports it was made from"}},
		{"tool a number", `{"tool": 7, "schema_version": 1}`, []string{`field "tool" is 7`}},
		{"no version", `{"tool": "gpulens-verify"}`, []string{`field "schema_version" is missing`}},
		{"version a string", `{"tool": "gpulens-verify", "schema_version": "1"}`, []string{`field "schema_version" is "1", not a number`}},
		{"future version", strings.Replace(good.String(), `"schema_version": 1`, `"schema_version": 2`, 1), []string{`field "schema_version" is 2; this gpulens-verify reads version 1`}},
		{"a field of the wrong type", strings.Replace(good.String(), `"repeat": 3`, `"repeat": "three"`, 1), []string{"settings.repeat", "cannot unmarshal string"}},
		{"median out of range", strings.Replace(good.String(), `"median": 60100000000000`, `"median": 70100000000000`, 1),
			[]string{"devices[0] (CUDA 0), figures.fp32_flops", `field "median" 7.01e+13 is not within "min" 5.99e+13 and "max" 6.02e+13`}},
		{"no runs", strings.Replace(good.String(), `"n": 3`, `"n": 0`, 1), []string{"devices[0] (CUDA 0), figures.h2d_bytes_per_second", `field "n" is 0`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "in.json", tc.content)
			_, err := ReadReportFile(p)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), p+": ") {
				t.Errorf("%q does not start with the file's name", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q lacks %q", err, w)
				}
			}
		})
	}
	missing := filepath.Join(t.TempDir(), "no-such.json")
	if _, err := ReadReportFile(missing); err == nil || !strings.Contains(err.Error(), "reading "+missing) {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseShare(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]float64{"5%": 0.05, " 2.5 % ": 0.025, "0.05": 0.05, "0": 0, "0%": 0, "100%": 1, "1000%": 10} {
		if got, err := ParseShare(in); err != nil || math.Abs(got-want) > 1e-15 {
			t.Errorf("ParseShare(%q) = %g, %v; want %g", in, got, err, want)
		}
	}
	for in, want := range map[string]string{"five": "is not a share", "-5%": "must be between 0 and 1000%", "11": "must be between", "%": "is not a share", "NaN": "is not a share", "Inf": "is not a share"} {
		if _, err := ParseShare(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseShare(%q): %v, want %q", in, err, want)
		}
	}
}
