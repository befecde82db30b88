package campaign

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/report"
)

// Verdict is the search's answer in one sentence.
func Verdict(s *report.Search) string {
	open := s.Mode == report.ModeOpen
	l := func(v float64) string { return report.Level(open, v) }
	switch s.Outcome {
	case report.SearchBracketed:
		conf := "confirmed by a second measurement of both ends"
		if !s.Confirmed {
			conf = "NOT confirmed: " + s.Confirmation
		}
		return fmt.Sprintf("capacity under the SLO: %s meets every objective, %s does not (%s)", l(s.Pass), l(s.Fail), conf)
	case report.SearchAllPass:
		if s.Pass > 0 {
			return fmt.Sprintf("capacity under the SLO: at least %s (no level probed missed an objective)", l(s.Pass))
		}
	case report.SearchNonePass:
		if s.Fail > 0 {
			return fmt.Sprintf("capacity under the SLO: below %s (no level probed met every objective)", l(s.Fail))
		}
	}
	if s.Pass > 0 || s.Fail > 0 {
		return fmt.Sprintf("search interrupted: highest passing level %s, lowest failing %s", orDash(s.Pass, l), orDash(s.Fail, l))
	}
	return "search interrupted before any level was measured"
}

func orDash(v float64, f func(float64) string) string {
	if v == 0 {
		return "-"
	}
	return f(v)
}

// ObjectiveValue formats a check's value in the objective's unit.
func ObjectiveValue(o report.SearchObjective, c report.SearchCheck) string {
	switch {
	case !c.Measured:
		return "n/a"
	case o.Stat != "":
		return report.Seconds(c.Value)
	}
	return report.Percent(c.Value)
}

// WriteText writes the search: the verdict, the objectives and the rule,
// one row per probed level with every run's value of every objective
// (✗ after a value that missed it), and the probes in order.
func WriteText(w io.Writer, s *report.Search) {
	if s == nil {
		return
	}
	open := s.Mode == report.ModeOpen
	fmt.Fprintf(w, "\nSEARCH: %s\n", Verdict(s))
	var objs []string
	for _, o := range s.Objectives {
		objs = append(objs, o.Text)
	}
	fmt.Fprintf(w, "objectives: %s; %d run(s) per probe; rule: %s\n", strings.Join(objs, ", "), s.Repeats, s.Rule)
	fmt.Fprintf(w, "stopped: %s\n", s.Stop)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprint(tw, "level\tverdict\truns passed")
	for _, o := range s.Objectives {
		fmt.Fprintf(tw, "\t%s", o.Text)
	}
	fmt.Fprintln(tw, "\t")
	for _, lv := range s.Levels {
		passed := 0
		for _, r := range lv.Runs {
			if r.Passed {
				passed++
			}
		}
		verdict := "FAIL"
		if lv.Passed {
			verdict = "pass"
		}
		mark := ""
		switch lv.Level {
		case s.Pass:
			mark = " ◀ pass end"
		case s.Fail:
			mark = " ◀ fail end"
		}
		fmt.Fprintf(tw, "%s\t%s%s\t%d/%d", report.Level(open, lv.Level), verdict, mark, passed, len(lv.Runs))
		for i, o := range s.Objectives {
			var vals []string
			for _, r := range lv.Runs {
				v := ObjectiveValue(o, r.Checks[i])
				if !r.Checks[i].Passed {
					v += " ✗"
				}
				vals = append(vals, v)
			}
			fmt.Fprintf(tw, "\t%s", strings.Join(vals, ", "))
		}
		fmt.Fprintln(tw, "\t")
	}
	tw.Flush()
	var probes []string
	for _, p := range s.Probes {
		v := "pass"
		if !p.Passed {
			v = "fail"
		}
		probes = append(probes, fmt.Sprintf("%s %s %s", p.Phase, report.Level(open, p.Level), v))
	}
	fmt.Fprintf(w, "probes in order: %s\n", strings.Join(probes, " → "))
	for _, x := range s.NonMonotone {
		fmt.Fprintln(w, "WARNING:", x)
	}
}
