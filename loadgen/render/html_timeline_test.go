package render

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestWorkloadCharts(t *testing.T) {
	sample := func(off float64, kv, ratio, running, waiting float64, hasRatio, hasWaiting bool) report.ServerSample {
		v := map[string]float64{"kv_cache_usage_ratio": kv, "requests_running": running}
		if hasRatio {
			v["prefix_cache_hit_ratio"] = ratio
		}
		if hasWaiting {
			v["requests_waiting"] = waiting
		}
		return report.ServerSample{OffsetSeconds: off, Values: v}
	}
	// Run A: 3 scrapes, the hit ratio in the first and last only (a gap:
	// no line across it). Run B: 1000 scrapes without ratio or waiting,
	// thinned to every 4th plus the last: 251 points.
	a := []report.ServerSample{sample(-0.01, 0.1, 0.5, 2, 1, true, true), sample(1, 0.4, 0, 5, 0, false, true), sample(2, 0.2, 0.8, 0, 0, true, true)}
	var b []report.ServerSample
	for i := 0; i < 1000; i++ {
		b = append(b, sample(float64(i)/10, 0.3, 0, 1, 0, false, false))
	}
	turns := &report.TurnSummary{Conversations: 2, FirstTurnTTFT: report.Dist{Count: 2, P50: 0.2, P99: 0.3}, LaterTurnsTTFT: report.Dist{Count: 4, P50: 0.1, P99: 0.15}}
	set := report.Settings{Mode: "closed", MultiTurn: report.MultiTurnSettings{Turns: 3, ThinkTimeSeconds: 0.5},
		Trace: report.TraceSettings{File: "t.jsonl", Format: "mooncake", Requests: 4, Skipped: 1, Speedup: 2, ArrivalTimes: true}}
	doc := &report.Document{Runs: []report.Run{
		{Name: "concurrency=1", Level: 1, Settings: set, ServerMetrics: &report.ServerMetrics{Timeline: a}, Turns: turns},
		{Name: "concurrency=8", Level: 8, Settings: report.Settings{Mode: "closed"}, ServerMetrics: &report.ServerMetrics{Timeline: b}},
		{Name: "concurrency=16", Level: 16, Settings: report.Settings{Mode: "closed"}, ServerMetrics: &report.ServerMetrics{Error: "refused"}},
	}}
	var buf bytes.Buffer
	if err := Render(&buf, doc); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	marks := map[string]int{}
	for _, m := range figureRE.FindAllStringSubmatch(html, -1) {
		marks[m[1]], _ = strconv.Atoi(m[2])
	}
	for name, want := range map[string]int{
		ChartServerCacheTimeline:    3 + 2 + 251, // A: KV 3, ratio 2; B: KV 251
		ChartServerRequestsTimeline: 3 + 3 + 251, // A: running 3, waiting 3; B: running 251
		ChartTurnsTTFT:              4,           // run A: 4 bars
	} {
		if got, ok := marks[name]; !ok || got != want {
			t.Errorf("chart %s: %d marks (present %v), want %d", name, got, ok, want)
		}
	}
	cache := figure(t, html, ChartServerCacheTimeline)
	// One KV line per run; the ratio's two points are not joined.
	if n := strings.Count(cache, "<polyline"); n != 2 {
		t.Errorf("cache chart has %d lines, want 2", n)
	}
	for _, s := range []string{">c=1<", ">c=8<", "KV-cache usage", "prefix-cache hit ratio", "c=1, 0 s: KV-cache usage 10 %", "c=1, 2 s: prefix-cache hit ratio 80 %"} {
		if !strings.Contains(cache, s) {
			t.Errorf("cache chart lacks %q", s)
		}
	}
	for _, row := range []string{"<th>Trace</th><td>t.jsonl (mooncake), 4 requests, 1 skipped (zero tokens), at its arrival times ÷ 2</td>",
		"<th>Turns per conversation</th><td>3</td>", "<th>Think time (s)</th><td>0.5</td>"} {
		if !strings.Contains(html, row) {
			t.Errorf("settings lack %q", row)
		}
	}
	if strings.Contains(cache, "c=16") {
		t.Error("a run without a timeline has no stretch of it")
	}

	// Without server metrics or turns, none of these charts.
	buf.Reset()
	doc = &report.Document{Runs: []report.Run{{Name: "concurrency=1", Level: 1, Settings: report.Settings{Mode: "closed"}}}}
	if err := Render(&buf, doc); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{ChartServerCacheTimeline, ChartServerRequestsTimeline, ChartTurnsTTFT} {
		if strings.Contains(buf.String(), `data-chart="`+name+`"`) {
			t.Errorf("chart %s drawn without data", name)
		}
	}
}

// figure returns the HTML of the chart called name.
func figure(t *testing.T, html, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<figure class="chart" data-chart="` + name + `".*?</figure>`).FindString(html)
	if m == "" {
		t.Fatalf("no chart %s", name)
	}
	return m
}
