package render

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

// TestConsolePrompts: the console prints the server-reported hit ratio
// beside the expected one, says when the server reported nothing, and
// counts the images.
func TestConsolePrompts(t *testing.T) {
	d := aggregatedDoc()
	d.Runs = append(d.Runs, report.Run{Name: "silent", PrefixCache: &report.PrefixCacheSummary{Requests: 4, ExpectedHitRatio: new(0.25)}})
	var buf bytes.Buffer
	WriteTable(&buf, d)
	out := buf.String()
	for _, want := range []string{
		"hit ratio", "expected",
		"10/10", "40.0%", "50.0%", // repeat 1: reported by all, 0.4 measured, 0.5 expected
		"NOTE: silent: the server reported no cached tokens",
		"images: " + d.Runs[1].Name + ": 40 in 20 requests, 2.00 per request (max 2)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("console lacks %q:\n%s", want, out)
		}
	}
	if line := lineWith(out, "silent"); !strings.Contains(line, "0/4") || !strings.Contains(line, "-") || !strings.Contains(line, "25.0%") {
		t.Errorf("silent run's row %q: want 0/4 reported, no ratio, 25.0%% expected", line)
	}
}

// lineWith is the last line of s that contains sub.
func lineWith(s, sub string) string {
	last := ""
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "NOTE") {
			last = l
		}
	}
	return last
}
