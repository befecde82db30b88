package collector

import (
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// TestProcessCollectorMatchesClientGolang: the same process_* series as
// client_golang's process collector, with the same values (CPU and memory
// within what changes between the two reads), and no network series.
func TestProcessCollectorMatchesClientGolang(t *testing.T) {
	t.Parallel()
	ours := prometheus.NewPedanticRegistry()
	ours.MustRegister(NewProcessCollector())
	theirs := prometheus.NewPedanticRegistry()
	theirs.MustRegister(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	got, want := series(t, ours), series(t, theirs)
	for name, tolerance := range map[string]float64{
		"process_start_time_seconds{}":       0,
		"process_max_fds{}":                  0,
		"process_virtual_memory_max_bytes{}": 0,
		"process_open_fds{}":                 2,
		"process_cpu_seconds_total{}":        0.05,
		"process_resident_memory_bytes{}":    0.1 * want["process_resident_memory_bytes{}"],
		"process_virtual_memory_bytes{}":     0.1 * want["process_virtual_memory_bytes{}"],
	} {
		g, ok := got[name]
		w, wok := want[name]
		if !ok || !wok {
			t.Errorf("%s: ours present %v, client_golang's present %v", name, ok, wok)
			continue
		}
		if math.Abs(g-w) > tolerance {
			t.Errorf("%s = %v, client_golang's %v (tolerance %v)", name, g, w, tolerance)
		}
		if g <= 0 {
			t.Errorf("%s = %v, want positive", name, g)
		}
	}
	if len(got) != 7 {
		t.Errorf("%d series, want 7: %v", len(got), got)
	}
}
