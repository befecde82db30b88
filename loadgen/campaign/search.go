package campaign

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// Rule is the pass rule, stated in every result.
const Rule = "a level passes only when every run at it (every repeat of every probe, confirming runs included) meets every objective"

// confirmRounds bounds how often a confirmation that moved the bracket
// sends the search back to bisecting.
const confirmRounds = 3

// SearchConfig is a search's settings.
type SearchConfig struct {
	// Mode is report.ModeClosed (levels are users, whole numbers) or
	// report.ModeOpen (requests per second).
	Mode       string
	Objectives []report.SearchObjective
	// Start is the first level probed; Max the highest the search may
	// probe.
	Start, Max float64
	// Growth (> 1) multiplies the level in the exponential phase.
	Growth float64
	// Precision (0–1] is when the bracket is narrow enough: (fail − pass)
	// ≤ Precision × pass; in closed loop also fail − pass = 1.
	Precision float64
	// MaxProbes bounds the levels probed before confirmation.
	MaxProbes int
	// Repeats is the number of runs of each probe (and of each
	// confirmation).
	Repeats int
}

// Validate checks the settings; errors name the option (package option).
func (c *SearchConfig) Validate() error {
	switch {
	case c.Mode != report.ModeClosed && c.Mode != report.ModeOpen:
		return option.Errorf("%s %q: want %q or %q", option.Name("Mode"), c.Mode, report.ModeClosed, report.ModeOpen)
	case len(c.Objectives) == 0:
		return option.Errorf("%s: no objective given", option.Name("Objectives"))
	case !(c.Start > 0) || math.IsInf(c.Start, 0):
		return option.Errorf("%s must be positive, got %g", option.Name("Start"), c.Start)
	case !(c.Max >= c.Start) || math.IsInf(c.Max, 0):
		return option.Errorf("%s (%g) must be at least %s (%g)", option.Name("Max"), c.Max, option.Name("Start"), c.Start)
	case !(c.Growth > 1) || math.IsInf(c.Growth, 0):
		return option.Errorf("%s must be above 1, got %g", option.Name("Growth"), c.Growth)
	case !(c.Precision > 0 && c.Precision <= 1):
		return option.Errorf("%s must be in (0, 1], got %g", option.Name("Precision"), c.Precision)
	case c.MaxProbes < 1:
		return option.Errorf("%s must be at least 1, got %d", option.Name("MaxProbes"), c.MaxProbes)
	case c.Repeats < 1:
		return option.Errorf("%s must be at least 1, got %d", option.Name("Repeats"), c.Repeats)
	}
	if c.Mode == report.ModeClosed {
		for _, x := range []struct {
			name option.Name
			v    float64
		}{{"Start", c.Start}, {"Max", c.Max}} {
			if x.v != math.Trunc(x.v) {
				return option.Errorf("%s must be a whole number of users in closed loop, got %g", x.name, x.v)
			}
		}
	}
	return nil
}

// Prober runs one probe: repeats runs at level, returned in order. An
// error ends the search (a run the runner refused); an interrupted run is
// returned as measured, and the search stops when ctx is done.
type Prober interface {
	Probe(ctx context.Context, level float64, repeats int) ([]report.Run, error)
}

// SearchResult is a finished search: the bracket and the evidence
// (Search), and every run renamed by level and repeat, in level order,
// with an aggregate after the runs of every level with more than one
// (the document's runs).
type SearchResult struct {
	Search *report.Search
	Runs   []report.Run
}

type searcher struct {
	cfg    SearchConfig
	prober Prober
	s      *report.Search
	levels map[float64]*report.SearchLevel
	runs   map[float64][]report.Run
	probes int // probes before confirmation
}

// Search runs the search. ctx cancelled: the result covers what was probed
// (Outcome report.SearchInterrupted unless a bracket was already found).
func Search(ctx context.Context, cfg SearchConfig, p Prober) (*SearchResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	x := &searcher{cfg: cfg, prober: p, levels: map[float64]*report.SearchLevel{}, runs: map[float64][]report.Run{},
		s: &report.Search{Mode: cfg.Mode, Objectives: cfg.Objectives, Rule: Rule, Start: cfg.Start, Max: cfg.Max, Growth: cfg.Growth,
			Precision: cfg.Precision, MaxProbes: cfg.MaxProbes, Repeats: cfg.Repeats}}
	if err := x.run(ctx); err != nil {
		return nil, err
	}
	return x.result(), nil
}

func (x *searcher) run(ctx context.Context) error {
	s := x.s
	// Exponential phase: up until a level fails, or down until one passes.
	level := x.cfg.Start
	for {
		if ctx.Err() != nil {
			return x.interrupted()
		}
		phase := report.PhaseGrow
		if _, fail := x.bracket(); fail > 0 {
			phase = report.PhaseShrink
		}
		if err := x.probe(ctx, level, phase, false); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return x.interrupted()
		}
		pass, fail := x.bracket()
		switch {
		case fail == 0 && level >= x.cfg.Max:
			s.Outcome, s.Pass, s.Stop = report.SearchAllPass, pass, fmt.Sprintf("every level up to the maximum (%s) met the objectives", x.label(x.cfg.Max))
			return nil
		case fail == 0:
			level = x.grow(level)
		case pass > 0:
			return x.bisect(ctx)
		default: // nothing passed yet
			next := x.shrink(level)
			if next <= 0 {
				s.Outcome, s.Fail, s.Stop = report.SearchNonePass, fail, fmt.Sprintf("even %s missed an objective", x.label(fail))
				return nil
			}
			level = next
		}
		if x.probes >= x.cfg.MaxProbes {
			pass, fail := x.bracket()
			s.Pass, s.Fail = pass, fail
			s.Outcome = report.SearchAllPass
			if fail > 0 {
				s.Outcome = report.SearchNonePass
			}
			s.Stop = fmt.Sprintf("probe budget (%d) spent before a bracket was found", x.cfg.MaxProbes)
			return nil
		}
	}
}

// bisect halves the bracket until it is narrow enough or the budget is
// spent, then confirms it; a confirmation that moves the bracket bisects
// again (at most confirmRounds times).
func (x *searcher) bisect(ctx context.Context) error {
	s := x.s
	for round := 1; ; round++ {
		for {
			pass, fail := x.bracket()
			s.Pass, s.Fail, s.Outcome = pass, fail, report.SearchBracketed
			if pass == 0 {
				s.Outcome, s.Stop = report.SearchNonePass, "the confirmation failed the lowest passing level"
				return nil
			}
			if x.narrow(pass, fail) {
				s.Stop = fmt.Sprintf("bracket %s–%s within the precision (%g)", x.label(pass), x.label(fail), x.cfg.Precision)
				break
			}
			if x.probes >= x.cfg.MaxProbes {
				s.Stop = fmt.Sprintf("probe budget (%d) spent; bracket %s–%s is wider than the precision (%g)", x.cfg.MaxProbes,
					x.label(pass), x.label(fail), x.cfg.Precision)
				break
			}
			if ctx.Err() != nil {
				s.Stop = "interrupted while bisecting"
				return nil
			}
			if err := x.probe(ctx, x.mid(pass, fail), report.PhaseBisect, false); err != nil {
				return err
			}
		}
		if ctx.Err() != nil {
			s.Stop = "interrupted before the confirmation"
			return nil
		}
		pass, fail := s.Pass, s.Fail
		passHeld, err := x.confirm(ctx, pass)
		if err != nil {
			return err
		}
		failHeld := false
		if passHeld {
			held, err := x.confirm(ctx, fail)
			if err != nil {
				return err
			}
			failHeld = !held
		}
		switch {
		case passHeld && failHeld:
			s.Confirmed = true
			s.Confirmation = fmt.Sprintf("measured again, %s met every objective in all %d runs and %s missed one in at least one run",
				x.label(pass), x.cfg.Repeats, x.label(fail))
			return nil
		case passHeld:
			s.Confirmation = fmt.Sprintf("measured again, %s met every objective in all %d runs, but so did %s (which had missed one before): "+
				"the boundary is within the noise at this precision; more repeats or longer runs would narrow it", x.label(pass), x.cfg.Repeats, x.label(fail))
			return nil
		}
		s.Confirmation = fmt.Sprintf("measured again, %s missed an objective: it now counts as failing and the bracket moves below it", x.label(pass))
		if round >= confirmRounds || ctx.Err() != nil {
			s.Pass, s.Fail = x.bracket()
			if s.Pass == 0 {
				s.Outcome = report.SearchNonePass
			}
			s.Stop += fmt.Sprintf("; %d confirmation rounds moved the bracket, stopped", round)
			return nil
		}
	}
}

// confirm runs a confirmation probe at level and reports whether all its
// runs met every objective.
func (x *searcher) confirm(ctx context.Context, level float64) (bool, error) {
	if err := x.probe(ctx, level, report.PhaseConfirm, true); err != nil {
		return false, err
	}
	return x.s.Probes[len(x.s.Probes)-1].Passed, nil
}

func (x *searcher) interrupted() error {
	x.s.Outcome, x.s.Stop = report.SearchInterrupted, "interrupted"
	x.s.Pass, x.s.Fail = x.bracket()
	return nil
}

// probe runs one probe and records its runs and checks.
func (x *searcher) probe(ctx context.Context, level float64, phase string, confirm bool) error {
	runs, err := x.prober.Probe(ctx, level, x.cfg.Repeats)
	if err != nil {
		return fmt.Errorf("probing %s: %w", x.label(level), err)
	}
	if !confirm {
		x.probes++
	}
	x.s.Probes = append(x.s.Probes, report.SearchProbe{Level: level, Phase: phase, Passed: true})
	pr := &x.s.Probes[len(x.s.Probes)-1]
	lv := x.levels[level]
	if lv == nil {
		lv = &report.SearchLevel{Level: level, Passed: true}
		x.levels[level] = lv
	}
	for _, r := range runs {
		if r.Aggregate {
			continue
		}
		rep := len(x.runs[level]) + 1
		r.Level, r.Repeat, r.Name = level, rep, report.RunName(x.cfg.Mode, level, rep)
		checks, ok := CheckRun(x.cfg.Objectives, &r)
		lv.Runs = append(lv.Runs, report.SearchRun{Name: r.Name, Repeat: rep, Probe: len(x.s.Probes), Confirm: confirm, Passed: ok, Checks: checks})
		lv.Passed = lv.Passed && ok
		pr.Passed = pr.Passed && ok
		x.runs[level] = append(x.runs[level], r)
	}
	if len(lv.Runs) == 0 { // nothing ran (interrupted at once): nothing known
		delete(x.levels, level)
		pr.Passed = false
	}
	return nil
}

// bracket returns the lowest failing level (0: none) and the highest
// passing level below it (0: none).
func (x *searcher) bracket() (pass, fail float64) {
	for l, lv := range x.levels {
		if !lv.Passed && (fail == 0 || l < fail) {
			fail = l
		}
	}
	for l, lv := range x.levels {
		if lv.Passed && (fail == 0 || l < fail) && l > pass {
			pass = l
		}
	}
	return pass, fail
}

func (x *searcher) closed() bool { return x.cfg.Mode == report.ModeClosed }

// narrow reports whether the bracket is as narrow as asked.
func (x *searcher) narrow(pass, fail float64) bool {
	if x.closed() && fail-pass <= 1 {
		return true
	}
	return fail-pass <= x.cfg.Precision*pass
}

// grow is the next level of the exponential phase, at most Max.
func (x *searcher) grow(l float64) float64 {
	next := l * x.cfg.Growth
	if x.closed() {
		next = max(math.Ceil(next), l+1)
	}
	return min(next, x.cfg.Max)
}

// shrink is the next lower level after l failed with nothing passing; 0
// when there is none (a single user failed).
func (x *searcher) shrink(l float64) float64 {
	next := l / x.cfg.Growth
	if x.closed() {
		next = math.Floor(next)
		if next >= l {
			next = l - 1
		}
	}
	return next
}

// mid is the level halving the bracket (a whole number strictly between
// in closed loop).
func (x *searcher) mid(pass, fail float64) float64 {
	m := (pass + fail) / 2
	if x.closed() {
		m = math.Floor(m)
	}
	return m
}

func (x *searcher) label(l float64) string { return report.Level(x.cfg.Mode == report.ModeOpen, l) }

// result orders the levels and runs and states the contradictions.
func (x *searcher) result() *SearchResult {
	s := x.s
	order := make([]float64, 0, len(x.levels))
	for l := range x.levels {
		order = append(order, l)
	}
	sort.Float64s(order)
	res := &SearchResult{Search: s}
	for _, l := range order {
		s.Levels = append(s.Levels, *x.levels[l])
		reps := x.runs[l]
		res.Runs = append(res.Runs, reps...)
		if len(reps) > 1 {
			res.Runs = append(res.Runs, stats.Aggregate(reps))
		}
	}
	lowestFail := 0.0
	for _, lv := range s.Levels {
		if !lv.Passed {
			if lowestFail == 0 {
				lowestFail = lv.Level
			}
			continue
		}
		if lowestFail > 0 {
			s.NonMonotone = append(s.NonMonotone, fmt.Sprintf("%s passed although %s, a lower level, failed", x.label(lv.Level), x.label(lowestFail)))
		}
	}
	for _, lv := range s.Levels {
		passed := 0
		for _, r := range lv.Runs {
			if r.Passed {
				passed++
			}
		}
		if passed > 0 && passed < len(lv.Runs) {
			s.NonMonotone = append(s.NonMonotone, fmt.Sprintf("%s: %d of %d runs passed (noise at this level; it counts as failing)",
				x.label(lv.Level), passed, len(lv.Runs)))
		}
	}
	return res
}
