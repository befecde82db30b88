package collector

import (
	"slices"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	probeUpDesc = desc("probe", "up",
		"1 when the last probe of the CUDA device measured something, 0 when it failed as a whole (no libcuda, no device, deadline, busy); its figures are then absent.")
	probeDeviceInfoDesc = desc("probe", "device_info",
		"CUDA's view of the probed device, value 1: ordinal, name and compute capability.",
		"cuda_ordinal", "name", "compute_capability")
	probeLastSuccessDesc = desc("probe", "last_success_timestamp_seconds",
		"Unix time the device's last successful probe finished.")
	probeDurationDesc = desc("probe", "duration_seconds",
		"Wall time of the device's last probe (context, JIT, allocations and measurements).")
	probeGPUTimeDesc = desc("probe", "gpu_time_seconds",
		"GPU time the timed kernels and copies of the device's last probe took (bounded by --collector.probe.budget).")
	probeRunsDesc = desc("probe", "runs_total",
		"Probes of the device attempted, failed ones included.")
	probeErrorsDesc = desc("probe", "errors_total",
		"Probe failures by measurement (h2d, fp32, ..., probe: the whole device probe, init: loading CUDA or listing devices) and error (a CUDA error name such as out_of_memory, deadline_exceeded, busy, unavailable, other).",
		"measurement", "error")
	probeMemFreeDesc = desc("probe", "memory_free_bytes",
		"Device memory free as the probe's CUDA context sees it (cuMemGetInfo), after the context exists.")
	probeMemTotalDesc = desc("probe", "memory_total_bytes",
		"Device memory total as CUDA reports it (cuMemGetInfo): a vGPU guest or MIG instance sees its share.")
	probeH2DDesc = desc("probe", "h2d_bandwidth_bytes_per_second",
		"Host-to-device copy bandwidth from pinned memory measured by the last probe.")
	probeD2HDesc = desc("probe", "d2h_bandwidth_bytes_per_second",
		"Device-to-host copy bandwidth into pinned memory measured by the last probe.")
	probeDeviceCopyDesc = desc("probe", "device_copy_bandwidth_bytes_per_second",
		"Device memory bandwidth of a copy kernel (bytes read plus written per second) measured by the last probe.")
	probeFP32Desc = desc("probe", "fp32_flop_per_second",
		"FP32 FMA throughput measured by the last probe, in floating-point operations per second.")
	probeTensorDesc = desc("probe", "tensor_flop_per_second",
		"Tensor-core mma.sync throughput (f32 accumulate) measured by the last probe, in floating-point operations per second.",
		"dtype")
	probeLaunchDesc = desc("probe", "launch_latency_seconds",
		"Round trip of an empty kernel (launch and synchronise) over the last probe's launches: stat=median or p99.",
		"stat")
	probeStolenDesc = desc("probe", "stolen_time_ratio",
		"Share of the stolen-time windows the probe's kernel did not run (gaps in %globaltimer; median over SMs per window, the windows weighted by length): GPU time given to other contexts. ~0 on a GPU that is yours alone.")
	probeUnexplainedDesc = desc("probe", "unexplained_stolen_time_ratio",
		"Share of the stolen-time windows taken by contexts NVML does not show. basis=visible_processes: the least the GPU's visible contexts can leave unexplained, per window, by NVML's per-process samples (each context at most an equal turn with the probe and its samples' busy time inside the window; the exporter itself left out, MPS clients and server one context); ~0 on a GPU busy only with processes NVML lists. basis=raw: NVML has no per-process utilisation on the GPU (NOT_SUPPORTED, a vGPU guest): the raw stolen time ratio, the tenant's own processes included. Absent when not known (see unexplained_stolen_time_unknown).",
		"basis")
	probeUnexplainedUpperDesc = desc("probe", "unexplained_stolen_time_upper_ratio",
		"The most the unexplained stolen time can be by NVML's samples: up to the stolen time ratio when a sample period longer than the windows holds a busy visible tenant (NVML cannot tell whether it or a neighbour took the windows); minus unexplained_stolen_time_ratio, the figure's error bound.",
		"basis")
	probeUnexplainedUnknownDesc = desc("probe", "unexplained_stolen_time_unknown",
		"1 when the last probe measured stolen time but the unexplained part is not known, by reason: no_process_utilization (the process collectors are off), mig, utilization_read_failed, samples_not_read (NVML not read a sample period past a window within the wait), no_samples_during_probe (NVML showed no sample at all while the probe ran and lost time: it does not see this GPU's contexts), no_windows.",
		"reason")
	probeGapDesc = desc("probe", "stolen_gap_seconds",
		"Length of the gaps the stolen-time kernel saw (stat=median, p90, max; 0 without gaps): the time slice other contexts got.",
		"stat")
)

// DescribeProbe sends the descriptors of every probe metric.
func DescribeProbe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{probeUpDesc, probeDeviceInfoDesc, probeLastSuccessDesc, probeDurationDesc,
		probeGPUTimeDesc, probeRunsDesc, probeErrorsDesc, probeMemFreeDesc, probeMemTotalDesc, probeH2DDesc,
		probeD2HDesc, probeDeviceCopyDesc, probeFP32Desc, probeTensorDesc, probeLaunchDesc, probeStolenDesc, probeUnexplainedDesc,
		probeUnexplainedUpperDesc, probeUnexplainedUnknownDesc, probeGapDesc,
		probeSkippedDesc, probeNotReportedDesc, probeContextMemDesc, probeChildCPUDesc, probeChildRSSDesc} {
		ch <- d
	}
}

// Describe implements prometheus.Collector.
func (p *ProbeCollector) Describe(ch chan<- *prometheus.Desc) { DescribeProbe(ch) }

// Collect implements prometheus.Collector: it copies the latest snapshot and
// never calls CUDA.
func (p *ProbeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, m := range *p.snap.Load() {
		ch <- m
	}
}

// publish renders every device's state into a new snapshot.
func (p *ProbeCollector) publish() {
	devs := make([]*probeDevice, 0, len(p.devices))
	for _, st := range p.devices {
		devs = append(devs, st)
	}
	slices.SortFunc(devs, func(a, b *probeDevice) int {
		ai, aerr := strconv.Atoi(a.gpu)
		bi, berr := strconv.Atoi(b.gpu)
		switch {
		case aerr == nil && berr == nil && ai != bi:
			return ai - bi
		case (aerr == nil) != (berr == nil):
			if aerr == nil {
				return -1
			}
			return 1
		}
		return strings.Compare(a.uuid, b.uuid)
	})
	var ms []prometheus.Metric
	for _, st := range devs {
		ms = st.appendMetrics(ms)
	}
	p.snap.Store(&ms)
}

func (st *probeDevice) appendMetrics(ms []prometheus.Metric) []prometheus.Metric {
	g := func(d *prometheus.Desc, v float64, extra ...string) {
		ms = append(ms, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{st.gpu, st.uuid}, extra...)...))
	}
	g(probeUpDesc, b2f(st.result != nil))
	if st.info != nil {
		g(probeDeviceInfoDesc, 1, strconv.Itoa(st.info.Ordinal), st.info.Name, st.info.ComputeCapability)
	}
	if !st.lastOK.IsZero() {
		g(probeLastSuccessDesc, float64(st.lastOK.UnixNano())/1e9)
	}
	ms = append(ms, prometheus.MustNewConstMetric(probeRunsDesc, prometheus.CounterValue, st.runs, st.gpu, st.uuid))
	keys := make([]probeErrKey, 0, len(st.errs))
	for k := range st.errs {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b probeErrKey) int {
		if c := strings.Compare(a.measurement, b.measurement); c != 0 {
			return c
		}
		return strings.Compare(a.err, b.err)
	})
	for _, k := range keys {
		ms = append(ms, prometheus.MustNewConstMetric(probeErrorsDesc, prometheus.CounterValue, st.errs[k], st.gpu, st.uuid, k.measurement, k.err))
	}
	for _, reason := range gpuprobe.SkipReasons {
		if n, ok := st.skips[reason]; ok {
			ms = append(ms, prometheus.MustNewConstMetric(probeSkippedDesc, prometheus.CounterValue, n, st.gpu, st.uuid, reason))
		}
	}
	for _, m := range gpuprobe.Measurements {
		for _, reason := range gpuprobe.NotReportedReasons {
			if n, ok := st.notReportedRuns[probeErrKey{m, reason}]; ok {
				ms = append(ms, prometheus.MustNewConstMetric(probeNotReportedDesc, prometheus.CounterValue, n, st.gpu, st.uuid, m, reason))
			}
		}
	}
	ms = st.appendChildMetrics(ms)
	r := st.result
	if r == nil {
		return ms
	}
	g(probeDurationDesc, r.Duration.Seconds())
	g(probeGPUTimeDesc, r.GPUTime.Seconds())
	if r.ContextMemoryBytes > 0 {
		g(probeContextMemDesc, float64(r.ContextMemoryBytes))
	}
	if r.Memory != nil {
		g(probeMemFreeDesc, float64(r.Memory.FreeBytes))
		g(probeMemTotalDesc, float64(r.Memory.TotalBytes))
	}
	nonZero := func(d *prometheus.Desc, v float64, extra ...string) {
		if v > 0 {
			g(d, v, extra...)
		}
	}
	nonZero(probeH2DDesc, r.H2DBytesPerSecond)
	nonZero(probeD2HDesc, r.D2HBytesPerSecond)
	nonZero(probeDeviceCopyDesc, r.DeviceCopyBytesPerSecond)
	nonZero(probeFP32Desc, r.FP32FLOPS)
	nonZero(probeTensorDesc, r.FP16TensorFLOPS, "fp16")
	nonZero(probeTensorDesc, r.BF16TensorFLOPS, "bf16")
	nonZero(probeLaunchDesc, r.LaunchLatency.Seconds(), "median")
	nonZero(probeLaunchDesc, r.LaunchLatencyP99.Seconds(), "p99")
	if s := r.Stolen; s != nil {
		g(probeStolenDesc, s.Ratio)
		if u := st.unexplained; u != nil && u.Known() {
			g(probeUnexplainedDesc, u.Ratio, u.Basis)
			g(probeUnexplainedUpperDesc, u.Upper, u.Basis)
		} else if u != nil {
			g(probeUnexplainedUnknownDesc, 1, u.Reason)
		}
		g(probeGapDesc, s.GapMedian.Seconds(), "median")
		g(probeGapDesc, s.GapP90.Seconds(), "p90")
		g(probeGapDesc, s.GapMax.Seconds(), "max")
	}
	return ms
}
