package collector

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// PressureResources are the resources of Linux pressure stall information
// (PSI), in the order HostReading.Pressure holds them.
var PressureResources = [...]string{"cpu", "io", "memory"}

// HostReading is the host's CPU count and pressure stall totals.
type HostReading struct {
	// CPUs is the number of online CPUs; 0 when unknown.
	CPUs int
	// Pressure is indexed like PressureResources.
	Pressure [len(PressureResources)]Pressure
}

// Pressure is one resource's total stall time since boot.
type Pressure struct {
	// Some is the time at least one task was stalled on the resource,
	// Full the time all non-idle tasks were, in seconds.
	Some, Full       float64
	HasSome, HasFull bool
}

// HostSource reads the host's CPU count and pressure: procfs (NewProcfsHost)
// or a simulated host. It is called on the scrape's rendering goroutine and
// must return quickly.
type HostSource interface {
	ReadHost(h *HostReading)
}

var (
	hostPressureDesc = prometheus.NewDesc(namespace+"_host_pressure_stall_seconds_total",
		"Time the host's tasks were stalled waiting for the resource (Linux pressure stall information, /proc/pressure/RESOURCE total, µs / 1e6): kind=\"some\" while at least one task was, kind=\"full\" while all non-idle tasks were at once. Absent without PSI (kernels before 4.20, psi=0, some containers); cpu full from Linux 5.13.",
		[]string{"resource", "kind"}, nil)
	hostCPUsDesc = prometheus.NewDesc(namespace+"_host_cpus",
		"Online CPUs of the host (the cpuN lines of /proc/stat), read at most every 10 minutes: what the GPU processes' CPU seconds and the CPU pressure compare with.",
		nil, nil)
)

// hostCollector serves the host's pressure and CPU count, read when the
// exposition is rendered (once per scraped snapshot).
type hostCollector struct{ src HostSource }

// NewHostCollector returns the collector of gpulens_host_* from src (nil:
// nothing is served).
func NewHostCollector(src HostSource) prometheus.Collector { return hostCollector{src} }

// DescribeHost sends the host collector's descriptions (for documentation
// checks).
func DescribeHost(ch chan<- *prometheus.Desc) {
	ch <- hostPressureDesc
	ch <- hostCPUsDesc
}

func (c hostCollector) Describe(ch chan<- *prometheus.Desc) { DescribeHost(ch) }

func (c hostCollector) Collect(ch chan<- prometheus.Metric) {
	if c.src == nil {
		return
	}
	var h HostReading
	c.src.ReadHost(&h)
	for i, p := range h.Pressure {
		res := PressureResources[i]
		if p.HasSome {
			ch <- prometheus.MustNewConstMetric(hostPressureDesc, prometheus.CounterValue, p.Some, res, "some")
		}
		if p.HasFull {
			ch <- prometheus.MustNewConstMetric(hostPressureDesc, prometheus.CounterValue, p.Full, res, "full")
		}
	}
	if h.CPUs > 0 {
		ch <- prometheus.MustNewConstMetric(hostCPUsDesc, prometheus.GaugeValue, float64(h.CPUs))
	}
}

// cpuCountRefresh is how often the CPU count is read again (CPUs are rarely
// hot-plugged; /proc/stat grows with them).
const cpuCountRefresh = 10 * time.Minute

// procfsHost reads /proc/pressure/{cpu,io,memory} on every call and counts
// /proc/stat's CPUs at most every cpuCountRefresh.
type procfsHost struct {
	root string
	now  func() time.Time

	mu      sync.Mutex
	cpus    int
	countAt time.Time
}

// NewProcfsHost reads the host from procfs mounted at root; now is the
// clock (nil: time.Now).
func NewProcfsHost(root string, now func() time.Time) HostSource {
	if now == nil {
		now = time.Now
	}
	return &procfsHost{root: root, now: now}
}

func (p *procfsHost) ReadHost(h *HostReading) {
	for i, res := range PressureResources {
		if b, err := os.ReadFile(filepath.Join(p.root, "pressure", res)); err == nil {
			h.Pressure[i] = parsePressure(b)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := p.now(); p.countAt.IsZero() || now.Sub(p.countAt) >= cpuCountRefresh {
		p.countAt = now
		if b, err := os.ReadFile(filepath.Join(p.root, "stat")); err == nil {
			p.cpus = countCPUs(b)
		}
	}
	h.CPUs = p.cpus
}

// parsePressure reads a PSI file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=123456
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
//
// total is in microseconds.
func parsePressure(b []byte) Pressure {
	var p Pressure
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		kind, rest, ok := bytes.Cut(line, []byte(" "))
		if !ok {
			continue
		}
		var total uint64
		found := false
		for f := range bytes.FieldsSeq(rest) {
			if v, ok := bytes.CutPrefix(f, []byte("total=")); ok {
				total, found = parseUint(v)
			}
		}
		if !found {
			continue
		}
		switch string(kind) {
		case "some":
			p.Some, p.HasSome = float64(total)/1e6, true
		case "full":
			p.Full, p.HasFull = float64(total)/1e6, true
		}
	}
	return p
}

// countCPUs counts the cpuN lines of /proc/stat (the online CPUs; the
// first line, "cpu ", is the sum).
func countCPUs(b []byte) int {
	n := 0
	for line := range bytes.SplitSeq(b, []byte("\n")) {
		if len(line) > 3 && bytes.HasPrefix(line, []byte("cpu")) && line[3] >= '0' && line[3] <= '9' {
			n++
		}
	}
	return n
}
