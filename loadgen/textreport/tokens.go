package textreport

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// tokenColumns are the CSV's columns of the lengths asked for and counted
// by the server (mean, p50, p99); empty cells where nothing was asked.
var tokenColumns = func() []struct {
	name string
	get  func(*report.Summary) (float64, bool)
} {
	var cols []struct {
		name string
		get  func(*report.Summary) (float64, bool)
	}
	for _, d := range []struct {
		name string
		get  func(*report.Summary) *report.Dist
	}{
		{"input_tokens", func(s *report.Summary) *report.Dist { return &s.InputTokens }},
		{"input_tokens_requested", func(s *report.Summary) *report.Dist { return s.InputTokensRequested }},
		{"output_tokens", func(s *report.Summary) *report.Dist { return &s.OutputTokens }},
		{"output_tokens_requested", func(s *report.Summary) *report.Dist { return s.OutputTokensRequested }},
	} {
		for _, p := range []struct {
			name string
			get  func(*report.Dist) float64
		}{
			{"mean", func(x *report.Dist) float64 { return x.Mean }},
			{"p50", func(x *report.Dist) float64 { return x.P50 }},
			{"p99", func(x *report.Dist) float64 { return x.P99 }},
		} {
			cols = append(cols, struct {
				name string
				get  func(*report.Summary) (float64, bool)
			}{d.name + "." + p.name, func(s *report.Summary) (float64, bool) {
				x := d.get(s)
				if x == nil || x.Count == 0 {
					return 0, false
				}
				return p.get(x), true
			}})
		}
	}
	return cols
}()

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
	if c := d.Metadata.TokenCalibration; c != nil && c.Error == "" {
		fmt.Fprintf(w, "prompts calibrated by %s: %.3f tokens per word + %.1f tokens per request\n", c.Method, c.TokensPerWord, c.OverheadTokens)
	}
	for i := range d.Runs {
		for _, msg := range report.TokenDeviations(&d.Runs[i].Summary) {
			fmt.Fprintf(w, "WARNING: %s: %s\n", d.Runs[i].Name, msg)
		}
	}
}
