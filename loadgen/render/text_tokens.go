package render

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// writeTokens prints, when the runs asked for lengths, the lengths asked
// for against those the server counted (mean/p50/p99 tokens per request),
// the calibration that sized the prompts, and a warning for every run
// where they differ by more than 5 %.
func writeTokens(w io.Writer, d *report.Document) {
	if !report.HasTokenRequests(d) {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run	input asked	input server	output asked	output server	")
	for i := range d.Runs {
		t := report.Tokens(&d.Runs[i])
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t\n", t.Run, report.FormatTokens(t.InputRequested), report.FormatTokens(&t.Input),
			report.FormatTokens(t.OutputRequested), report.FormatTokens(&t.Output))
	}
	tw.Flush()
	fmt.Fprintln(w, "(tokens per request, mean/p50/p99: asked for, and as the server counted them)")
	switch c := d.Metadata.TokenCalibration; {
	case c == nil || c.Error != "":
	case c.Calibrated == report.CalibratedDatasetReplies:
		fmt.Fprintf(w, "output lengths: the dataset's replies in the server's tokens (%s: %d counted, %.3f tokens per word for the others)\n", c.Method, len(c.Probes), c.TokensPerWord)
	default:
		fmt.Fprintf(w, "prompts calibrated by %s: %.3f tokens per word + %.1f tokens per request\n", c.Method, c.TokensPerWord, c.OverheadTokens)
	}
	for i := range d.Runs {
		for _, msg := range report.TokenDeviations(&d.Runs[i].Summary) {
			fmt.Fprintf(w, "WARNING: %s: %s\n", d.Runs[i].Name, msg)
		}
	}
}
