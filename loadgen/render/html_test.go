package render

import (
	"bytes"
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
)

func readFixture(t testing.TB) *report.Document {
	t.Helper()
	doc, err := report.Read(filepath.Join("testdata", "sweep.json"))
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

var figureRE = regexp.MustCompile(`<figure class="chart" data-chart="([^"]+)" data-marks="(\d+)">`)

func TestRenderFixture(t *testing.T) {
	doc := readFixture(t)
	var buf bytes.Buffer
	if err := Render(&buf, doc); err != nil {
		t.Fatal(err)
	}
	html := buf.String()

	// Every chart is there, in order, with the expected number of marks:
	// 4 aggregate runs × 4 percentiles per latency chart; 4 levels × series
	// for the line charts; one bar per error class present per run.
	wantMarks := map[string]int{
		ChartTTFT: 16, ChartITL: 16, ChartTPOT: 16, ChartE2E: 16,
		ChartTTFTVsLevel: 8, ChartThroughputVsLvl: 4, ChartGoodputVsLevel: 8, ChartCostVsLevel: 4, ChartScheduleLagLevel: 8,
		// level 4: http_5xx; level 8: http_429, http_5xx, stream_broken.
		ChartErrorsByClass: 4,
	}
	var names []string
	for _, m := range figureRE.FindAllStringSubmatch(html, -1) {
		names = append(names, m[1])
		n, _ := strconv.Atoi(m[2])
		if n != wantMarks[m[1]] {
			t.Errorf("chart %s has %d marks, want %d", m[1], n, wantMarks[m[1]])
		}
	}
	if !slices.Equal(names, Charts) {
		t.Errorf("charts %v, want %v", names, Charts)
	}

	// Report text is escaped; the only script is the page's own.
	if strings.Contains(html, `<script>alert`) || strings.Contains(html, "<b>bold</b>") || strings.Contains(html, "<instruct>") {
		t.Error("unescaped report text in the page")
	}
	for _, want := range []string{
		`sweep &amp; &lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`,
		`level 8: target rate not achieved &lt;b&gt;bold&lt;/b&gt;`,
		`<title>gpulens load report: llama-3.1-8b &lt;instruct&gt;</title>`,
		`<tr><th>GPU 0</th><td>NVIDIA H100 80GB HBM3 (UUID GPU-1234, driver 560.35.03, CUDA 12.6)</td></tr>`,
		`<tr><th>MIG instance on GPU 0</th><td>3g.40gb</td></tr>`,
		`<tr><th>Peak GPU memory used</th><td>69.8 GiB</td></tr>`,
		`<tr><th>Mean GPU utilisation</th><td>83 %</td></tr>`,
		`<tr><th>Levels (concurrency)</th><td>c=1, c=2, c=4, c=8</td></tr>`,
		`<tr><th>SLO TTFT (s)</th><td>0.2</td></tr>`,
		`<td>concurrency=8 (mean of 2)</td><td class="n">c=8 mean</td>`,
		`<figcaption>Errors by class<div class="caption">Errors summed over the repeats of each level.</div></figcaption>`,
	} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if n := strings.Count(html, "<script"); n != 1 {
		t.Errorf("%d script elements, want 1", n)
	}
	if n := strings.Count(html, "<tr>\n<td>"); n != len(doc.Runs) {
		t.Errorf("%d summary rows, want %d", n, len(doc.Runs))
	}
	for _, banned := range []string{"http://cdn", "https://", "<link", "src="} {
		if strings.Contains(html, banned) {
			t.Errorf("page refers to an external resource (%q)", banned)
		}
	}
}

// TestLevelCI checks the TTFT-vs-level points and their confidence
// intervals against the fixture's aggregate statistics.
func TestLevelCI(t *testing.T) {
	doc := readFixture(t)
	pts := levels(doc.Runs)
	if len(pts) != 4 {
		t.Fatalf("%d levels, want 4", len(pts))
	}
	s := levelSeries(pts, "p50", "ttft_seconds.p50")
	for i, p := range pts {
		st := p.agg.Summary.Stats["ttft_seconds.p50"]
		if s.Values[i] != st.Mean || s.Low[i] != math.Max(st.CI95Low, 0) || s.High[i] != st.CI95High {
			t.Errorf("level %v: %v [%v, %v], want %v [%v, %v]", p.level, s.Values[i], s.Low[i], s.High[i], st.Mean, st.CI95Low, st.CI95High)
		}
	}
	// Without aggregates, a level is the mean of its runs and has no CI.
	var plain []report.Run
	for _, r := range doc.Runs {
		if !r.Aggregate {
			plain = append(plain, r)
		}
	}
	s = levelSeries(levels(plain), "p50", "ttft_seconds.p50")
	want := (plain[0].Summary.TTFT.P50 + plain[1].Summary.TTFT.P50) / 2
	if s.Low != nil || math.Abs(s.Values[0]-want) > 1e-15 {
		t.Errorf("level 1 without aggregate: %v (CI %v), want %v and no CI", s.Values[0], s.Low, want)
	}
}

func TestRenderEmptyAndSingle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    report.Document
		nodata int
	}{
		{"empty", report.Document{}, len(Charts)},
		{"single run without errors", report.Document{Runs: []report.Run{{Name: "run", Summary: report.Summary{
			TTFT: report.Dist{P50: 0.1, P90: 0.2, P95: 0.3, P99: 0.4}, ITL: report.Dist{P50: 0.01, P90: 0.02, P95: 0.03, P99: 0.04},
			TPOT: report.Dist{P50: 0.01, P90: 0.02, P95: 0.03, P99: 0.04}, E2E: report.Dist{P50: 1, P90: 2, P95: 3, P99: 4},
			OutputTokensPerSecond: 100}}}}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := Render(&buf, &tc.doc); err != nil {
				t.Fatal(err)
			}
			html := buf.String()
			if n := len(figureRE.FindAllString(html, -1)); n != len(Charts) {
				t.Errorf("%d charts, want %d", n, len(Charts))
			}
			if n := strings.Count(html, `class="nodata"`); n != tc.nodata {
				t.Errorf("%d charts without data, want %d", n, tc.nodata)
			}
		})
	}
}

func TestCountScaleHasWholeTicks(t *testing.T) {
	for _, tc := range []struct {
		max   float64
		ticks []float64
	}{
		{0, []float64{0, 1}},
		{1, []float64{0, 1}},
		{3, []float64{0, 1, 2, 3}},
		{2.5, []float64{0, 1, 2, 3}},
		{7, []float64{0, 2, 4, 6, 8}},
		{math.NaN(), []float64{0, 1}},
	} {
		if s := newCountScale(tc.max); !slices.Equal(s.ticks, tc.ticks) || s.max != tc.ticks[len(tc.ticks)-1] {
			t.Errorf("newCountScale(%v) = max %v ticks %v, want ticks %v", tc.max, s.max, s.ticks, tc.ticks)
		}
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		max   float64
		ticks []float64
	}{
		{1, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
		{0.037, []float64{0, 0.01, 0.02, 0.03, 0.04}},
		{730, []float64{0, 200, 400, 600, 800}},
		{0, []float64{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}},
		{5, []float64{0, 1, 2, 3, 4, 5}},
	} {
		s := newScale(tc.max)
		if len(s.ticks) != len(tc.ticks) {
			t.Errorf("newScale(%v) ticks %v, want %v", tc.max, s.ticks, tc.ticks)
			continue
		}
		for i := range s.ticks {
			if math.Abs(s.ticks[i]-tc.ticks[i]) > 1e-12 {
				t.Errorf("newScale(%v) ticks %v, want %v", tc.max, s.ticks, tc.ticks)
				break
			}
		}
		if got := s.y(s.max); got != marginTop {
			t.Errorf("y(max) = %v, want %v", got, marginTop)
		}
		if got := s.y(0); got != marginTop+plotH {
			t.Errorf("y(0) = %v, want %v", got, marginTop+plotH)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{report.SecondsTick(0.0123), "12.3 ms"},
		{report.SecondsTick(0.000456), "456 µs"},
		{report.SecondsTick(2.5), "2.5 s"},
		{report.SecondsTick(0), "0"},
		{report.SecondsTick(0.05), "50 ms"},
		{report.USDTick(0.000123456), "$0.000123"},
		{report.USDTick(3.6), "$3.60"},
		{report.USDTick(0), "$0"},
		{report.Num(1234.6), "1235"},
		{report.Num(12.345), "12.3"},
		{fmtCount(7), "7"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestWriteFileRefusesNoRuns: WriteFile writes nothing for a document
// without runs; with runs, the prompt nonce, the prompts mode, the grace
// period and the interrupted requests appear on the page.
func TestWriteFileRefusesNoRuns(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.html")
	if err := WriteFile(p, &report.Document{}); !errors.Is(err, ErrNoRuns) {
		t.Fatalf("WriteFile(no runs) = %v, want ErrNoRuns", err)
	}
	if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a page was written for no runs: %v", err)
	}
	doc := &report.Document{Metadata: report.Metadata{PromptNonce: "9c1f0e2d3b4a5968"}, Runs: []report.Run{{Name: "concurrency=2", Level: 2,
		Settings: report.Settings{Prompts: report.PromptsDistinct, GracePeriodSeconds: 30},
		Summary:  report.Summary{RequestsCompleted: 4, RequestsInterrupted: 2}}}}
	if err := WriteFile(p, doc); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	for _, want := range []string{"<th>Prompt nonce</th><td>9c1f0e2d3b4a5968</td>", "<th>Prompts</th><td>distinct</td>",
		"<th>Grace period (s)</th><td>30</td>", "2 in flight when interrupted"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}
