package render

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// writeReasoning prints, when some run reasoned, the output split into
// reasoning and answer tokens and the answer's own latencies against
// the TTFT of the table above, which counts the first token of any kind.
func writeReasoning(w io.Writer, d *report.Document) {
	has := false
	for i := range d.Runs {
		has = has || d.Runs[i].Summary.Reasoning != nil
	}
	if !has {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\treasoned\treasoning tok\tanswer tok\tTTFT p50 ms (any)\tTTFT p50 ms (answer)\tTTFT p99 ms (answer)\tITL p50 ms (answer)\tTPOT p50 ms (answer)\tno answer\t")
	for i := range d.Runs {
		s := &d.Runs[i].Summary
		r := s.Reasoning
		if r == nil {
			continue
		}
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%d\t\n", d.Runs[i].Name, r.Requests, r.ReasoningTokens.Mean, r.AnswerTokens.Mean,
			s.TTFT.P50*1e3, r.AnswerTTFT.P50*1e3, r.AnswerTTFT.P99*1e3, r.AnswerITL.P50*1e3, r.AnswerTPOT.P50*1e3, r.NoAnswer)
	}
	tw.Flush()
	fmt.Fprintln(w, "(TTFT above counts the first token of any kind, reasoning included; the answer's TTFT, ITL and TPOT count its own tokens;",
		"tokens per request are means, both kinds output tokens)")
}
