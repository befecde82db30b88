package collector_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/gpusim"
)

// startSimSampler runs a sampler over a simulated fleet until every GPU is up.
func startSimSampler(b *testing.B, scenario string, interval time.Duration) (*collector.Sampler, *prometheus.Registry, http.Handler) {
	b.Helper()
	sc, err := gpusim.Load(scenario)
	if err != nil {
		b.Fatal(err)
	}
	fleet, err := gpusim.New(sc, gpusim.Options{Seed: 1, Start: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	lib := fleet.Interface()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		b.Fatalf("init: %v", ret)
	}
	var cs []collector.NamedCollector
	for _, f := range collector.Factories() {
		if f.DefaultEnabled {
			cs = append(cs, collector.NamedCollector{Name: f.Name, Collector: f.New()})
		}
	}
	s, err := collector.NewSampler(lib, cs, true, collector.Config{Interval: interval, DeviceTimeout: 30 * time.Second, Simulated: true})
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(s)
	live := prometheus.NewRegistry()
	live.MustRegister(s.Live())
	exp := collector.NewExposition(s, live, collector.ExpositionOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { s.Run(ctx); done <- struct{}{} }()
	go func() { exp.Run(ctx); done <- struct{}{} }()
	b.Cleanup(func() { cancel(); <-done; <-done; lib.Shutdown() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		up := 0
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "gpulens_gpu_up" {
				for _, m := range mf.GetMetric() {
					if m.GetGauge().GetValue() == 1 {
						up++
					}
				}
			}
		}
		if up == s.DeviceCount() {
			return s, reg, exp
		}
		if time.Now().After(deadline) {
			b.Fatalf("only %d of %d GPUs up after 60 s", up, s.DeviceCount())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// BenchmarkScrape measures one HTTP scrape of what gpulens-exporter serves
// (a pre-rendered Exposition, re-rendered in the background every second) of an 8-GPU simulated fleet over
// loopback while the sampler keeps running, with NVML answering at once
// (dgx-h100) and with every NVML call taking 100 ms (slow-nvml).
func BenchmarkScrape(b *testing.B) {
	for _, bc := range []struct{ name, scenario string }{
		{"dgx-h100", "dgx-h100"},
		{"slow-nvml", "testdata/slow-nvml.yaml"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			_, _, h := startSimSampler(b, bc.scenario, time.Second)
			srv := httptest.NewServer(h)
			defer srv.Close()
			client := srv.Client()
			var bytes int64
			b.ReportAllocs()
			for b.Loop() {
				resp, err := client.Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					b.Fatal(resp.Status)
				}
				bytes = n
			}
			b.ReportMetric(float64(bytes), "bytes/scrape")
		})
	}
}

// BenchmarkScrapeHandler measures the server side of a scrape alone: the
// allocations counted are the exporter's, not the HTTP client's.
// The render itself is measured by BenchmarkContentionRender.
func BenchmarkScrapeHandler(b *testing.B) {
	_, _, h := startSimSampler(b, "dgx-h100", time.Second)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	b.ReportAllocs()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}

// BenchmarkSamplerCPU reports the CPU time the sampler spends per cycle of
// all 8 GPUs (user+system, from getrusage) with a 10 ms interval.
func BenchmarkSamplerCPU(b *testing.B) {
	const interval = 10 * time.Millisecond
	startSimSampler(b, "dgx-h100", interval)
	var before, after syscall.Rusage
	b.ResetTimer()
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	start := time.Now()
	for b.Loop() {
		time.Sleep(interval)
	}
	elapsed := time.Since(start)
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	cycles := float64(elapsed) / float64(interval)
	b.ReportMetric(float64(cpu.Microseconds())/cycles, "cpu-µs/cycle")
	b.ReportMetric(float64(cpu)/float64(elapsed)*100, "cpu-%")
}
