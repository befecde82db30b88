package render

import (
	"math"
	"sort"
	"strings"

	"github.com/gpulens/gpulens/loadgen/report"
)

// The GPU side of the levels (report.RunGPU), drawn when the report has
// one (an exporter was read), after the other charts.
const (
	ChartPeakVRAMVsLevel       = "peak-vram-vs-level"
	ChartTokensPerJouleVsLevel = "output-tokens-per-joule-vs-level"
)

// gpuCharts are the charts of the runs' GPU side: peak memory used
// (summed over the GPUs serving, and per GPU when there are several) and
// output tokens per joule against the level, each level the mean of its
// repeats with the 95 % confidence interval of the aggregate's statistics.
// None when no run has a GPU side.
func gpuCharts(doc *report.Document) []chart {
	pts := levels(doc.Runs)
	var kept []levelPoint
	fromPower := false
	for _, p := range pts {
		if len(p.gpus()) > 0 {
			kept = append(kept, p)
			for _, g := range p.gpus() {
				fromPower = fromPower || g.EnergyFromPower
			}
		}
	}
	if len(kept) == 0 {
		return nil
	}
	var ll []string
	for _, p := range kept {
		ll = append(ll, p.label)
	}
	xl := levelName(doc.Runs)
	const gib = 1 << 30
	vram := []series{gpuSeries(kept, "summed over the GPUs serving", report.StatGPUPeakMemoryUsedBytes, gib,
		func(g *report.RunGPU) (float64, bool) { return g.PeakMemoryUsedBytes, true })}
	for _, dev := range devices(kept) {
		index, _, _ := strings.Cut(dev, " ")
		vram = append(vram, gpuSeries(kept, "GPU "+index, "", gib, func(g *report.RunGPU) (float64, bool) {
			for _, d := range g.GPUs {
				if d.GPU+" "+d.UUID == dev {
					return d.PeakMemoryUsedBytes, true
				}
			}
			return 0, false
		}))
	}
	gibFmt := func(v float64) string { return report.Sig(v, 3) + " GiB" }
	c1 := lineChart(ChartPeakVRAMVsLevel, "Peak GPU memory used against "+xl, "GiB", xl, ll, vram, gibFmt)
	c1.Caption = "The largest memory used during each run, read from the gpulens exporter; each level the mean of its repeats."
	c2 := lineChart(ChartTokensPerJouleVsLevel, "Output tokens per joule against "+xl, "tokens/J", xl, ll, []series{
		gpuSeries(kept, "output tokens/J", report.StatGPUOutputTokensPerJoule, 1,
			func(g *report.RunGPU) (float64, bool) { return g.OutputTokensPerJoule, g.EnergyJoules > 0 }),
	}, report.Num)
	c2.Caption = "Output tokens of the run's measured requests divided by the energy the GPUs serving used during it."
	if fromPower {
		c2.Caption += " Some energies are mean power × duration: a GPU had no energy counter."
	}
	return []chart{c1, c2}
}

// gpus are the GPU sides of a level's repeats (or its aggregate's, when
// the report holds only that).
func (p levelPoint) gpus() []*report.RunGPU {
	var out []*report.RunGPU
	for i := range p.runs {
		if g := p.runs[i].GPU; g != nil {
			out = append(out, g)
		}
	}
	if len(out) == 0 && p.agg != nil && p.agg.GPU != nil {
		out = append(out, p.agg.GPU)
	}
	return out
}

// gpuSeries is one figure per level: the mean over the level's repeats
// that have it, divided by unit, with the aggregate's confidence interval
// for statKey when it has one.
func gpuSeries(pts []levelPoint, name, statKey string, unit float64, get func(*report.RunGPU) (float64, bool)) series {
	s := series{Name: name}
	hasCI := false
	for _, p := range pts {
		sum, n := 0.0, 0
		for _, g := range p.gpus() {
			if v, ok := get(g); ok {
				sum += v
				n++
			}
		}
		mean := 0.0
		if n > 0 {
			mean = sum / float64(n)
		}
		lo, hi := mean, mean
		if p.agg != nil && statKey != "" {
			if st, ok := p.agg.Summary.Stats[statKey]; ok && st.N > 1 {
				lo, hi, hasCI = math.Max(st.CI95Low, 0), st.CI95High, true
			}
		}
		s.Values = append(s.Values, mean/unit)
		s.Low = append(s.Low, lo/unit)
		s.High = append(s.High, hi/unit)
	}
	if !hasCI {
		s.Low, s.High = nil, nil
	}
	return s
}

// devices names the GPUs of the runs' GPU sides ("index UUID"), sorted,
// when there are several; none for one GPU (the sum is that GPU's).
func devices(pts []levelPoint) []string {
	seen := map[string]bool{}
	for _, p := range pts {
		for _, g := range p.gpus() {
			for _, d := range g.GPUs {
				seen[d.GPU+" "+d.UUID] = true
			}
		}
	}
	if len(seen) < 2 {
		return nil
	}
	out := make([]string, 0, len(seen))
	for d := range seen {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}
