package render

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/compare"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// compareDoc is a closed-loop sweep at levels 1, 8 and 64 with three
// repeats each: throughput tput×level (+0, +1, +2), TTFT p99 ttft×level,
// peak VRAM vram GiB, priced at $price/h.
func compareDoc(tput, ttft, vram, price float64) *report.Document {
	d := &report.Document{Metadata: report.Metadata{Model: "m"}}
	for _, l := range []float64{1, 8, 64} {
		var reps []report.Run
		for i := range 3 {
			reps = append(reps, report.Run{Name: "r", Level: l, Repeat: i + 1,
				Settings: report.Settings{Mode: "closed", Concurrency: int(l), Cost: report.CostSettings{GPUHourlyUSD: price, GPUs: 1}},
				Summary: report.Summary{RequestsCompleted: 100, RequestThroughput: tput*l + float64(i), TTFT: report.Dist{Count: 100, P50: ttft * l / 2, P99: ttft * l},
					ITL: report.Dist{Count: 3100, P50: 0.01, P99: 0.02}, Cost: report.Cost{Per1kRequestsUSD: price / (tput * l)}},
				GPU: &report.RunGPU{Samples: 3, PeakMemoryUsedBytes: vram * (1 << 30), OutputTokensPerJoule: tput}})
		}
		d.Runs = append(d.Runs, reps...)
		d.Runs = append(d.Runs, stats.Aggregate(reps))
	}
	return d
}

func compareFixture(t testing.TB) *compare.Result {
	t.Helper()
	res, err := compare.Compare([]compare.Input{{Name: "h100<b>.json", Doc: compareDoc(10, 0.05, 60, 2.5)}, {Name: "l4.json", Doc: compareDoc(3, 0.2, 20, 0.8)}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

var compareFigureRE = regexp.MustCompile(`<figure class="chart" data-chart="(compare-[^"]+)" data-marks="(\d+)">`)

func TestRenderCompare(t *testing.T) {
	res := compareFixture(t)
	var buf bytes.Buffer
	if err := RenderCompare(&buf, res); err != nil {
		t.Fatal(err)
	}
	html := buf.String()
	// Every metric but goodput (no SLO) has a chart: 3 levels × 2 reports
	// = 6 points each.
	var names []string
	for _, m := range compareFigureRE.FindAllStringSubmatch(html, -1) {
		names = append(names, m[1])
		if m[2] != "6" {
			t.Errorf("chart %s has %s marks, want 6", m[1], m[2])
		}
	}
	want := "compare-1-request_throughput_per_second compare-1-output_tokens_per_second compare-1-ttft_seconds.p50 compare-1-ttft_seconds.p99 " +
		"compare-1-itl_seconds.p50 compare-1-itl_seconds.p99 compare-1-gpu.peak_memory_used_bytes compare-1-gpu.output_tokens_per_joule compare-1-cost.per_1k_requests_usd"
	if strings.Join(names, " ") != want {
		t.Errorf("charts\n%s\nwant\n%s", strings.Join(names, " "), want)
	}
	// Throughput has spread, so error bars (3 lines per point, 6 points).
	_, thr, _ := strings.Cut(html, `data-chart="compare-1-request_throughput_per_second"`)
	thr, _, _ = strings.Cut(thr, "</figure>")
	if n := strings.Count(thr, `class="err"`); n != 18 {
		t.Errorf("throughput chart has %d error-bar lines, want 18", n)
	}
	// 9 metrics × 3 levels of verdicts: A (h100) better on throughput,
	// TTFT ×2, tokens/J and cost ($2.5/(10×l) < $0.8/(3×l) per request):
	// 5 × 3 levels; B on VRAM (3); output tokens/s (0 on both) and ITL
	// equal (3 × 3).
	if !strings.Contains(html, `data-tally="15,3,9,0"`) {
		t.Errorf("tally missing or wrong: %s", regexp.MustCompile(`data-tally="[^"]*"`).FindString(html))
	}
	if n := strings.Count(html, `<td class="win-a">A better: larger than the noise`); n != 15 {
		t.Errorf("%d A-better cells, want 15", n)
	}
	if n := strings.Count(html, `<td class="win-b">B better: larger than the noise (no spread in the repeats)</td>`); n != 3 {
		t.Errorf("%d B-better cells, want 3", n)
	}
	// Names are escaped.
	if strings.Contains(html, "h100<b>.json") || !strings.Contains(html, "h100&lt;b&gt;.json") {
		t.Error("report name not escaped")
	}
	if !strings.Contains(html, "<title>gpulens comparison: h100&lt;b&gt;.json vs l4.json</title>") {
		t.Errorf("title: %.300s", html)
	}
}

func TestWriteCompareFile(t *testing.T) {
	res := compareFixture(t)
	dir := t.TempDir()
	if err := WriteCompareFile(filepath.Join(dir, "c.html"), res); err != nil {
		t.Fatal(err)
	}
	if err := WriteCompareFile(filepath.Join(dir, "missing", "c.html"), res); err == nil || !strings.Contains(err.Error(), "writing HTML comparison") {
		t.Errorf("unwritable path: %v", err)
	}
}

// TestChromiumRendersCompare opens the comparison page in headless
// Chromium: every chart drew marks, the page counted them, nothing was
// logged to the console.
func TestChromiumRendersCompare(t *testing.T) {
	bin := findChromium(t)
	dir := t.TempDir()
	page := filepath.Join(dir, "compare.html")
	if err := WriteCompareFile(page, compareFixture(t)); err != nil {
		t.Fatal(err)
	}
	dom, stderr := runChromium(t, bin, page, "--dump-dom")
	m := renderedRE.FindStringSubmatch(dom)
	if m == nil {
		t.Fatalf("body has no data-charts-rendered after load; DOM starts:\n%.600s", dom)
	}
	if n, _ := strconv.Atoi(m[1]); n != 9 {
		t.Errorf("data-charts-rendered = %d, want 9", n)
	}
	for _, c := range chartElemRE.FindAllStringSubmatch(dom, -1) {
		if !strings.Contains(c[2], `<circle class="mark"`) {
			t.Errorf("chart %s has no marks in the rendered DOM", c[1])
		}
	}
	if l := consoleLines(stderr); len(l) > 0 {
		t.Errorf("console output while rendering:\n%s", strings.Join(l, "\n"))
	}
	if d := os.Getenv("GPULENS_SCREENSHOT_DIR"); d != "" {
		runChromium(t, bin, page, "--screenshot="+filepath.Join(d, "compare.png"), "--window-size=1400,2000", "--hide-scrollbars")
	}
}

func TestCompareChartsSkipUnmeasuredLevels(t *testing.T) {
	// B completed nothing at c=64: its latency there is no measurement, so
	// the TTFT charts show c=1 and c=8 only (2 levels × 2 reports), the
	// throughput chart all three levels.
	b := compareDoc(3, 0.2, 20, 0.8)
	for i := range b.Runs {
		if r := &b.Runs[i]; r.Level == 64 && !r.Aggregate {
			r.Summary.RequestsCompleted, r.Summary.RequestThroughput = 0, 0
			r.Summary.TTFT, r.Summary.ITL = report.Dist{}, report.Dist{}
		}
	}
	res, err := compare.Compare([]compare.Input{{Name: "a.json", Doc: compareDoc(10, 0.05, 60, 2.5)}, {Name: "b.json", Doc: b}})
	if err != nil {
		t.Fatal(err)
	}
	marks := map[string]int{}
	for _, c := range compareCharts(1, res.Pairs[0]) {
		marks[c.Name] = c.Marks()
	}
	for name, want := range map[string]int{"compare-1-ttft_seconds.p99": 4, "compare-1-itl_seconds.p50": 4, "compare-1-request_throughput_per_second": 6, "compare-1-cost.per_1k_requests_usd": 4} {
		if marks[name] != want {
			t.Errorf("%s: %d marks, want %d", name, marks[name], want)
		}
	}
}
