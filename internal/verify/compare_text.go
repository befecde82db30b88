package verify

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// compareRow is one figure of a device pair as rendered.
type compareRow struct {
	ID, Name, Better               string
	Baseline, BaselineRange, BaseN string
	Other, OtherRange, OtherN      string
	Change, Verdict, Why, Reason   string
	Class                          CompareVerdict
}

func compareRows(dc DeviceComparison, s CompareSettings) []compareRow {
	var rows []compareRow
	for _, fc := range dc.Figures {
		f := unitFormat(fc.Unit)
		row := compareRow{ID: fc.ID, Name: fc.Name, Better: "higher", Change: fmtChange(fc),
			Verdict: strings.ToUpper(string(fc.Verdict)), Why: why(fc, s), Reason: fc.Reason, Class: fc.Verdict,
			Baseline: "—", Other: "—"}
		if fc.Direction == LowerIsBetter {
			row.Better = "lower"
		}
		if st := fc.Baseline; st != nil {
			row.Baseline, row.BaselineRange, row.BaseN = f(st.Median), fmtRange(f, st), fmt.Sprintf("(%d)", st.N)
		}
		if st := fc.Other; st != nil {
			row.Other, row.OtherRange, row.OtherN = f(st.Median), fmtRange(f, st), fmt.Sprintf("(%d)", st.N)
		}
		rows = append(rows, row)
	}
	return rows
}

// why is a verdict's basis in a few words.
func why(fc FigureComparison, s CompareSettings) string {
	switch fc.Basis {
	case BasisWithinTolerance:
		if fc.Unit == UnitRatio {
			return "within " + trim(s.RatioTolerance*100, 1) + " points"
		}
		return "within " + fmtPct(s.Tolerance)
	case BasisRunsOverlap:
		return "runs overlap"
	case BasisTooFewRuns:
		return fmt.Sprintf("too few runs (%d and %d)", fc.Baseline.N, fc.Other.N)
	case BasisRunsApart:
		return "runs apart (chance 1 in " + trim(1 / *fc.Chance, 0) + ")"
	case BasisOnlyInBaseline:
		if fc.Absent == AbsentNoGap {
			return "only in the baseline (no gap in the other)"
		}
		return "only in the baseline"
	case BasisOnlyInOther:
		if fc.Absent == AbsentNoGap {
			return "only in the other report (no gap in the baseline)"
		}
		return "only in the other report"
	}
	return ""
}

func countsLine(c CompareCounts) string {
	return fmt.Sprintf("%d worse, %d better, %d same, %d inconclusive, %d missing", c.Worse, c.Better, c.Same, c.Inconclusive, c.Missing)
}

// rulesLine states the comparison's rule.
func rulesLine(s CompareSettings) string {
	return fmt.Sprintf("a figure changed when its median moved by more than %s of the baseline's (ratios: %s points); it is better or worse only when, in addition, every run of one report lies beyond every run of the other, with enough runs that this happens by chance at most 1 time in %s",
		fmtPct(s.Tolerance), trim(s.RatioTolerance*100, 1), trim(1/s.MaxChance, 0))
}

// refLine describes a report: its file, when, what and with which driver.
func refLine(r ReportRef) string {
	parts := []string{r.File}
	if !r.Started.IsZero() {
		parts = append(parts, r.Started.UTC().Format(time.RFC3339))
	}
	if r.Version != "" {
		parts = append(parts, "gpulens-verify "+r.Version)
	}
	if sim := r.Simulated; sim != nil {
		parts = append(parts, fmt.Sprintf("SIMULATED (scenario %s, seed %d)", sim.Scenario, sim.Seed))
	}
	if r.Driver != "" {
		parts = append(parts, "driver "+r.Driver)
	}
	if r.CUDA != "" {
		parts = append(parts, "CUDA "+r.CUDA)
	}
	parts = append(parts, fmt.Sprintf("%d device(s), %d run(s) each", r.Devices, r.Repeat))
	return strings.Join(parts, " · ")
}

// hostsLine says how the GPUs of two reports were paired.
func hostsLine(rc ReportComparison) string {
	if rc.SameHost {
		return "The same host: GPUs matched by UUID (a GPU without a match paired by model, then by position)."
	}
	return "Different hosts (no GPU UUID in common): GPUs paired by model name in order, then by position."
}

func devRefLine(d DeviceRef) string {
	parts := []string{d.Label, d.Name}
	if d.UUID != "" {
		parts = append(parts, d.UUID)
	}
	return strings.Join(parts, " · ")
}

// pairLine names a pair of GPUs and how they were paired.
func pairLine(dc DeviceComparison) string {
	switch dc.MatchedBy {
	case MatchedByUUID:
		return devRefLine(dc.Baseline) + " (the same GPU; " + dc.Other.Label + " in the other report)"
	case MatchedByModel:
		return devRefLine(dc.Baseline) + " vs " + devRefLine(dc.Other) + " (paired by model)"
	}
	return devRefLine(dc.Baseline) + " vs " + devRefLine(dc.Other) + " (paired by position: different models)"
}

// WriteCompareText renders a comparison for a terminal: per compared report
// and per pair of GPUs, every figure in both reports with its change and
// verdict; then the overall verdict.
func WriteCompareText(w io.Writer, c *Comparison) error {
	var b strings.Builder
	tool := c.Tool
	if c.Version != "" {
		tool += " " + c.Version
	}
	fmt.Fprintf(&b, "%s: %d report(s) compared with the baseline\n", tool, len(c.Comparisons))
	b.WriteString("Rule: " + rulesLine(c.Settings) + "\n")
	b.WriteString("Baseline: " + refLine(c.Baseline) + "\n")
	for _, rc := range c.Comparisons {
		b.WriteString("\nCompared: " + refLine(rc.Other) + "\n")
		b.WriteString("  " + hostsLine(rc) + "\n")
		for _, dc := range rc.Devices {
			fmt.Fprintf(&b, "\n  %s — %s\n", strings.ToUpper(string(dc.Verdict)), pairLine(dc))
			tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "    Figure\tBetter\tBaseline\tmin–max\truns\tOther\tmin–max\truns\tChange\tVerdict\tWhy")
			for _, r := range compareRows(dc, c.Settings) {
				fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n",
					r.Name, r.Better, r.Baseline, r.BaselineRange, r.BaseN, r.Other, r.OtherRange, r.OtherN, r.Change, r.Verdict, r.Why)
			}
			tw.Flush()
		}
		for _, d := range rc.OnlyInBaseline {
			b.WriteString("  Only in the baseline (not compared): " + devRefLine(d) + "\n")
		}
		for _, d := range rc.OnlyInOther {
			b.WriteString("  Only in the other report (not compared): " + devRefLine(d) + "\n")
		}
		fmt.Fprintf(&b, "  %s: %s\n", strings.ToUpper(string(rc.Verdict)), countsLine(rc.Counts))
	}
	fmt.Fprintf(&b, "\n%s\n", compareVerdictLine(c.Summary))
	_, err := io.WriteString(w, b.String())
	return err
}

func compareVerdictLine(s CompareSummary) string {
	return fmt.Sprintf("Verdict: %s — %s; %d GPU(s) unmatched (exit %d)", strings.ToUpper(string(s.Verdict)), countsLine(s.CompareCounts), s.UnmatchedDevices, s.ExitCode)
}
