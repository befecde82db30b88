package campaign

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// exporterScrapes serves the scrapes in turn (then HTTP 500) and counts
// them.
func exporterScrapes(t *testing.T, scrapes []string) (string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		i := int(n.Add(1) - 1)
		if i >= len(scrapes) {
			http.Error(w, "gone", http.StatusInternalServerError)
			return
		}
		io.WriteString(w, scrapes[i])
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/metrics", &n
}

// scrape is one exporter scrape of GPUs 0 and 1 (memory in GB, energy in
// J); GPU 1 is another tenant's.
func scrape(mem0, en0, mem1, en1 float64) string {
	return fmt.Sprintf(`# TYPE gpulens_gpu_info gauge
gpulens_gpu_info{gpu="0",name="NVIDIA L4",uuid="GPU-0000"} 1
gpulens_gpu_info{gpu="1",name="NVIDIA L4",uuid="GPU-1111"} 1
# TYPE gpulens_gpu_memory_used_bytes gauge
gpulens_gpu_memory_used_bytes{gpu="0",uuid="GPU-0000"} %g
gpulens_gpu_memory_used_bytes{gpu="1",uuid="GPU-1111"} %g
# TYPE gpulens_gpu_utilization_ratio gauge
gpulens_gpu_utilization_ratio{gpu="0",uuid="GPU-0000"} 0.5
gpulens_gpu_utilization_ratio{gpu="1",uuid="GPU-1111"} 1
# TYPE gpulens_gpu_power_watts gauge
gpulens_gpu_power_watts{gpu="0",uuid="GPU-0000"} 60
gpulens_gpu_power_watts{gpu="1",uuid="GPU-1111"} 70
# TYPE gpulens_gpu_energy_joules_total counter
gpulens_gpu_energy_joules_total{gpu="0",uuid="GPU-0000"} %g
gpulens_gpu_energy_joules_total{gpu="1",uuid="GPU-1111"} %g
`, mem0*1e9, mem1*1e9, en0, en1)
}

// TestGPUPerRun: every run gets the GPU side of its own window (the
// scrapes at its start and end), of GPU 0 only; tokens per joule and
// energy per request come from its summary; the aggregate of a level
// is the mean of its repeats in every figure, with their spread across
// repeats in Summary.Stats.
func TestGPUPerRun(t *testing.T) {
	// Each run: 3 requests × 4 output tokens (the test server). GPU 0's
	// energy rises 24, 48, 12 and 6 J in the four runs; GPU 1 (not
	// serving) by 1000 J, which must not count.
	url, n := exporterScrapes(t, []string{
		scrape(10, 100, 50, 0), scrape(11, 124, 50, 1000), // concurrency=1 repeat=1
		scrape(12, 124, 50, 1000), scrape(9, 172, 50, 2000), // concurrency=1 repeat=2
		scrape(20, 200, 50, 2000), scrape(21, 212, 50, 3000), // concurrency=2 repeat=1
		scrape(22, 212, 50, 3000), scrape(25, 218, 50, 4000), // concurrency=2 repeat=2
	})
	o := options(t, &server{})
	o.ExporterURL, o.ExporterInterval, o.ExporterGPUs = url, time.Hour, []string{"GPU-0000"}
	res := run(t, Plan{Command: "sweep", Mode: report.ModeClosed, Levels: []float64{1, 2}, Repeats: 2}, o, nil)
	type want struct {
		peak, energy, perJoule, perRequest float64
	}
	wants := map[string]want{
		"concurrency=1 repeat=1": {11e9, 24, 0.5, 8},
		"concurrency=1 repeat=2": {12e9, 48, 0.25, 16},
		"concurrency=2 repeat=1": {21e9, 12, 1, 4},
		"concurrency=2 repeat=2": {25e9, 6, 2, 2},
		// Every figure the mean of the repeats' (issue 23: the energy
		// was their sum under a "mean of 2" label).
		"concurrency=1 (mean of 2)": {11.5e9, 36, 0.375, 12},
		"concurrency=2 (mean of 2)": {23e9, 9, 1.5, 3},
	}
	if len(res.Document.Runs) != len(wants) {
		t.Fatalf("%d runs", len(res.Document.Runs))
	}
	for _, r := range res.Document.Runs {
		w, g := wants[r.Name], r.GPU
		if g == nil {
			t.Errorf("%s: no GPU side", r.Name)
			continue
		}
		samples := 2
		if r.Aggregate {
			samples = 4
		}
		if g.PeakMemoryUsedBytes != w.peak || g.EnergyJoules != w.energy || g.OutputTokensPerJoule != w.perJoule ||
			g.EnergyPerRequestJoules != w.perRequest || g.MeanPowerWatts != 60 || g.MeanUtilizationRatio != 0.5 ||
			g.Samples != samples || g.EnergyFromPower || g.Error != "" || len(g.GPUs) != 1 || g.GPUs[0].UUID != "GPU-0000" ||
			g.GPUs[0].Name != "NVIDIA L4" || g.GPUs[0].EnergyJoules != w.energy {
			t.Errorf("%s: GPU side %+v, want %+v", r.Name, *g, w)
		}
		if r.Aggregate {
			st := r.Summary.Stats[report.StatGPUOutputTokensPerJoule]
			lo, hi := wants[strings.Replace(r.Name, " (mean of 2)", " repeat=1", 1)].perJoule, wants[strings.Replace(r.Name, " (mean of 2)", " repeat=2", 1)].perJoule
			if st.N != 2 || st.Mean != (lo+hi)/2 || math.Abs(st.Stddev-math.Abs(hi-lo)/math.Sqrt2) > 1e-12 || st.CI95Low >= st.Mean {
				t.Errorf("%s: tokens/J stats %+v", r.Name, st)
			}
			if st := r.Summary.Stats[report.StatGPUPeakMemoryUsedBytes]; st.N != 2 || st.Mean != (wants[strings.Replace(r.Name, " (mean of 2)", " repeat=1", 1)].peak+wants[strings.Replace(r.Name, " (mean of 2)", " repeat=2", 1)].peak)/2 {
				t.Errorf("%s: peak stats %+v", r.Name, st)
			}
		}
	}
	if n.Load() != 8 {
		t.Errorf("%d scrapes, want 8 (each run's start and end)", n.Load())
	}
	if g := res.Document.Metadata.GPU; g == nil || len(g.GPUs) != 1 || g.GPUs[0].UUID != "GPU-0000" || g.Samples != 8 || g.PeakMemoryUsedBytes != 25e9 {
		t.Errorf("metadata GPU %+v", g)
	}
}

// TestRecordingOptionErrors: the options of what a campaign records
// beyond latency (the exporter, asking the server what it is) are checked
// before anything is sent, and the errors name them.
func TestRecordingOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		mod  func(*Options)
		want string
	}{
		{func(o *Options) { o.ExporterURL = "exporter:9842" }, `ExporterURL "exporter:9842": must be an http:// or https:// URL`},
		{func(o *Options) {
			o.ExporterURL, o.ExporterInterval = "http://127.0.0.1:9842/metrics", time.Millisecond
		}, "ExporterInterval must be at least 100ms, got 1ms"},
		{func(o *Options) { o.ExporterGPUs = []string{"0"} }, "ExporterGPUs needs ExporterURL"},
		{func(o *Options) { o.ExporterURL, o.ExporterGPUs = "http://127.0.0.1:9842/metrics", []string{"0", ""} }, "ExporterGPUs: an empty GPU name"},
		{func(o *Options) { o.ServerInfoTimeout = -time.Second }, "ServerInfoTimeout must not be negative, got -1s"},
	} {
		o := options(t, &server{})
		tc.mod(&o)
		if _, err := New(Plan{Command: "run", Mode: report.ModeClosed, Levels: []float64{1}, Repeats: 1}, o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err %v, want %q", err, tc.want)
		}
	}
}
