package campaign

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestWriteText(t *testing.T) {
	t.Parallel()
	cfg := config(t, report.ModeClosed)
	cfg.Start, cfg.Repeats = 4, 1
	res, err := Search(context.Background(), cfg, &fake{pass: below(5)})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	WriteText(&b, res.Search)
	got := b.String()
	for _, want := range []string{
		"SEARCH: capacity under the SLO: c=5 meets every objective, c=6 does not (confirmed by a second measurement of both ends)\n",
		"objectives: ttft:p99<=500ms; 1 run(s) per probe; rule: " + Rule,
		"stopped: bracket c=5–c=6 within the precision (0.05)\n",
		"c=5    pass ◀ pass end  2/2          100 ms, 100 ms",
		"c=6    FAIL ◀ fail end  0/2          2 s ✗, 2 s ✗",
		"probes in order: grow c=4 pass → grow c=8 fail → bisect c=6 fail → bisect c=5 pass → confirm c=5 pass → confirm c=6 fail\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("text lacks %q:\n%s", want, got)
		}
	}
	for _, tc := range []struct {
		s    report.Search
		want string
	}{
		{report.Search{Mode: report.ModeOpen, Outcome: report.SearchAllPass, Pass: 64}, "capacity under the SLO: at least 64/s (no level probed missed an objective)"},
		{report.Search{Mode: report.ModeClosed, Outcome: report.SearchNonePass, Fail: 1}, "capacity under the SLO: below c=1 (no level probed met every objective)"},
		{report.Search{Mode: report.ModeClosed, Outcome: report.SearchInterrupted, Pass: 2}, "search interrupted: highest passing level c=2, lowest failing -"},
		{report.Search{Mode: report.ModeClosed, Outcome: report.SearchBracketed, Pass: 2, Fail: 3, Confirmation: "so did c=3"},
			"capacity under the SLO: c=2 meets every objective, c=3 does not (NOT confirmed: so did c=3)"},
	} {
		if got := Verdict(&tc.s); got != tc.want {
			t.Errorf("verdict %q, want %q", got, tc.want)
		}
	}
}

// TestInterrupted: a search stopped by its context reports what it had.
func TestInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	f := &fake{pass: func(l float64, n int) bool {
		if n == 3 { // during the second probe
			cancel()
		}
		return true
	}}
	res, err := Search(ctx, config(t, report.ModeClosed), f)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Search
	if s.Outcome != report.SearchInterrupted || s.Pass != 2 || len(s.Probes) != 2 {
		t.Errorf("outcome %s pass %g probes %+v", s.Outcome, s.Pass, s.Probes)
	}
}
