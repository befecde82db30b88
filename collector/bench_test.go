package collector_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
	"github.com/gpulens/gpulens/internal/testenv"
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
	live := collector.NewRegistry() // what gpulens-exporter serves with the snapshot
	live.MustRegister(s.Live(), versioncollector.NewCollector("gpulens_exporter"), collectors.NewGoCollector(), collector.NewProcessCollector())
	exp := collector.NewExposition(s, live, collector.ExpositionOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done; lib.Shutdown() })
	wait, stop := context.WithTimeout(context.Background(), 60*time.Second)
	defer stop()
	testenv.Eventually(wait, b, 20*time.Millisecond, fmt.Sprintf("all %d GPUs up", s.DeviceCount()), func() (bool, string) {
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
		return up == s.DeviceCount(), fmt.Sprintf("%d up", up)
	})
	return s, reg, exp
}

// BenchmarkScrape measures one HTTP scrape of what gpulens-exporter serves
// of an 8-GPU simulated fleet over loopback while the sampler keeps running
// (--sampler.interval=1s: a scrape that finds a new snapshot renders it),
// with NVML answering at once (dgx-h100) and with every NVML call taking
// 100 ms (slow-nvml). The client asks for gzip and decompresses, as
// Prometheus does.
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
				bytes = scrapeOnce(b, client, srv.URL)
			}
			b.ReportMetric(float64(bytes), "bytes/scrape")
		})
	}
}

func scrapeOnce(b *testing.B, client *http.Client, url string) int64 {
	resp, err := client.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	n, _ := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatal(resp.Status)
	}
	return n
}

// staticHandler serves fixed bytes with fixed headers: a scrape's floor.
type staticHandler struct {
	header http.Header
	body   []byte
}

func (s *staticHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	h := w.Header()
	for k, v := range s.header {
		h[k] = v
	}
	_, _ = w.Write(s.body)
}

// BenchmarkScrapeVsStatic compares back-to-back HTTP scrapes of the
// exporter (dgx-h100, sampler running at 1 s, gzip) with a handler that
// only writes the same bytes with the same headers. One iteration is 100
// scrapes of each, in alternating order, so that other work on the machine
// slows both alike; x-static is the exporter's time (and CPU, client
// included) per scrape over the static handler's.
func BenchmarkScrapeVsStatic(b *testing.B) {
	_, _, h := startSimSampler(b, "dgx-h100", time.Second)
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	static := &staticHandler{header: rec.Header().Clone(), body: rec.Body.Bytes()}
	type target struct {
		url       string
		client    *http.Client
		wall, cpu time.Duration
		n         int
	}
	var targets [2]*target
	for i, handler := range []http.Handler{h, static} {
		srv := httptest.NewServer(handler)
		b.Cleanup(srv.Close)
		targets[i] = &target{url: srv.URL, client: srv.Client()}
		scrapeOnce(b, targets[i].client, srv.URL) // open the connection
	}
	round := 0
	for b.Loop() {
		for k := range targets {
			t := targets[(k+round)%2]
			start, cpu0 := time.Now(), cpuTime()
			for range 100 {
				scrapeOnce(b, t.client, t.url)
			}
			t.wall += time.Since(start)
			t.cpu += cpuTime() - cpu0
			t.n += 100
		}
		round++
	}
	exp, st := targets[0], targets[1]
	per := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n) }
	b.ReportMetric(per(exp.wall, exp.n), "exporter-µs/scrape")
	b.ReportMetric(per(st.wall, st.n), "static-µs/scrape")
	b.ReportMetric(float64(exp.wall)/float64(st.wall), "x-static")
	b.ReportMetric(per(exp.cpu, exp.n), "exporter-cpu-µs/scrape")
	b.ReportMetric(per(st.cpu, st.n), "static-cpu-µs/scrape")
	b.ReportMetric(float64(exp.cpu)/float64(st.cpu), "cpu-x-static")
	b.ReportMetric(float64(len(static.body)), "gz-bytes/scrape")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
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

// BenchmarkSamplerCPU reports the CPU time (user+system, getrusage) the
// sampler spends per cycle of all 8 simulated GPUs and per second, in real
// time, never scraped, with the XID watcher on as in gpulens-exporter: at a
// 10 ms interval (caches stay warm) and at the default 1 s (run with
// -benchtime=30x; each iteration is one interval).
func BenchmarkSamplerCPU(b *testing.B) {
	for _, interval := range []time.Duration{10 * time.Millisecond, time.Second} {
		b.Run("interval="+interval.String(), func(b *testing.B) {
			startSimSampler(b, "dgx-h100", interval)
			var before, after syscall.Rusage
			b.ResetTimer()
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			start := time.Now()
			for b.Loop() {
				time.Sleep(interval) // not a wait: one idle interval is what is measured
			}
			elapsed := time.Since(start)
			_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
			cycles := float64(elapsed) / float64(interval)
			b.ReportMetric(float64(cpu.Microseconds())/cycles, "cpu-µs/cycle")
			b.ReportMetric(float64(cpu.Microseconds())/elapsed.Seconds(), "cpu-µs/s")
		})
	}
}
