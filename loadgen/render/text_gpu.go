package render

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// writeGPU prints the runs' GPU side, when an exporter was read.
func writeGPU(w io.Writer, d *report.Document) {
	has := false
	for _, r := range d.Runs {
		has = has || r.GPU != nil
	}
	if !has {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tGPUs\tpeak VRAM GiB\tutil %\tpower W\tenergy J\tout tok/J\tJ/req\t")
	for _, r := range d.Runs {
		g := r.GPU
		if g == nil {
			continue
		}
		energy := fmt.Sprintf("%.1f", g.EnergyJoules)
		if g.EnergyFromPower {
			energy += "*"
		}
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.1f\t%.1f\t%s\t%.3f\t%.2f\t\n", r.Name, len(g.GPUs), g.PeakMemoryUsedBytes/(1<<30),
			g.MeanUtilizationRatio*100, g.MeanPowerWatts, energy, g.OutputTokensPerJoule, g.EnergyPerRequestJoules)
	}
	tw.Flush()
	for _, r := range d.Runs {
		if g := r.GPU; g != nil && g.EnergyFromPower {
			fmt.Fprintf(w, "NOTE: %s: energy marked * is mean power × duration: a GPU had no energy counter\n", r.Name)
		}
		if g := r.GPU; g != nil && g.Error != "" {
			fmt.Fprintf(w, "NOTE: %s: GPU exporter: %s\n", r.Name, g.Error)
		}
		if g := r.GPU; g != nil && g.Warning != "" && !r.Aggregate {
			fmt.Fprintf(w, "WARNING: %s: energy: %s\n", r.Name, g.Warning)
		}
	}
}
