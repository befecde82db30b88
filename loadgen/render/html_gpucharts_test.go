package render

import (
	"bytes"
	"html"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// gpuDoc is a sweep of two levels × two repeats with their aggregates,
// on two GPUs, with a manifest.
func gpuDoc() *report.Document {
	run := func(level float64, rep int, peak0, peak1, perJoule float64) report.Run {
		return report.Run{Name: "r", Level: level, Repeat: rep, Settings: report.Settings{Mode: "closed", Concurrency: int(level)},
			GPU: &report.RunGPU{PeakMemoryUsedBytes: (peak0 + peak1) * (1 << 30), OutputTokensPerJoule: perJoule, EnergyJoules: 100,
				GPUs: []report.RunGPUDevice{{GPU: "0", UUID: "GPU-a", PeakMemoryUsedBytes: peak0 * (1 << 30)}, {GPU: "1", UUID: "GPU-b", PeakMemoryUsedBytes: peak1 * (1 << 30)}}}}
	}
	agg := func(level float64, reps ...report.Run) report.Run {
		a := report.Run{Name: "agg", Level: level, Aggregate: true, Settings: reps[0].Settings, GPU: stats.AggregateGPU(reps),
			Summary: report.Summary{Stats: map[string]report.Stat{
				report.StatGPUOutputTokensPerJoule: {N: 2, Mean: (reps[0].GPU.OutputTokensPerJoule + reps[1].GPU.OutputTokensPerJoule) / 2, CI95Low: 0.1, CI95High: 0.9},
			}}}
		return a
	}
	a1, a2 := run(1, 1, 6, 4, 0.25), run(1, 2, 8, 4, 0.5)
	b1, b2 := run(4, 1, 30, 10, 1), run(4, 2, 34, 10, 2)
	return &report.Document{
		Metadata: report.Metadata{Model: "m", Manifest: &report.Manifest{ServerVersion: "0.11.0", ModelRevision: "abc123",
			Server: []report.ServerFact{{Endpoint: "GET /version", Status: 200, Fields: map[string]string{"version": "0.11.0"}}, {Endpoint: "GET /info", Status: 404, Error: "HTTP 404"}},
			Host:   report.HostFacts{OS: "linux", Arch: "amd64", Kernel: "6.8.0", CPUs: 16, Hostname: "lg-1"},
			Labels: map[string]string{"image": "vllm@sha256:abc"}, SettingsHash: "f00d"}},
		Runs: []report.Run{a1, a2, agg(1, a1, a2), b1, b2, agg(4, b1, b2)},
	}
}

var tipRE = regexp.MustCompile(`<title>([^<]*)</title>`)

// chartTips returns the tooltips of chart name in page.
func chartTips(page, name string) []string {
	start := strings.Index(page, `data-chart="`+name+`"`)
	if start < 0 {
		return nil
	}
	end := strings.Index(page[start:], "</figure>")
	var tips []string
	for _, m := range tipRE.FindAllStringSubmatch(page[start:start+end], -1) {
		tips = append(tips, html.UnescapeString(m[1]))
	}
	return tips
}

func TestGPUCharts(t *testing.T) {
	var buf bytes.Buffer
	if err := Render(&buf, gpuDoc()); err != nil {
		t.Fatal(err)
	}
	page := buf.String()
	var names []string
	for _, m := range figureRE.FindAllStringSubmatch(page, -1) {
		names = append(names, m[1])
	}
	if want := append(slices.Clone(Charts), ChartPeakVRAMVsLevel, ChartTokensPerJouleVsLevel); !slices.Equal(names, want) {
		t.Errorf("charts %v, want %v", names, want)
	}
	// Each level: the mean of its repeats' peaks (10 and 12 GiB summed;
	// 40 and 44), per GPU too.
	wantVRAM := []string{
		"c=1, summed over the GPUs serving: 11 GiB", "c=4, summed over the GPUs serving: 42 GiB",
		"c=1, GPU 0: 7 GiB", "c=4, GPU 0: 32 GiB", "c=1, GPU 1: 4 GiB", "c=4, GPU 1: 10 GiB",
	}
	if got := chartTips(page, ChartPeakVRAMVsLevel); !slices.Equal(got, wantVRAM) {
		t.Errorf("peak VRAM marks %q, want %q", got, wantVRAM)
	}
	wantTPJ := []string{"c=1, output tokens/J: 0.375 (95% CI 0.1 – 0.9)", "c=4, output tokens/J: 1.5 (95% CI 0.1 – 0.9)"}
	if got := chartTips(page, ChartTokensPerJouleVsLevel); !slices.Equal(got, wantTPJ) {
		t.Errorf("tokens/J marks %q, want %q", got, wantTPJ)
	}
	for _, row := range []string{"<th>Server version</th><td>0.11.0</td>", "<th>Model revision</th><td>abc123</td>",
		"<th>Server GET /version</th><td>version=0.11.0</td>", "<th>Server GET /info</th><td>HTTP 404</td>",
		"<th>Load generator host</th><td>linux/amd64, kernel 6.8.0, 16 CPUs, lg-1</td>", "<th>Label image</th><td>vllm@sha256:abc</td>",
		"<th>Settings hash</th><td>f00d</td>"} {
		if !strings.Contains(page, row) {
			t.Errorf("page lacks %s", row)
		}
	}
	// Without a GPU side or a manifest, neither.
	doc := readFixture(t)
	buf.Reset()
	if err := Render(&buf, doc); err != nil {
		t.Fatal(err)
	}
	if p := buf.String(); strings.Contains(p, ChartPeakVRAMVsLevel) || strings.Contains(p, ChartTokensPerJouleVsLevel) || strings.Contains(p, "Settings hash") {
		t.Error("GPU charts or manifest rows without data")
	}
}
