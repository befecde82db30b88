package campaign

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// fake is a server whose runs meet "ttft:p99<=500ms" exactly when pass
// says so for that run (n counts every run from 0).
type fake struct {
	mode  string
	pass  func(level float64, n int) bool
	n     int
	calls []float64
}

func (f *fake) Probe(_ context.Context, level float64, repeats int) ([]report.Run, error) {
	f.calls = append(f.calls, level)
	var out []report.Run
	for i := 0; i < repeats; i++ {
		p99 := 2.0
		if f.pass(level, f.n) {
			p99 = 0.1
		}
		f.n++
		out = append(out, report.Run{Name: "probe's own name", Level: level, Settings: report.Settings{Mode: f.mode},
			Summary: report.Summary{RequestsCompleted: 10, GoodRequests: 10, TTFT: report.Dist{Count: 10, P99: p99, Mean: p99 / 2}}})
	}
	return out, nil
}

func below(capacity float64) func(float64, int) bool {
	return func(l float64, _ int) bool { return l <= capacity }
}

func mustObjective(t *testing.T, s string) report.SearchObjective {
	t.Helper()
	o, err := ParseObjective("--slo", s)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func config(t *testing.T, mode string) SearchConfig {
	return SearchConfig{Mode: mode, Objectives: []report.SearchObjective{mustObjective(t, "ttft:p99<=500ms")},
		Start: 1, Max: 1000, Growth: 2, Precision: 0.05, MaxProbes: 20, Repeats: 2}
}

func phases(s *report.Search) []string {
	var out []string
	for _, p := range s.Probes {
		out = append(out, fmt.Sprintf("%g %s %v", p.Level, p.Phase, p.Passed))
	}
	return out
}

// TestClosedLoopBracket: a server that carries 37 users is grown to 64,
// bisected to [37, 38] and confirmed there.
func TestClosedLoopBracket(t *testing.T) {
	t.Parallel()
	f := &fake{mode: report.ModeClosed, pass: below(37)}
	res, err := Search(context.Background(), config(t, report.ModeClosed), f)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Search
	want := []string{"1 grow true", "2 grow true", "4 grow true", "8 grow true", "16 grow true", "32 grow true", "64 grow false",
		"48 bisect false", "40 bisect false", "36 bisect true", "38 bisect false", "37 bisect true", "37 confirm true", "38 confirm false"}
	if got := phases(s); !reflect.DeepEqual(got, want) {
		t.Errorf("probes\n got %q\nwant %q", got, want)
	}
	if s.Pass != 37 || s.Fail != 38 || s.Outcome != report.SearchBracketed || !s.Confirmed {
		t.Errorf("pass %g fail %g outcome %s confirmed %v (%s)", s.Pass, s.Fail, s.Outcome, s.Confirmed, s.Confirmation)
	}
	if len(s.NonMonotone) != 0 {
		t.Errorf("non-monotone %q", s.NonMonotone)
	}
	// Level 37: 2 runs of the bisection, 2 confirming runs, named on.
	var lv37 report.SearchLevel
	for _, lv := range s.Levels {
		if lv.Level == 37 {
			lv37 = lv
		}
	}
	if len(lv37.Runs) != 4 || lv37.Runs[3].Name != "concurrency=37 repeat=4" || !lv37.Runs[3].Confirm || lv37.Runs[1].Confirm ||
		lv37.Runs[0].Checks[0].Value != 0.1 || !lv37.Passed {
		t.Errorf("level 37: %+v", lv37)
	}
	// The runs: level order, each level's runs then its aggregate.
	var names []string
	for _, r := range res.Runs {
		if r.Level == 37 || r.Level == 38 {
			names = append(names, r.Name)
		}
	}
	wantNames := []string{"concurrency=37 repeat=1", "concurrency=37 repeat=2", "concurrency=37 repeat=3", "concurrency=37 repeat=4",
		"concurrency=37 (mean of 4)", "concurrency=38 repeat=1", "concurrency=38 repeat=2", "concurrency=38 repeat=3",
		"concurrency=38 repeat=4", "concurrency=38 (mean of 4)"}
	if !reflect.DeepEqual(names, wantNames) {
		t.Errorf("runs\n got %q\nwant %q", names, wantNames)
	}
	if !strings.Contains(s.Stop, "within the precision") {
		t.Errorf("stop %q", s.Stop)
	}
}

// TestOpenLoopPrecision: in open loop the bisection stops when the
// bracket is within 5 % of its lower end.
func TestOpenLoopPrecision(t *testing.T) {
	t.Parallel()
	f := &fake{mode: report.ModeOpen, pass: below(3.3)}
	res, err := Search(context.Background(), config(t, report.ModeOpen), f)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Search
	want := []string{"1 grow true", "2 grow true", "4 grow false", "3 bisect true", "3.5 bisect false", "3.25 bisect true",
		"3.375 bisect false", "3.25 confirm true", "3.375 confirm false"}
	if got := phases(s); !reflect.DeepEqual(got, want) {
		t.Errorf("probes\n got %q\nwant %q", got, want)
	}
	if s.Pass != 3.25 || s.Fail != 3.375 || !s.Confirmed {
		t.Errorf("bracket %g–%g confirmed %v", s.Pass, s.Fail, s.Confirmed)
	}
}

func TestOutcomes(t *testing.T) {
	t.Parallel()
	t.Run("all pass up to the maximum", func(t *testing.T) {
		cfg := config(t, report.ModeClosed)
		cfg.Max = 10
		res, err := Search(context.Background(), cfg, &fake{pass: below(100)})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Search
		if s.Outcome != report.SearchAllPass || s.Pass != 10 || s.Fail != 0 ||
			!reflect.DeepEqual(phases(s), []string{"1 grow true", "2 grow true", "4 grow true", "8 grow true", "10 grow true"}) {
			t.Errorf("%s pass %g fail %g %q", s.Outcome, s.Pass, s.Fail, phases(s))
		}
	})
	t.Run("none passes", func(t *testing.T) {
		cfg := config(t, report.ModeClosed)
		cfg.Start = 4
		res, err := Search(context.Background(), cfg, &fake{pass: below(0)})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Search
		if s.Outcome != report.SearchNonePass || s.Pass != 0 || s.Fail != 1 ||
			!reflect.DeepEqual(phases(s), []string{"4 grow false", "2 shrink false", "1 shrink false"}) {
			t.Errorf("%s pass %g fail %g %q", s.Outcome, s.Pass, s.Fail, phases(s))
		}
	})
	t.Run("shrink finds a passing level", func(t *testing.T) {
		cfg := config(t, report.ModeClosed)
		cfg.Start = 16
		res, err := Search(context.Background(), cfg, &fake{pass: below(5)})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Search
		want := []string{"16 grow false", "8 shrink false", "4 shrink true", "6 bisect false", "5 bisect true", "5 confirm true", "6 confirm false"}
		if s.Pass != 5 || s.Fail != 6 || !s.Confirmed || !reflect.DeepEqual(phases(s), want) {
			t.Errorf("pass %g fail %g %q", s.Pass, s.Fail, phases(s))
		}
	})
	t.Run("probe budget", func(t *testing.T) {
		cfg := config(t, report.ModeClosed)
		cfg.MaxProbes = 8
		res, err := Search(context.Background(), cfg, &fake{pass: below(37)})
		if err != nil {
			t.Fatal(err)
		}
		s := res.Search
		// 7 probes find [32, 64]; the 8th (48) fails: [32, 48], then confirmed.
		if s.Pass != 32 || s.Fail != 48 || !strings.Contains(s.Stop, "probe budget (8) spent") || !s.Confirmed {
			t.Errorf("pass %g fail %g stop %q %q", s.Pass, s.Fail, s.Stop, phases(s))
		}
	})
}

// TestNoiseIsReported: the confirming runs at the passing end of the
// bracket miss once; the level then counts as failing, the bracket moves
// below it, and the disagreement is reported.
func TestNoiseIsReported(t *testing.T) {
	t.Parallel()
	// Runs 0-1 at 1, 2-3 at 2, 4-5 at 4 (fail): bisect 3 (runs 6-7)
	// passes; confirmation at 3 runs 8-9: run 9 misses.
	f := &fake{pass: func(l float64, n int) bool { return l <= 3 && n != 9 }}
	res, err := Search(context.Background(), config(t, report.ModeClosed), f)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Search
	want := []string{"1 grow true", "2 grow true", "4 grow false", "3 bisect true", "3 confirm false", "2 confirm true", "3 confirm true"}
	if got := phases(s); !reflect.DeepEqual(got, want) {
		t.Errorf("probes\n got %q\nwant %q", got, want)
	}
	// 3 has now 6 runs, one missed: it fails; the second confirmation's
	// runs at 3 all passed, so the bracket [2, 3] is not confirmed.
	if s.Pass != 2 || s.Fail != 3 || s.Confirmed || !strings.Contains(s.Confirmation, "but so did c=3") {
		t.Errorf("pass %g fail %g confirmed %v: %s", s.Pass, s.Fail, s.Confirmed, s.Confirmation)
	}
	if want := []string{"c=3: 5 of 6 runs passed (noise at this level; it counts as failing)"}; !reflect.DeepEqual(s.NonMonotone, want) {
		t.Errorf("non-monotone %q", s.NonMonotone)
	}
}

// TestNonMonotoneIsReported: a level passing above a failing one (the
// search itself never probes above its lowest failing level, but a
// confirmation can fail a level below earlier passes) is reported.
func TestNonMonotoneIsReported(t *testing.T) {
	t.Parallel()
	x := &searcher{cfg: config(t, report.ModeClosed), s: &report.Search{}, runs: map[float64][]report.Run{},
		levels: map[float64]*report.SearchLevel{
			2: {Level: 2, Passed: true, Runs: []report.SearchRun{{Passed: true}}},
			3: {Level: 3, Passed: false, Runs: []report.SearchRun{{Passed: false}}},
			4: {Level: 4, Passed: true, Runs: []report.SearchRun{{Passed: true}}},
		}}
	if pass, fail := x.bracket(); pass != 2 || fail != 3 {
		t.Errorf("bracket %g–%g, want 2–3", pass, fail)
	}
	s := x.result().Search
	if want := []string{"c=4 passed although c=3, a lower level, failed"}; !reflect.DeepEqual(s.NonMonotone, want) {
		t.Errorf("non-monotone %q", s.NonMonotone)
	}
}
