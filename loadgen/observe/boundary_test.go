package observe

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// cyclingExporter is an exporter whose sampler reads the GPU every cycle:
// what it serves is the last cycle's readings (energy counter, power,
// memory), stamped with that cycle's time, as gpulens-exporter does. The
// clock is the test's.
type cyclingExporter struct {
	mu    sync.Mutex
	now   time.Time
	t0    time.Time
	cycle time.Duration
	power func(sec float64) float64 // watts at sec after t0
	mem   func(sec float64) float64
}

func (e *cyclingExporter) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *cyclingExporter) set(t time.Time) {
	e.mu.Lock()
	e.now = t
	e.mu.Unlock()
}

// energy integrates power from t0 to sec (1 ms steps).
func (e *cyclingExporter) energy(sec float64) float64 {
	j := 0.0
	for x := 0.0; x < sec; x += 0.001 {
		j += e.power(x+0.0005) * math.Min(0.001, sec-x)
	}
	return j
}

func (e *cyclingExporter) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	e.mu.Lock()
	since := e.now.Sub(e.t0)
	e.mu.Unlock()
	last := since.Truncate(e.cycle) // the last completed cycle
	sec := last.Seconds()
	stamp := float64(e.t0.Add(last).UnixNano()) / 1e9
	fmt.Fprintf(w, "# TYPE gpulens_gpu_info gauge\ngpulens_gpu_info{gpu=\"0\",uuid=\"GPU-0\"} 1\n"+
		"# TYPE gpulens_gpu_power_watts gauge\ngpulens_gpu_power_watts{gpu=\"0\",uuid=\"GPU-0\"} %g\n"+
		"# TYPE gpulens_gpu_memory_used_bytes gauge\ngpulens_gpu_memory_used_bytes{gpu=\"0\",uuid=\"GPU-0\"} %g\n"+
		"# TYPE gpulens_gpu_energy_joules_total counter\ngpulens_gpu_energy_joules_total{gpu=\"0\",uuid=\"GPU-0\"} %g\n"+
		"# TYPE gpulens_sampler_last_success_timestamp_seconds gauge\ngpulens_sampler_last_success_timestamp_seconds{gpu=\"0\",uuid=\"GPU-0\"} %f\n",
		e.power(sec), e.mem(sec), e.energy(sec), stamp)
}

// TestEnergyAtRunEdges: the energy of a run is the counter at its end minus
// at its start, whatever its length against the exporter's sampler cycle
// (1 s) and the poll interval (2 s, so no poll between Begin and End): runs
// of 1.79 s and 1.89 s at 600 W read 1,074 J and 1,134 J, where the
// counter's last readings differ by 600 J or 1,200 J. Peak memory is over
// the readings made during the run: a peak in the cycle before the run
// is not the run's.
func TestEnergyAtRunEdges(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		power           func(float64) float64
		start, duration float64 // seconds after t0
		wantJ, tol      float64 // tol: relative
		wantWarning     bool
		wantPeak        float64
	}{
		{"constant, 1.79 s", func(float64) float64 { return 600 }, 10.95, 1.79, 600 * 1.79, 1e-6, false, 2e9},
		{"constant, 1.89 s", func(float64) float64 { return 600 }, 20.05, 1.89, 600 * 1.89, 1e-6, false, 2e9},
		{"constant, 2 s aligned", func(float64) float64 { return 600 }, 30, 2, 1200, 1e-6, false, 2e9},
		{"constant, 2 s straddling", func(float64) float64 { return 600 }, 40.999, 2, 1200, 1e-6, false, 2e9},
		// Power ramping 1 W/s: the extrapolated edges use the power at the
		// nearest reading, off by at most a cycle's ramp.
		{"ramp, 1.89 s", func(s float64) float64 { return 400 + s }, 50.5, 1.89, 1.89 * (400 + 51.445), 0.005, false, 2e9},
		// Shorter than a sampler cycle: extrapolated, and said so.
		{"0.5 s", func(float64) float64 { return 600 }, 60.2, 0.5, 300, 1e-6, true, 1e9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &cyclingExporter{t0: base, cycle: time.Second, power: tc.power, mem: func(s float64) float64 {
				// 3 GB in the cycle before the run, 2 GB during it.
				switch {
				case s < tc.start-1.5:
					return 1e9
				case s < math.Floor(tc.start):
					return 3e9
				case s < math.Floor(tc.start)+1:
					return 1e9
				}
				return 2e9
			}}
			srv := httptest.NewServer(e)
			defer srv.Close()
			p := New(PollerConfig{URL: srv.URL + "/metrics", Interval: 2 * time.Second, Now: e.clock})
			at := func(s float64) time.Time { return base.Add(time.Duration(s * float64(time.Second))) }
			e.set(at(tc.start))
			w := p.Begin(context.Background())
			e.set(at(tc.start + tc.duration))
			g := w.End(context.Background())
			if math.Abs(g.EnergyJoules-tc.wantJ) > tc.tol*tc.wantJ {
				t.Errorf("energy %.3f J, want %.3f J (±%g)", g.EnergyJoules, tc.wantJ, tc.tol)
			}
			if math.Abs(g.DurationSeconds-tc.duration) > 1e-6 {
				t.Errorf("duration %v, want %v", g.DurationSeconds, tc.duration)
			}
			if (g.Warning != "") != tc.wantWarning || (tc.wantWarning && !strings.Contains(g.Warning, "too short")) {
				t.Errorf("warning %q (extrapolated %.2f), want one: %v", g.Warning, g.EnergyExtrapolatedRatio, tc.wantWarning)
			}
			if g.PeakMemoryUsedBytes != tc.wantPeak {
				t.Errorf("peak memory %g, want %g (the run's readings only)", g.PeakMemoryUsedBytes, tc.wantPeak)
			}
		})
	}
}
