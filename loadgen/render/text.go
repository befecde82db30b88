package render

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// WriteCSVFile writes one row per run to path (report.Write: a regular
// file atomically, a device, FIFO or symlink in place).
func WriteCSVFile(path string, d *report.Document) error {
	if err := report.Write(path, func(w io.Writer) error { return WriteCSV(w, d) }); err != nil {
		return fmt.Errorf("writing CSV %s: %w", path, err)
	}
	return nil
}

// WriteCSV writes one row per run: name, level, repeat, aggregate, every
// metric, the error counts by class, then the GPU side (empty cells for a
// run the exporter was not read for), the lengths and the reasoning side
// (empty cells for a run without reasoning).
func WriteCSV(w io.Writer, d *report.Document) error {
	cw := csv.NewWriter(w)
	head := []string{"name", "level", "repeat", "aggregate"}
	for _, f := range report.SummaryFigures {
		head = append(head, f.Key)
	}
	for _, c := range report.ErrorClasses {
		head = append(head, "errors."+c)
	}
	for _, fs := range [][]report.Figure{report.GPUFigures, report.TokenFigures, report.PromptFigures, report.ReasoningFigures} {
		for _, f := range fs {
			head = append(head, f.Key)
		}
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for i := range d.Runs {
		r := &d.Runs[i]
		row := []string{r.Name, ff(r.Level), strconv.Itoa(r.Repeat), strconv.FormatBool(r.Aggregate)}
		for _, f := range report.SummaryFigures {
			v, _ := f.Read(r)
			row = append(row, ff(v))
		}
		for _, c := range report.ErrorClasses {
			row = append(row, strconv.Itoa(r.Summary.Errors[c]))
		}
		for _, fs := range [][]report.Figure{report.GPUFigures, report.TokenFigures, report.PromptFigures, report.ReasoningFigures} {
			for _, f := range fs {
				if v, ok := f.Read(r); ok {
					row = append(row, ff(v))
				} else {
					row = append(row, "")
				}
			}
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// aggregates counts the aggregate rows.
func aggregates(d *report.Document) int {
	n := 0
	for _, r := range d.Runs {
		if r.Aggregate {
			n++
		}
	}
	return n
}

func ff(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// WriteTable prints a human-readable summary.
func WriteTable(w io.Writer, d *report.Document) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tok\tfailed\treq/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\tITL p50 ms\tITL p99 ms\tTPOT p50 ms\tE2E p99 s\tgoodput/s\t$/1k req\t")
	for _, r := range d.Runs {
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.4f\t\n", r.Name, s.RequestsCompleted, s.RequestsFailed,
			s.RequestThroughput, s.OutputTokensPerSecond, s.TTFT.P50*1e3, s.TTFT.P99*1e3, s.ITL.P50*1e3, s.ITL.P99*1e3,
			s.TPOT.P50*1e3, s.E2E.P99, s.GoodputPerSecond, s.Cost.Per1kRequestsUSD)
	}
	tw.Flush()
	writeReasoning(w, d)
	writeTokens(w, d)
	writePrompts(w, d) // prefix cache and images (prompts.go)
	if n := aggregates(d); n > 0 {
		fmt.Fprintf(w, "NOTE: rows \"(mean of N)\" show the mean of the level's N repeats in every column, except ok and failed: totals over the repeats\n")
	}
	writeGPU(w, d)      // GPU side per run (gpu.go)
	writeManifest(w, d) // server version, model revision, settings hash (manifest.go)
	for _, wmsg := range d.Metadata.Warnings {
		fmt.Fprintln(w, "WARNING:", wmsg)
	}
	for _, r := range d.Runs {
		if n := r.Summary.RequestsInterrupted; n > 0 && !r.Aggregate {
			fmt.Fprintf(w, "NOTE: %s: %d requests in flight when the run was interrupted are in requests_interrupted, not in ok or failed\n", r.Name, n)
		}
		if r.Summary.TokensEstimated {
			fmt.Fprintf(w, "NOTE: %s: the server sent no usage; token counts are estimates (one per chunk)\n", r.Name)
		}
		if s := r.Summary; r.Settings.Timestamps == "kernel" && s.KernelTimestamped < s.RequestsCompleted {
			fmt.Fprintf(w, "NOTE: %s: token times of %d of %d requests are when reads returned, not kernel receive times (those need Linux)\n",
				r.Name, s.RequestsCompleted-s.KernelTimestamped, s.RequestsCompleted)
		}
	}
}
