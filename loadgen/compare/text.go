package compare

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// WriteText writes the comparison as text: the reports, the warnings and
// notes, then per pair and level one row per metric.
func (r *Result) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "report\tmodel\tGPU\tserver\tsettings hash\tlevels\trepeats\tprice")
	for _, ri := range r.Reports {
		price := "-"
		if ri.GPUHourlyUSD > 0 {
			price = fmt.Sprintf("%s/h × %d", FormatValue("USD", ri.GPUHourlyUSD), max(ri.GPUs, 1))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", ri.Name, dash(firstOf(ri.ServerModel, ri.Model)), dash(ri.GPU),
			dash(ri.ServerVersion), dash(short(ri.SettingsHash)), len(ri.Levels), ri.Repeats, price)
	}
	tw.Flush()
	writeTokens(ew, r.Reports)
	for _, x := range r.Warnings {
		fmt.Fprintln(ew, "WARNING:", x)
	}
	for _, x := range r.Notes {
		fmt.Fprintln(ew, "NOTE:", x)
	}
	writeSearches(ew, r.Searches) // comparisons of searches (search.go)
	for _, p := range r.Pairs {
		fmt.Fprintf(ew, "\nA = %s, B = %s\n", p.A, p.B)
		for _, l := range p.Levels {
			fmt.Fprintf(ew, "\n%s\n", l.Label)
			tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "metric\tA mean [95% CI]\tB mean [95% CI]\tB vs A\tverdict")
			for _, c := range l.Metrics {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.Title+" ("+c.Unit+")", FormatStat(c.Unit, c.A), FormatStat(c.Unit, c.B),
					FormatRelative(c), c.VerdictText("A", "B"))
			}
			tw.Flush()
		}
		if len(p.OnlyInA) > 0 || len(p.OnlyInB) > 0 {
			fmt.Fprintf(ew, "\nlevels not compared: only in A %s; only in B %s\n", floats(p.OnlyInA), floats(p.OnlyInB))
		}
		a, b, noise, unknown := p.Tally()
		fmt.Fprintf(ew, "\nA better: %d, B better: %d, within the noise: %d, no repeats: %d (metric × level)\n", a, b, noise, unknown)
	}
	return ew.err
}

// writeTokens prints the reports' lengths per level, asked for and as the
// server counted them, when any report asked for lengths.
func writeTokens(w io.Writer, reports []ReportInfo) {
	has := false
	for _, ri := range reports {
		has = has || len(ri.Tokens) > 0
	}
	if !has {
		return
	}
	fmt.Fprintln(w, "\ntokens per request, mean/p50/p99 (asked for, and as the server counted them):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "report\trun\tinput asked\tinput server\toutput asked\toutput server")
	for _, ri := range reports {
		for i := range ri.Tokens {
			t := &ri.Tokens[i]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", ri.Name, t.Run, report.FormatTokens(t.InputRequested), report.FormatTokens(&t.Input),
				report.FormatTokens(t.OutputRequested), report.FormatTokens(&t.Output))
		}
	}
	tw.Flush()
}

// Tally counts the pair's verdicts: A better, B better, within the noise
// (or equal), and no repeats.
func (p Pair) Tally() (a, b, noise, noRepeats int) {
	for _, l := range p.Levels {
		for _, c := range l.Metrics {
			switch {
			case c.Verdict == VerdictDifferent && c.Winner == p.A:
				a++
			case c.Verdict == VerdictDifferent:
				b++
			case c.Verdict == VerdictNoRepeats:
				noRepeats++
			default:
				noise++
			}
		}
	}
	return a, b, noise, noRepeats
}

// VerdictText is the verdict in words, calling the reports nameA and
// nameB.
func (c Comparison) VerdictText(nameA, nameB string) string {
	switch c.Verdict {
	case VerdictDifferent:
		better := nameB
		if (c.Difference < 0) != (c.Better == Lower) {
			better = nameA
		}
		s := better + " better: larger than the noise"
		if c.Welch != nil {
			s += fmt.Sprintf(" (Welch t=%.2f, df=%.1f, |t| > %.3f)", c.Welch.T, c.Welch.DF, c.Welch.Critical)
		} else {
			s += " (no spread in the repeats)"
		}
		return s
	case VerdictNoise:
		s := "within the noise"
		if c.Welch != nil {
			s += fmt.Sprintf(" (Welch t=%.2f, df=%.1f, |t| ≤ %.3f)", c.Welch.T, c.Welch.DF, c.Welch.Critical)
		}
		return s
	case VerdictNoRepeats:
		return "no repeats: cannot tell noise"
	case VerdictEqual:
		return "equal"
	}
	return c.Verdict
}

// FormatStat writes a stat as "mean [low, high]", or the mean alone for a
// single run.
func FormatStat(unit string, s report.Stat) string {
	if s.N < 2 {
		return FormatValue(unit, s.Mean)
	}
	return fmt.Sprintf("%s [%s, %s]", FormatValue(unit, s.Mean), FormatValue(unit, s.CI95Low), FormatValue(unit, s.CI95High))
}

// FormatRelative writes B's difference from A in percent of A ("+12.3 %"),
// or the absolute difference when A is 0.
func FormatRelative(c Comparison) string {
	if c.A.Mean == 0 {
		if c.Difference == 0 {
			return "0"
		}
		return signed(FormatValue(c.Unit, c.Difference), c.Difference)
	}
	return fmt.Sprintf("%+.1f %%", 100*c.RelativeDifference)
}

func signed(s string, v float64) string {
	if v > 0 {
		return "+" + s
	}
	return s
}

// FormatValue writes v in its unit (loadgen/report, format.go): seconds as ms or µs
// when small, bytes in GiB (MiB below 1 GiB), dollars to the cent or three significant
// digits below $1, other units with three significant digits.
func FormatValue(unit string, v float64) string {
	switch unit {
	case "seconds":
		return report.Seconds(v)
	case "bytes":
		return report.Bytes(v)
	case "USD":
		return report.USD(v, 3)
	default:
		return report.Num(v)
	}
}

func floats(v []float64) string {
	if len(v) == 0 {
		return "none"
	}
	var s []string
	for _, x := range v {
		s = append(s, strconv.FormatFloat(x, 'g', -1, 64))
	}
	return strings.Join(s, ", ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func firstOf(s ...string) string {
	for _, x := range s {
		if x != "" {
			return x
		}
	}
	return ""
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
