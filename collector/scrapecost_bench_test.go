package collector

import (
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	versioncollector "github.com/prometheus/client_golang/prometheus/collectors/version"

	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// simExporter is what gpulens-exporter runs on a simulated fleet, driven on
// a fake clock: every default collector, and the exposition with the
// exporter's own metrics (Go runtime, process, build info) as in main.
type simExporter struct {
	clock *fakeClock
	s     *Sampler
	exp   *Exposition
}

func newSimExporter(b testing.TB, scenario string) *simExporter {
	b.Helper()
	sc, err := gpusim.Load(scenario)
	if err != nil {
		b.Fatal(err)
	}
	_, lib, clock := startFleet(b, sc)
	var cs []NamedCollector
	for _, f := range Factories() {
		if f.DefaultEnabled {
			cs = append(cs, NamedCollector{Name: f.Name, Collector: f.New()})
		}
	}
	s, err := NewSampler(lib, cs, false, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true})
	if err != nil {
		b.Fatal(err)
	}
	reg := NewRegistry()
	reg.MustRegister(s.Live(), versioncollector.NewCollector("gpulens_exporter"),
		collectors.NewGoCollector(), NewProcessCollector())
	e := &simExporter{clock: clock, s: s, exp: NewExposition(s, reg, ExpositionOptions{Now: clock.Now})}
	for range 2 { // identities read, GPM has a previous sample
		e.second()
	}
	return e
}

// second runs one sampler interval as Sampler.Run does: each GPU's cycle
// followed by a publish, then the watchdog's publish.
func (e *simExporter) second() {
	e.clock.Advance(time.Second)
	for _, w := range e.s.workers {
		w.cycle()
		e.s.publish()
	}
	e.s.publish()
}

// scrape is Prometheus's request, served by the handler alone.
func (e *simExporter) scrape(b testing.TB) int {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	rec := httptest.NewRecorder()
	e.exp.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		b.Fatalf("scrape: %d", rec.Code)
	}
	return rec.Body.Len()
}

// BenchmarkExporterCPUPerSecond is the exporter's CPU per second of its
// life (user+system, getrusage) at the default --sampler.interval=1s over
// the 8 simulated H100s of dgx-h100 (simulator included), scraped every 60
// s, 15 s and 1 s, against never scraped. Time is simulated on an injected
// clock: a simulated second is the 8 GPU cycles and the 9 snapshot
// publishes and, on a scrape second, one scrape (the handler, gzip) with
// whatever render it needs. One exporter runs blocks of 60 simulated
// seconds; each iteration runs, for every policy in a seeded random order,
// a pair of blocks: the policy's and a never-scraped one, in random order.
// Each block ends with a garbage collection inside its measurement, so that
// it pays for its own garbage, not for the previous block's
// (forced-gc-µs/s is what that adds to every block). x-never is the median
// over iterations of a policy block's CPU over its pair's never-scraped
// block's: other work on a shared machine slows blocks unevenly, and the
// pair runs within a fifth of a second. The never pair (never2) shows the
// noise. Run with -benchtime=60x (an hour of simulated time per policy).
func BenchmarkExporterCPUPerSecond(b *testing.B) {
	const block = 60 // simulated seconds
	policies := []struct {
		name  string
		every int // seconds between scrapes, 0: never
	}{{"never2", 0}, {"60s", 60}, {"15s", 15}, {"1s", 1}}
	e := newSimExporter(b, "dgx-h100")
	var gzBytes int
	var gcCPU, neverCPU time.Duration
	run := func(every int) time.Duration {
		cpu0 := cpuTime()
		for sec := 1; sec <= block; sec++ {
			e.second()
			if every > 0 && sec%every == 0 {
				gzBytes = e.scrape(b)
			}
		}
		gc0 := cpuTime()
		runtime.GC()
		gcCPU += cpuTime() - gc0
		return cpuTime() - cpu0
	}
	cpu := make([]time.Duration, len(policies))
	ratios := make([][]float64, len(policies))
	renders := make([]uint64, len(policies))
	rnd := rand.New(rand.NewPCG(1, 2))
	runtime.GC()
	rounds, blocks := 0, 0
	for b.Loop() {
		for _, i := range rnd.Perm(len(policies)) {
			var never, p time.Duration
			r0 := e.exp.renders.Load()
			if rnd.IntN(2) == 0 {
				never = run(0)
				p = run(policies[i].every)
			} else {
				p = run(policies[i].every)
				never = run(0)
			}
			renders[i] += e.exp.renders.Load() - r0
			cpu[i] += p
			neverCPU += never
			blocks += 2
			ratios[i] = append(ratios[i], float64(p)/float64(never))
		}
		rounds++
	}
	perSec := func(d time.Duration, n int) float64 { return float64(d.Microseconds()) / float64(n*block) }
	b.ReportMetric(perSec(neverCPU, rounds*len(policies)), "never-cpu-µs/s")
	for i, p := range policies {
		slices.Sort(ratios[i])
		b.ReportMetric(perSec(cpu[i], rounds), p.name+"-cpu-µs/s")
		b.ReportMetric(ratios[i][len(ratios[i])/2], p.name+"-x-never")
		if p.every > 0 {
			b.ReportMetric(float64(renders[i])/float64(rounds*block/p.every), p.name+"-renders/scrape")
		}
	}
	b.ReportMetric(float64(gcCPU.Microseconds())/float64(blocks*block), "forced-gc-µs/s")
	b.ReportMetric(float64(gzBytes), "gz-bytes/scrape")
}

// BenchmarkExporterRender is one render of what BenchmarkExporterCPUPerSecond
// serves (gather, text encoding, gzip): the price of a scrape that finds a
// new snapshot.
func BenchmarkExporterRender(b *testing.B) {
	e := newSimExporter(b, "dgx-h100")
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		e.exp.renderMu.Lock()
		_, err := e.exp.render()
		e.exp.renderMu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
}

// BenchmarkExporterCycle is the sampler's work per second of BenchmarkExporterCPUPerSecond
// without scrapes, as wall time per second of simulated time, with
// allocations: profile it (-cpuprofile) to split the simulator's cost from
// the collectors'.
func BenchmarkExporterCycle(b *testing.B) {
	e := newSimExporter(b, "dgx-h100")
	b.ReportAllocs()
	for b.Loop() {
		e.second()
	}
}

// acceptHeaders are the Accept headers of a Prometheus 3 scrape asking for
// each format (scrape_protocols with that format first).
var acceptHeaders = [numFormats]string{
	formatText:        "text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
	formatOpenMetrics: "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
	formatProtobuf:    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.8,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
}

// scrapeFormat is Prometheus's request for format f, served by the handler
// alone; it fails unless the body is in that format.
func (e *simExporter) scrapeFormat(b testing.TB, f format) int {
	req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	req.Header.Set("Accept", acceptHeaders[f])
	rec := httptest.NewRecorder()
	e.exp.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != contentType[f] {
		b.Fatalf("scrape: %d %s", rec.Code, rec.Header().Get("Content-Type"))
	}
	return rec.Body.Len()
}

// BenchmarkScrapeFormats is the price of one scrape in each format the
// exposition pre-renders, on the dgx-h100 (8 GPUs) and fleet scenarios: at
// a real scrape interval ("15s": every scrape finds a new snapshot, so it
// groups, encodes and gzips) and back to back (every scrape of one snapshot
// after the first writes the bytes rendered). Each iteration scrapes once
// in every format, in a rotating order, so that the formats share the
// machine's noise; the sampler's cycles between the scrapes of the 15s case
// are outside the measurement. Reported per format: the median and p99
// wall time of a scrape (the handler alone), its CPU (getrusage) per
// scrape, and both medians and the CPU over text's.
func BenchmarkScrapeFormats(b *testing.B) {
	for _, scenario := range []string{"dgx-h100", "fleet"} {
		e := newSimExporter(b, scenario)
		for _, cadence := range []string{"15s", "back-to-back"} {
			b.Run(scenario+"/"+cadence, func(b *testing.B) {
				e.second()
				var wall [numFormats][]time.Duration
				var cpu [numFormats]time.Duration
				var size [numFormats]int
				for f := range numFormats {
					e.scrapeFormat(b, f)
				}
				round := 0
				for b.Loop() {
					for k := range numFormats {
						f := (format(round) + k) % numFormats
						if cadence == "15s" {
							e.second()
						}
						start, cpu0 := time.Now(), cpuTime()
						size[f] = e.scrapeFormat(b, f)
						wall[f] = append(wall[f], time.Since(start))
						cpu[f] += cpuTime() - cpu0
					}
					round++
				}
				var p50 [numFormats]float64
				for f := range numFormats {
					slices.Sort(wall[f])
					n := len(wall[f])
					p50[f] = float64(wall[f][n/2].Microseconds())
					b.ReportMetric(p50[f], f.String()+"-p50-µs")
					b.ReportMetric(float64(wall[f][n*99/100].Microseconds()), f.String()+"-p99-µs")
					b.ReportMetric(float64(cpu[f].Microseconds())/float64(n), f.String()+"-cpu-µs")
					b.ReportMetric(float64(size[f]), f.String()+"-gz-bytes")
				}
				for _, f := range []format{formatOpenMetrics, formatProtobuf} {
					b.ReportMetric(p50[f]/max(p50[formatText], 1), f.String()+"-p50-x-text")
					b.ReportMetric(float64(cpu[f])/float64(max(cpu[formatText], 1)), f.String()+"-cpu-x-text")
				}
			})
		}
	}
}

// BenchmarkDCGMView is the DCGM-compatible view's price. on-15s and
// on-back-to-back: one scrape of the view (text, gzip) at a real scrape
// interval (a new snapshot each time: conversion, grouping, encoding) and
// back to back. cycle-off and cycle-on-unscraped: one simulated second of
// the sampler (8 GPU cycles, 9 publishes) without the view and with the
// view built but not scraped; the view converts nothing until it is
// scraped, so the two are the same work.
func BenchmarkDCGMView(b *testing.B) {
	for _, scenario := range []string{"dgx-h100", "fleet"} {
		e := newSimExporter(b, scenario)
		view := NewDCGMExposition(e.s, DCGMOptions{Hostname: "node", Exposition: ExpositionOptions{Now: e.clock.Now}})
		scrape := func(b *testing.B) int {
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			req.Header.Set("Accept-Encoding", "gzip")
			rec := httptest.NewRecorder()
			view.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				b.Fatalf("scrape: %d", rec.Code)
			}
			return rec.Body.Len()
		}
		for _, cadence := range []string{"15s", "back-to-back"} {
			b.Run(scenario+"/on-"+cadence, func(b *testing.B) {
				e.second()
				scrape(b)
				b.ReportAllocs()
				var cpu time.Duration
				size := 0
				for b.Loop() {
					if cadence == "15s" {
						b.StopTimer()
						e.second()
						b.StartTimer()
					}
					cpu0 := cpuTime()
					size = scrape(b)
					cpu += cpuTime() - cpu0
				}
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
				b.ReportMetric(float64(size), "gz-bytes")
			})
		}
		b.Run(scenario+"/cycle", func(b *testing.B) {
			b.ReportAllocs()
			r0 := view.renders.Load()
			for b.Loop() {
				e.second()
			}
			if view.renders.Load() != r0 {
				b.Fatal("the view rendered without a scrape")
			}
		})
	}
}

// BenchmarkScrapeProtobufLive is how a protobuf scrape was served before it
// was pre-rendered (and how the protobuf text formats still are): a live
// gather of the snapshot and the registry, encoded by promhttp, on every
// scrape. Compare with BenchmarkScrapeFormats's protobuf figures.
func BenchmarkScrapeProtobufLive(b *testing.B) {
	for _, scenario := range []string{"dgx-h100", "fleet"} {
		e := newSimExporter(b, scenario)
		b.Run(scenario, func(b *testing.B) {
			var cpu time.Duration
			for b.Loop() {
				e.second()
				req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
				req.Header.Set("Accept-Encoding", "gzip")
				req.Header.Set("Accept", acceptHeaders[formatProtobuf])
				rec := httptest.NewRecorder()
				cpu0 := cpuTime()
				e.exp.fallback.ServeHTTP(rec, req)
				cpu += cpuTime() - cpu0
				if rec.Code != http.StatusOK {
					b.Fatal(rec.Code)
				}
			}
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
		})
	}
}
