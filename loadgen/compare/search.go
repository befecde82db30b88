package compare

import (
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Verdicts on two searches (SearchPair.Verdict).
const (
	// SearchAHigher / SearchBHigher: one search met the objectives at a
	// level where the other had failed at or below it: its capacity is
	// higher, whatever the noise within each search's precision.
	SearchAHigher = "a_higher"
	SearchBHigher = "b_higher"
	// SearchSame: the same bracket.
	SearchSame = "same_bracket"
	// SearchOverlap: the brackets overlap: the difference, if any, is
	// below the searches' precision.
	SearchOverlap = "overlapping"
)

// SearchPair compares two searches (reports of gpulens-loadgen search)
// by their brackets and the evidence at each end.
type SearchPair struct {
	A    string `json:"a"`
	B    string `json:"b"`
	Mode string `json:"mode"`
	// Verdict is one of the Search* verdicts; Text says it in words.
	Verdict string `json:"verdict"`
	Text    string `json:"text"`
	// Ends are each search's bracket ends (A's then B's): the level and
	// its evidence.
	Ends []SearchEnd `json:"ends"`
}

// SearchEnd is one end of a search's bracket and its evidence.
type SearchEnd struct {
	Report string `json:"report"`
	// End is "pass" (the highest passing level) or "fail" (the lowest
	// failing one).
	End       string  `json:"end"`
	Level     float64 `json:"level"`
	Confirmed bool    `json:"confirmed"`
	// RunsPassed of Runs met every objective.
	RunsPassed int `json:"runs_passed"`
	Runs       int `json:"runs"`
	// Values are each objective's values in the level's runs, formatted,
	// in the search's objective order (✗ marks a miss).
	Objectives []string   `json:"objectives"`
	Values     [][]string `json:"values"`
}

// compareSearches compares a and b when both are searches: nil when
// either is not, an error when they are not comparable (other modes).
// warnings gets what makes the comparison weaker (other objectives,
// unconfirmed brackets).
func compareSearches(a, b Input, warnings *[]string) (*SearchPair, error) {
	sa, sb := a.Doc.Metadata.Search, b.Doc.Metadata.Search
	if sa == nil || sb == nil {
		return nil, nil
	}
	if sa.Mode != sb.Mode {
		return nil, fmt.Errorf("%s searched %s-loop levels and %s %s-loop ones: not comparable", a.Name, sa.Mode, b.Name, sb.Mode)
	}
	open := sa.Mode == report.ModeOpen
	l := func(v float64) string { return report.Level(open, v) }
	if oa, ob := objectiveList(sa), objectiveList(sb); oa != ob {
		*warnings = append(*warnings, fmt.Sprintf("%s and %s searched for other objectives (%s; %s): their capacities answer different questions", a.Name, b.Name, oa, ob))
	}
	for _, x := range []struct {
		name string
		s    *report.Search
	}{{a.Name, sa}, {b.Name, sb}} {
		if x.s.Outcome == report.SearchBracketed && !x.s.Confirmed {
			*warnings = append(*warnings, fmt.Sprintf("%s: its bracket was not confirmed: %s", x.name, x.s.Confirmation))
		}
		if x.s.Outcome == report.SearchInterrupted {
			*warnings = append(*warnings, x.name+": its search was interrupted")
		}
	}
	p := &SearchPair{A: a.Name, B: b.Name, Mode: sa.Mode}
	// Capacity lies in [pass, fail): pass 0 when nothing passed, fail +Inf
	// when nothing failed up to the maximum.
	lo := func(s *report.Search) float64 { return s.Pass }
	hi := func(s *report.Search) float64 {
		if s.Fail == 0 {
			return math.Inf(1)
		}
		return s.Fail
	}
	bracket := func(s *report.Search) string {
		switch {
		case s.Pass == 0 && s.Fail == 0:
			return "nothing measured"
		case s.Fail == 0:
			return "at least " + l(s.Pass)
		case s.Pass == 0:
			return "below " + l(s.Fail)
		}
		return l(s.Pass) + " passes, " + l(s.Fail) + " fails"
	}
	switch {
	case lo(sa) == lo(sb) && hi(sa) == hi(sb):
		p.Verdict = SearchSame
	case hi(sa) <= lo(sb) && lo(sb) > 0:
		p.Verdict = SearchBHigher
	case hi(sb) <= lo(sa) && lo(sa) > 0:
		p.Verdict = SearchAHigher
	default:
		p.Verdict = SearchOverlap
	}
	words := map[string]string{
		SearchSame:    "the same bracket",
		SearchBHigher: "B carries more load under the SLO: it met the objectives at a level at or above one where A failed",
		SearchAHigher: "A carries more load under the SLO: it met the objectives at a level at or above one where B failed",
		SearchOverlap: "the brackets overlap: any difference is below the searches' precision",
	}
	p.Text = fmt.Sprintf("A (%s): %s; B (%s): %s: %s", a.Name, bracket(sa), b.Name, bracket(sb), words[p.Verdict])
	for _, x := range []struct {
		name string
		s    *report.Search
	}{{a.Name, sa}, {b.Name, sb}} {
		for _, end := range []struct {
			name  string
			level float64
		}{{"pass", x.s.Pass}, {"fail", x.s.Fail}} {
			if end.level == 0 {
				continue
			}
			p.Ends = append(p.Ends, searchEnd(x.name, end.name, end.level, x.s))
		}
	}
	return p, nil
}

func objectiveList(s *report.Search) string {
	var out []string
	for _, o := range s.Objectives {
		out = append(out, fmt.Sprintf("%s%s%s%s", o.Metric, map[bool]string{true: ":" + o.Stat}[o.Stat != ""], o.Op, report.Num(o.Threshold)))
	}
	return strings.Join(out, ", ")
}

func searchEnd(name, end string, level float64, s *report.Search) SearchEnd {
	e := SearchEnd{Report: name, End: end, Level: level, Confirmed: s.Confirmed}
	for _, o := range s.Objectives {
		e.Objectives = append(e.Objectives, o.Text)
	}
	e.Values = make([][]string, len(s.Objectives))
	for _, lv := range s.Levels {
		if lv.Level != level {
			continue
		}
		for _, r := range lv.Runs {
			e.Runs++
			if r.Passed {
				e.RunsPassed++
			}
			for i, o := range s.Objectives {
				if i < len(r.Checks) {
					v := campaign.ObjectiveValue(o, r.Checks[i])
					if !r.Checks[i].Passed {
						v += " ✗"
					}
					e.Values[i] = append(e.Values[i], v)
				}
			}
		}
	}
	return e
}

// Evidence is the end's objective values, objective by objective:
// "goodput>=0.9: 100 %, 100 %; ttft:p99<=2s: 81 ms, 95 ms".
func (e SearchEnd) Evidence() string {
	var vals []string
	for i, o := range e.Objectives {
		vals = append(vals, o+": "+strings.Join(e.Values[i], ", "))
	}
	return strings.Join(vals, "; ")
}

// writeSearches prints the comparisons of searches: the verdict, then
// each bracket end with its runs' values of every objective.
func writeSearches(w io.Writer, pairs []SearchPair) {
	for _, p := range pairs {
		fmt.Fprintf(w, "\nsearch: %s\n", p.Text)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "report\tend\tlevel\truns passed\tobjective values per run")
		for _, e := range p.Ends {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\n", e.Report, e.End, report.Level(p.Mode == report.ModeOpen, e.Level), e.RunsPassed, e.Runs,
				e.Evidence())
		}
		tw.Flush()
	}
}

// sharesLevel reports whether a and b have a level in common.
func sharesLevel(a, b *side) bool {
	for l := range a.levels {
		if _, ok := b.levels[l]; ok {
			return true
		}
	}
	return false
}
