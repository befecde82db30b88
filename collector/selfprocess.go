package collector

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// NewProcessCollector returns the exporter's own process_* metrics, as
// client_golang's process collector names them, at a fraction of its cost
// per scrape: that one reads /proc/stat (which grows with the number of
// CPUs: a DGX has over 200) to recompute the process start time, and
// /proc/self/net/netstat, on every scrape. Here the start time is read once,
// CPU time and limits come from getrusage and getrlimit, memory from
// /proc/self/statm, and open descriptors from /proc/self/fd. The network
// counters (process_network_*_bytes_total, which count the whole network
// namespace, not the process) are left out.
func NewProcessCollector() prometheus.Collector {
	c := &selfProcess{pageSize: float64(os.Getpagesize())}
	if start, err := processStartTime(); err == nil {
		c.start, c.haveStart = start, true
	}
	return c
}

type selfProcess struct {
	pageSize  float64
	start     float64 // unix seconds
	haveStart bool
}

var (
	procCPUDesc      = prometheus.NewDesc("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", nil, nil)
	procOpenFDsDesc  = prometheus.NewDesc("process_open_fds", "Number of open file descriptors.", nil, nil)
	procMaxFDsDesc   = prometheus.NewDesc("process_max_fds", "Maximum number of open file descriptors.", nil, nil)
	procVsizeDesc    = prometheus.NewDesc("process_virtual_memory_bytes", "Virtual memory size in bytes.", nil, nil)
	procMaxVsizeDesc = prometheus.NewDesc("process_virtual_memory_max_bytes", "Maximum amount of virtual memory available in bytes.", nil, nil)
	procRSSDesc      = prometheus.NewDesc("process_resident_memory_bytes", "Resident memory size in bytes.", nil, nil)
	procStartDesc    = prometheus.NewDesc("process_start_time_seconds", "Start time of the process since unix epoch in seconds.", nil, nil)
)

func (c *selfProcess) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{procCPUDesc, procOpenFDsDesc, procMaxFDsDesc, procVsizeDesc, procMaxVsizeDesc, procRSSDesc, procStartDesc} {
		ch <- d
	}
}

func (c *selfProcess) Collect(ch chan<- prometheus.Metric) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		ch <- prometheus.MustNewConstMetric(procCPUDesc, prometheus.CounterValue, cpu.Seconds())
	}
	if statm, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := bytes.Fields(statm); len(f) >= 2 {
			if size, err := strconv.ParseUint(string(f[0]), 10, 64); err == nil {
				ch <- prometheus.MustNewConstMetric(procVsizeDesc, prometheus.GaugeValue, float64(size)*c.pageSize)
			}
			if rss, err := strconv.ParseUint(string(f[1]), 10, 64); err == nil {
				ch <- prometheus.MustNewConstMetric(procRSSDesc, prometheus.GaugeValue, float64(rss)*c.pageSize)
			}
		}
	}
	if d, err := os.Open("/proc/self/fd"); err == nil {
		names, err := d.Readdirnames(-1)
		d.Close()
		if err == nil {
			ch <- prometheus.MustNewConstMetric(procOpenFDsDesc, prometheus.GaugeValue, float64(len(names)))
		}
	}
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil {
		ch <- prometheus.MustNewConstMetric(procMaxFDsDesc, prometheus.GaugeValue, float64(lim.Cur))
	}
	if syscall.Getrlimit(syscall.RLIMIT_AS, &lim) == nil {
		ch <- prometheus.MustNewConstMetric(procMaxVsizeDesc, prometheus.GaugeValue, float64(lim.Cur))
	}
	if c.haveStart {
		ch <- prometheus.MustNewConstMetric(procStartDesc, prometheus.GaugeValue, c.start)
	}
}

// processStartTime is the process's start time in unix seconds: the boot
// time (/proc/stat btime) plus the start in clock ticks since boot
// (/proc/self/stat field 22; USER_HZ is 100 on Linux).
func processStartTime() (float64, error) {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count fields after its ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, syscall.EINVAL
	}
	f := bytes.Fields(stat[i+1:]) // f[0] is field 3
	if len(f) < 20 {
		return 0, syscall.EINVAL
	}
	ticks, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return 0, err
	}
	sys, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	for line := range bytes.SplitSeq(sys, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("btime ")); ok {
			boot, err := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			if err != nil {
				return 0, err
			}
			return float64(boot) + float64(ticks)/100, nil
		}
	}
	return 0, syscall.EINVAL
}
