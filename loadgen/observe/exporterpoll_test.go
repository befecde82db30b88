package observe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// exporter serves the fixture scrapes in turn, then HTTP 500.
func exporter(t *testing.T, files ...string) *httptest.Server {
	t.Helper()
	var bodies [][]byte
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1) - 1)
		if i >= len(bodies) {
			http.Error(w, "gone", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(bodies[i])
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestPollFixtureScrapes(t *testing.T) {
	srv := exporter(t, "testdata/scrape1.prom", "testdata/scrape2.prom")
	p := NewPoller(srv.URL+"/metrics", 0, slog.New(slog.DiscardHandler))
	for i := 0; i < 2; i++ {
		if err := p.Poll(context.Background()); err != nil {
			t.Fatalf("poll %d: %v", i, err)
		}
	}
	got := p.Info()
	want := []report.GPU{
		{GPU: "0", UUID: "GPU-11111111-2222-3333-4444-555555555555", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:18:00.0",
			Serial: "1650223000001", DriverVersion: "570.124.06", CUDADriverVersion: "12.8", VBIOSVersion: "96.00.99.00.01"},
		{GPU: "1", UUID: "GPU-66666666-7777-8888-9999-000000000000", Name: "NVIDIA H100 80GB HBM3", PCIBusID: "00000000:2A:00.0",
			Serial: "1650223000002", DriverVersion: "570.124.06", CUDADriverVersion: "12.8", VBIOSVersion: "96.00.99.00.01"},
	}
	if len(got.GPUs) != len(want) {
		t.Fatalf("GPUs = %+v", got.GPUs)
	}
	for i := range want {
		if got.GPUs[i] != want[i] {
			t.Errorf("GPU %d = %+v, want %+v", i, got.GPUs[i], want[i])
		}
	}
	if len(got.MIG) != 1 || got.MIG[0].GPU != "1" || got.MIG[0].Profile != "3g.40gb" || got.MIG[0].Labels["mig_uuid"] != "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee" {
		t.Errorf("MIG = %+v, want one 3g.40gb instance on GPU 1 (listed once although seen twice)", got.MIG)
	}
	// Peak over both GPUs and both polls; mean over 4 readings.
	if got.PeakMemoryUsedBytes != 7.5e10 {
		t.Errorf("peak memory = %v, want 7.5e10", got.PeakMemoryUsedBytes)
	}
	if want := (0.9 + 0.1 + 0.7 + 0.3) / 4; got.MeanUtilizationRatio != want {
		t.Errorf("mean utilisation = %v, want %v", got.MeanUtilizationRatio, want)
	}
	if got.Samples != 2 || got.Error != "" || got.ExporterURL != srv.URL+"/metrics" {
		t.Errorf("samples %d error %q url %q", got.Samples, got.Error, got.ExporterURL)
	}

	// A failed poll keeps what was seen and records the error.
	err := p.Poll(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Fatalf("third poll: %v, want HTTP 500", err)
	}
	got = p.Info()
	if !strings.Contains(got.Error, "HTTP 500") || got.Samples != 2 || len(got.GPUs) != 2 || got.PeakMemoryUsedBytes != 7.5e10 {
		t.Errorf("after failure: %+v", got)
	}
	// Info returns a copy.
	got.GPUs[0].Name = "changed"
	if p.Info().GPUs[0].Name != "NVIDIA H100 80GB HBM3" {
		t.Error("Info shares its GPU slice with the poller")
	}
}

func TestIngestErrors(t *testing.T) {
	p := NewPoller("http://127.0.0.1:1/metrics", 0, slog.New(slog.DiscardHandler))
	if err := p.Ingest(strings.NewReader("gpulens_gpu_info{gpu=\"0\" 1\n")); err == nil || !strings.Contains(err.Error(), "parsing metrics from http://127.0.0.1:1/metrics") {
		t.Errorf("bad text: %v", err)
	}
	if err := p.Poll(context.Background()); err == nil || !strings.Contains(err.Error(), "scraping http://127.0.0.1:1/metrics") {
		t.Errorf("unreachable exporter: %v", err)
	}
	if err := p.Ingest(strings.NewReader("# TYPE other gauge\nother 1\n")); err != nil {
		t.Fatal(err)
	}
	if got := p.Info(); got.Samples != 1 || got.Error != "" || len(got.GPUs) != 0 || got.MeanUtilizationRatio != 0 {
		t.Errorf("scrape without GPU metrics: %+v", got)
	}
}

// reading is one GPU's values in a scripted scrape; a negative value
// leaves its metric out.
type reading struct {
	gpu, uuid                string
	mem, util, power, energy float64
}

// exposition writes a scrape of the exporter's families for readings.
func exposition(rs ...reading) string {
	var b strings.Builder
	b.WriteString("# TYPE gpulens_gpu_info gauge\n")
	for _, r := range rs {
		fmt.Fprintf(&b, "gpulens_gpu_info{gpu=%q,name=\"NVIDIA H100 80GB HBM3\",uuid=%q} 1\n", r.gpu, r.uuid)
	}
	for _, f := range []struct {
		name, typ string
		get       func(reading) float64
	}{
		{"gpulens_gpu_memory_used_bytes", "gauge", func(r reading) float64 { return r.mem }},
		{"gpulens_gpu_utilization_ratio", "gauge", func(r reading) float64 { return r.util }},
		{"gpulens_gpu_power_watts", "gauge", func(r reading) float64 { return r.power }},
		{"gpulens_gpu_energy_joules_total", "counter", func(r reading) float64 { return r.energy }},
	} {
		fmt.Fprintf(&b, "# TYPE %s %s\n", f.name, f.typ)
		for _, r := range rs {
			if v := f.get(r); v >= 0 {
				fmt.Fprintf(&b, "%s{gpu=%q,uuid=%q} %g\n", f.name, r.gpu, r.uuid, v)
			}
		}
	}
	return b.String()
}

// scripted serves the bodies in turn, then HTTP 500.
func scripted(t *testing.T, bodies ...string) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		i := int(n.Add(1) - 1)
		if i >= len(bodies) {
			http.Error(w, "gone", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, bodies[i])
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// stepClock returns a clock that advances by step on every reading,
// starting at t0.
func stepClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	t := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC).Add(-step)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		t = t.Add(step)
		return t
	}
}

func pollNear(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

// TestWindow: three scrapes of two GPUs (Begin, one poll, End), the
// expectations computed by hand.
func TestWindow(t *testing.T) {
	const a, b = "GPU-aaaaaaaa", "GPU-bbbbbbbb"
	scrapes := []string{
		exposition(reading{"0", a, 10e9, 0.5, 300, 1000}, reading{"1", b, 20e9, 0.1, 100, 5000}),
		exposition(reading{"0", a, 30e9, 0.9, 500, 1800}, reading{"1", b, 5e9, 0.3, 150, 5250}),
		exposition(reading{"0", a, 12e9, 0.7, 400, 2600}, reading{"1", b, 25e9, 0.2, 140, 5500}),
	}
	for _, tc := range []struct {
		name string
		gpus []string
		want report.RunGPU
	}{
		{"all GPUs", nil, report.RunGPU{
			GPUs: []report.RunGPUDevice{
				{GPU: "0", UUID: a, Name: "NVIDIA H100 80GB HBM3", PeakMemoryUsedBytes: 30e9, MeanUtilizationRatio: 0.7, MeanPowerWatts: 400, EnergyJoules: 1600},
				{GPU: "1", UUID: b, Name: "NVIDIA H100 80GB HBM3", PeakMemoryUsedBytes: 25e9, MeanUtilizationRatio: 0.2, MeanPowerWatts: 130, EnergyJoules: 500},
			},
			// The peak of the sums (30+5=35, 10+20=30, 12+25=37), not the
			// sum of the peaks (55).
			PeakMemoryUsedBytes: 37e9, MeanUtilizationRatio: 2.7 / 6,
			MeanPowerWatts: (400 + 650 + 540) / 3.0, EnergyJoules: 2100, Samples: 3,
			// 4200 output tokens, 21 requests.
			OutputTokensPerJoule: 2, EnergyPerRequestJoules: 100,
		}},
		{"by UUID", []string{b}, report.RunGPU{
			GPUs:                []report.RunGPUDevice{{GPU: "1", UUID: b, Name: "NVIDIA H100 80GB HBM3", PeakMemoryUsedBytes: 25e9, MeanUtilizationRatio: 0.2, MeanPowerWatts: 130, EnergyJoules: 500}},
			PeakMemoryUsedBytes: 25e9, MeanUtilizationRatio: 0.2, MeanPowerWatts: 130, EnergyJoules: 500, Samples: 3,
			OutputTokensPerJoule: 8.4, EnergyPerRequestJoules: 500.0 / 21,
		}},
		{"by index", []string{"0"}, report.RunGPU{
			GPUs:                []report.RunGPUDevice{{GPU: "0", UUID: a, Name: "NVIDIA H100 80GB HBM3", PeakMemoryUsedBytes: 30e9, MeanUtilizationRatio: 0.7, MeanPowerWatts: 400, EnergyJoules: 1600}},
			PeakMemoryUsedBytes: 30e9, MeanUtilizationRatio: 0.7, MeanPowerWatts: 400, EnergyJoules: 1600, Samples: 3,
			OutputTokensPerJoule: 4200.0 / 1600, EnergyPerRequestJoules: 1600.0 / 21,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := scripted(t, scrapes...)
			p := New(PollerConfig{URL: srv.URL + "/metrics", Interval: time.Hour, GPUs: tc.gpus, Now: stepClock(2 * time.Second)})
			ctx := context.Background()
			w := p.Begin(ctx)
			if err := p.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			got := w.End(ctx)
			got.SetWork(4200, 21)
			checkGPU(t, got, &tc.want)
			// The metadata lists the same GPUs.
			info := p.Info()
			if len(info.GPUs) != len(tc.want.GPUs) || info.Samples != 3 {
				t.Fatalf("info GPUs %+v samples %d", info.GPUs, info.Samples)
			}
			for i, g := range info.GPUs {
				if g.UUID != tc.want.GPUs[i].UUID {
					t.Errorf("info GPU %d = %s, want %s", i, g.UUID, tc.want.GPUs[i].UUID)
				}
			}
		})
	}
}

func checkGPU(t *testing.T, got, want *report.RunGPU) {
	t.Helper()
	if len(got.GPUs) != len(want.GPUs) {
		t.Fatalf("GPUs %+v, want %+v", got.GPUs, want.GPUs)
	}
	for i, g := range got.GPUs {
		w := want.GPUs[i]
		if g.GPU != w.GPU || g.UUID != w.UUID || g.Name != w.Name || !pollNear(g.PeakMemoryUsedBytes, w.PeakMemoryUsedBytes) ||
			!pollNear(g.MeanUtilizationRatio, w.MeanUtilizationRatio) || !pollNear(g.MeanPowerWatts, w.MeanPowerWatts) || !pollNear(g.EnergyJoules, w.EnergyJoules) {
			t.Errorf("GPU %d = %+v, want %+v", i, g, w)
		}
	}
	if !pollNear(got.PeakMemoryUsedBytes, want.PeakMemoryUsedBytes) || !pollNear(got.MeanUtilizationRatio, want.MeanUtilizationRatio) ||
		!pollNear(got.MeanPowerWatts, want.MeanPowerWatts) || !pollNear(got.EnergyJoules, want.EnergyJoules) || got.EnergyFromPower != want.EnergyFromPower ||
		!pollNear(got.OutputTokensPerJoule, want.OutputTokensPerJoule) || !pollNear(got.EnergyPerRequestJoules, want.EnergyPerRequestJoules) ||
		got.Samples != want.Samples || got.Error != want.Error {
		t.Errorf("got  %+v\nwant %+v", *got, *want)
	}
}

// TestWindowEnergy: a counter reset counts the new value, as increase()
// does; without a counter, energy is mean power × the window's span.
func TestWindowEnergy(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scrapes []string
		want    report.RunGPU
	}{
		{"counter reset", []string{
			exposition(reading{"0", "GPU-a", 1, 0, 100, 1000}),
			exposition(reading{"0", "GPU-a", 1, 0, 100, 1500}),
			exposition(reading{"0", "GPU-a", 1, 0, 100, 200}), // exporter restarted
			exposition(reading{"0", "GPU-a", 1, 0, 100, 700}),
		}, report.RunGPU{
			GPUs:                []report.RunGPUDevice{{GPU: "0", UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", PeakMemoryUsedBytes: 1, MeanPowerWatts: 100, EnergyJoules: 1200}},
			PeakMemoryUsedBytes: 1, MeanPowerWatts: 100, EnergyJoules: 1200, Samples: 4,
		}},
		{"power only", []string{
			exposition(reading{"0", "GPU-a", 1, 0, 200, -1}),
			exposition(reading{"0", "GPU-a", 1, 0, 300, -1}),
		}, report.RunGPU{
			// (200+300)/2 W × 10 s between the two samples.
			GPUs:                []report.RunGPUDevice{{GPU: "0", UUID: "GPU-a", Name: "NVIDIA H100 80GB HBM3", PeakMemoryUsedBytes: 1, MeanPowerWatts: 250, EnergyJoules: 2500}},
			PeakMemoryUsedBytes: 1, MeanPowerWatts: 250, EnergyJoules: 2500, EnergyFromPower: true, Samples: 2,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := scripted(t, tc.scrapes...)
			p := New(PollerConfig{URL: srv.URL, Interval: time.Hour, Now: stepClock(10 * time.Second)})
			ctx := context.Background()
			w := p.Begin(ctx)
			for range len(tc.scrapes) - 2 {
				if err := p.Poll(ctx); err != nil {
					t.Fatal(err)
				}
			}
			checkGPU(t, w.End(ctx), &tc.want)
		})
	}
}

// TestWindowBounds: a window holds the samples from its Begin (or
// Restart) to its End, and records a failed scrape.
func TestWindowBounds(t *testing.T) {
	s := func(en float64) string { return exposition(reading{"0", "GPU-a", en, 0.5, 100, en}) }
	srv, n := scripted(t, s(1), s(2), s(4), s(8), s(16))
	p := New(PollerConfig{URL: srv.URL, Interval: time.Hour, Now: stepClock(time.Second)})
	ctx := context.Background()
	if err := p.Poll(ctx); err != nil { // before any window: energy 1
		t.Fatal(err)
	}
	w := p.Begin(ctx)                   // 2
	if err := p.Poll(ctx); err != nil { // 4
		t.Fatal(err)
	}
	w.Restart(ctx)  // drops 2 and 4; starts at 8
	g := w.End(ctx) // 16
	if g.Samples != 2 || g.EnergyJoules != 8 || g.PeakMemoryUsedBytes != 16 || g.Error != "" {
		t.Errorf("window after restart: %+v, want 2 samples, 8 J (8 → 16), peak 16", *g)
	}
	// Closed: the next scrapes are not its own. A window whose last scrape
	// fails says so and keeps what it saw.
	w2 := p.Begin(ctx) // HTTP 500
	g2 := w2.End(ctx)  // HTTP 500
	if g2.Samples != 0 || !strings.Contains(g2.Error, "HTTP 500") || len(g2.GPUs) != 0 || g2.EnergyJoules != 0 {
		t.Errorf("window without a scrape: %+v", *g2)
	}
	if n.Load() != 7 {
		t.Errorf("%d scrapes, want 7", n.Load())
	}
	if got := p.Info(); got.Samples != 5 || got.PeakMemoryUsedBytes != 16 || !strings.Contains(got.Error, "HTTP 500") {
		t.Errorf("info %+v", got)
	}
}

// TestRunStops: Run returns when its context ends and polls nothing
// before its first interval.
func TestRunStops(t *testing.T) {
	srv, n := scripted(t)
	p := New(PollerConfig{URL: srv.URL, Interval: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p.Run(ctx)
	if n.Load() != 0 {
		t.Errorf("%d scrapes, want 0", n.Load())
	}
}

// TestNotANumber: a NaN or infinite reading is no reading (a report's
// JSON could not carry it).
func TestNotANumber(t *testing.T) {
	body := "# TYPE gpulens_gpu_power_watts gauge\ngpulens_gpu_power_watts{gpu=\"0\",uuid=\"GPU-a\"} NaN\n" +
		"# TYPE gpulens_gpu_memory_used_bytes gauge\ngpulens_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-a\"} +Inf\n" +
		"# TYPE gpulens_gpu_utilization_ratio gauge\ngpulens_gpu_utilization_ratio{gpu=\"0\",uuid=\"GPU-a\"} 0.5\n"
	srv, _ := scripted(t, body, body)
	p := New(PollerConfig{URL: srv.URL, Interval: time.Hour, Now: stepClock(time.Second)})
	g := p.Begin(context.Background()).End(context.Background())
	if g.MeanPowerWatts != 0 || g.PeakMemoryUsedBytes != 0 || g.EnergyJoules != 0 || g.MeanUtilizationRatio != 0.5 || len(g.GPUs) != 1 {
		t.Errorf("%+v", *g)
	}
	if info := p.Info(); info.PeakMemoryUsedBytes != 0 {
		t.Errorf("info peak %v", info.PeakMemoryUsedBytes)
	}
}
