package collector

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// writeHostProc writes /proc/stat with n CPUs and the given pressure files
// (resource → content; a resource left out has no file).
func writeHostProc(t *testing.T, root string, cpus int, pressure map[string]string) {
	t.Helper()
	stat := "cpu  100 0 50 1000 0 0 0 0 0 0\n"
	for i := range cpus {
		stat += "cpu" + strconv.Itoa(i) + " 10 0 5 100 0 0 0 0 0 0\n"
	}
	stat += "intr 12345\nctxt 999\nbtime 1700000000\nprocesses 42\n"
	if err := os.MkdirAll(filepath.Join(root, "pressure"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "stat"), stat, 0o644)
	for res, content := range pressure {
		writeFile(t, filepath.Join(root, "pressure", res), content, 0o444)
	}
}

// TestHostCollectorExactValues: PSI totals in seconds (the files give µs)
// for the resources and kinds the files have (cpu without a full line, as
// before Linux 5.13; no memory file), and the CPU count of /proc/stat, read
// again only after 10 minutes.
func TestHostCollectorExactValues(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	writeHostProc(t, root, 12, map[string]string{
		"cpu": "some avg10=1.50 avg60=0.80 avg300=0.20 total=123456789\n",
		"io":  "some avg10=40.00 avg60=35.10 avg300=20.00 total=98765432100\nfull avg10=10.00 avg60=8.00 avg300=4.00 total=5000000\n",
	})
	clock := newFakeClock()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewHostCollector(NewProcfsHost(root, clock.Now)))
	want := map[string]float64{
		"gpulens_host_pressure_stall_seconds_total{resource=cpu,kind=some}": 123.456789,
		"gpulens_host_pressure_stall_seconds_total{resource=io,kind=some}":  98765.4321,
		"gpulens_host_pressure_stall_seconds_total{resource=io,kind=full}":  5,
		"gpulens_host_cpus{}": 12,
	}
	diffSeries(t, "first read", series(t, reg), want)

	// Two CPUs come online: seen after 10 minutes, not before.
	writeHostProc(t, root, 14, nil)
	clock.Advance(9 * time.Minute)
	diffSeries(t, "after 9 minutes", series(t, reg), want)
	clock.Advance(time.Minute)
	want["gpulens_host_cpus{}"] = 14
	diffSeries(t, "after 10 minutes", series(t, reg), want)
}

// TestHostCollectorWithoutPSI: a host without /proc/pressure (an old kernel,
// psi=0, a container's procfs) serves only its CPU count, and a nil source
// nothing.
func TestHostCollectorWithoutPSI(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "stat"), []byte("cpu  1 2 3\ncpu0 1 2 3\ncpu1 1 2 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewHostCollector(NewProcfsHost(root, nil)))
	diffSeries(t, "no PSI", series(t, reg), map[string]float64{"gpulens_host_cpus{}": 2})

	empty := prometheus.NewPedanticRegistry()
	empty.MustRegister(NewHostCollector(nil))
	if got := series(t, empty); len(got) != 0 {
		t.Errorf("nil source: %v, want nothing", got)
	}
}

func TestParsePressure(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want Pressure
	}{
		{"some and full", "some avg10=0.00 avg60=0.00 avg300=0.00 total=1500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=250000\n",
			Pressure{Some: 1.5, Full: 0.25, HasSome: true, HasFull: true}},
		{"some only", "some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n", Pressure{Some: 7e-6, HasSome: true}},
		{"no total", "some avg10=0.00 avg60=0.00 avg300=0.00\n", Pressure{}},
		{"bad total", "some avg10=0.00 total=x\nfull total=2000000", Pressure{Full: 2, HasFull: true}},
		{"empty", "", Pressure{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := parsePressure([]byte(tc.in)); got != tc.want {
				t.Errorf("parsePressure(%q) = %+v, want %+v", tc.in, got, tc.want)
			}
		})
	}
}
