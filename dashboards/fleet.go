package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"

	"github.com/gpulens/gpulens/internal/clockevent"
)

// throttleReasons selects the clock-event reasons that slow a GPU down
// under work (power, thermal, hardware), from the one table of them.
var throttleReasons = `reason=~"` + clockevent.Regex(clockevent.Reason.Slowdown) + `"`

// fleet is the SRE overview of every GPU.
func fleet() (dashboard.Dashboard, error) {
	bd := newBoard("gpulens-fleet", "gpulens / Fleet overview",
		"Every GPU of the selected clusters and nodes: inventory, headroom, utilisation, GPUs waiting for their inputs (their processes' CPU and I/O, host pressure), throttling, XID and ECC errors, hot spots and the health of the exporters.",
		varCluster(), varInstance())

	bd.row("Inventory: are all GPUs there?")
	bd.stat(panel{title: "GPUs up", unit: "none", desc: "GPUs whose last sampler cycle succeeded (gpulens_gpu_up = 1).",
		qs: []q{{expr: `sum(gpulens_gpu_up{` + selNode + `})`}}})
	bd.stat(panel{title: "GPUs lost or unreadable", unit: "none", th: steps("green", 1, "red"),
		desc: "GPUs the exporter counts but cannot read: fallen off the bus, hung, or every NVML call failing (gpulens_gpu_up = 0). Alert: GpulensGPULost.",
		qs:   []q{{expr: `count(gpulens_gpu_up{` + selNode + `} == 0) or vector(0)`}}})
	bd.stat(panel{title: "Exporters down", unit: "none", th: steps("green", 1, "red"),
		desc: "gpulens exporters Prometheus cannot scrape (up{job=\"gpulens-exporter\"} = 0): their GPUs are missing from every other panel. Alert: GpulensExporterDown.",
		qs:   []q{{expr: `count(up{job="gpulens-exporter",` + selNode + `} == 0) or vector(0)`}}})
	bd.stat(panel{title: "Mean utilisation (5m)", unit: "percentunit", th: steps("blue", 0.05, "green"),
		desc: "Mean share of time a kernel ran, over all selected GPUs and the last 5 minutes (recording rule gpu:gpulens_gpu_busy:ratio_rate5m).",
		qs:   []q{{expr: `avg(gpu:gpulens_gpu_busy:ratio_rate5m{` + selNode + `})`}}})
	bd.stat(panel{title: "Memory used", unit: "percentunit", th: steps("green", 0.85, "orange", 0.95, "red"),
		desc: "Used share of all selected GPUs' memory.",
		qs:   []q{{expr: `sum(gpulens_gpu_memory_used_bytes{` + selNode + `}) / sum(gpulens_gpu_memory_total_bytes{` + selNode + `})`}}})
	bd.stat(panel{title: "Power draw", unit: "watt", desc: "Board power of all selected GPUs now.",
		qs: []q{{expr: `sum(gpulens_gpu_power_watts{` + selNode + `})`}}})

	bd.row("Capacity: where is headroom left?")
	bd.ts(panel{title: "VRAM headroom by GPU", unit: "percentunit", min: f(0), max: f(1), w: 8,
		th:   steps("red", 0.05, "orange", 0.2, "green"),
		desc: "Free share of the memory each GPU can hand out (free / (free + used), recording rule gpu:gpulens_gpu_memory_headroom:ratio). Under 5% for 10 minutes fires GpulensGPUMemoryHeadroomLow.",
		qs:   []q{{expr: `gpu:gpulens_gpu_memory_headroom:ratio{` + selNode + `}`, legend: lgGPU}}})
	bd.ts(panel{title: "Utilisation by GPU (5m mean)", unit: "percentunit", min: f(0), max: f(1), w: 8,
		th:   steps("blue", 0.05, "green"),
		desc: "Share of time a kernel ran on each GPU, averaged over 5 minutes from the integrated busy-time counter (gpu:gpulens_gpu_busy:ratio_rate5m).",
		qs:   []q{{expr: `gpu:gpulens_gpu_busy:ratio_rate5m{` + selNode + `}`, legend: lgGPU}}})
	bd.ts(panel{title: "SM activity by GPU (GPM)", unit: "percentunit", min: f(0), max: f(1), w: 8,
		th:   steps("blue", 0.05, "green"),
		desc: "Fraction of SMs busy (GPM, Hopper and newer): a GPU can be 100% utilised with few SMs active. Absent where GPM is unsupported.",
		qs:   []q{{expr: `gpulens_gpu_sm_activity_ratio{` + selNode + `}`, legend: lgGPU}}})

	bd.row("Input pipeline: which GPUs wait for their inputs?")
	bd.stat(panel{title: "Input-bound GPUs", unit: "none", th: steps("green", 1, "orange"),
		desc: "GPUs busy less than half of the last 5 minutes while a process on them keeps a CPU core busy or their host waits for CPUs or storage (gpu_cause:gpulens_gpu_input_bound_idle:ratio_rate5m). For 10 minutes it fires GpulensGPUInputBound.",
		qs:   []q{{expr: orZero(`count(count by (cluster, instance, gpu, uuid) (gpu_cause:gpulens_gpu_input_bound_idle:ratio_rate5m{` + selNode + `}))`)}}})
	bd.table(panel{title: "Input-bound GPUs and causes", unit: "percentunit", w: 8, th: steps("green", 0.5, "orange", 0.8, "red"),
		desc: "Each GPU waiting for its inputs, with its idle share over 5 minutes and the cause: process_cpu (a process on it keeps a core or more busy), host_cpu_pressure (the host's tasks wait for CPUs), host_io_pressure (they wait for storage). Open GPU detail's input pipeline row for the GPU.",
		qs:   []q{{expr: `gpu_cause:gpulens_gpu_input_bound_idle:ratio_rate5m{` + selNode + `}`}}}, "uuid")
	bd.ts(panel{title: "Host pressure by node (5m)", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.3, "orange", 0.5, "red"),
		desc: "Share of the last 5 minutes in which at least one task of each node waited for a CPU or for storage I/O (Linux PSI, kind=some; instance:gpulens_host_pressure_stall:ratio_rate5m). Empty for nodes whose kernel has no PSI.",
		qs:   []q{{expr: `instance:gpulens_host_pressure_stall:ratio_rate5m{` + selNode + `,kind="some",resource=~"cpu|io"}`, legend: "{{instance}} {{resource}}"}}})
	bd.ts(panel{title: "GPU processes' CPU and storage reads by node", unit: "none", w: 8, th: steps("green"),
		desc: "CPU cores the GPU processes of each node use (left axis; a process on several GPUs counted once) and the bytes per second they read from storage (right axis). Compare with the node's GPU utilisation above.",
		qs: []q{
			{expr: `sum by (cluster, instance) (max by (cluster, instance, pid) (process:gpulens_process_cpu_seconds:rate5m{` + selNode + `}))`, legend: "{{instance}} CPU cores"},
			{expr: `sum by (cluster, instance) (max by (cluster, instance, pid) (rate(gpulens_process_io_read_bytes_total{` + selNode + `}[$__rate_interval])))`, legend: "{{instance}} storage read"},
		}, units: map[string]string{"B": "Bps"}})

	bd.row("Health: what is failing?")
	bd.ts(panel{title: "Throttled GPUs by reason", unit: "none", w: 8, th: steps("green", 1, "orange"),
		desc: "Number of GPUs with each throttling clock-event reason active (power cap, thermal or hardware slowdown, power brake; a reason shows while active), and of GPUs with any of them (0 when none throttles). Sustained thermal throttling fires GpulensGPUThermalThrottling.",
		qs: []q{
			{expr: `sum by (reason) (gpulens_gpu_clock_event_active{` + selNode + `,` + throttleReasons + `}) > 0`, legend: "{{reason}}"},
			{expr: orZero(`sum(max by (cluster, instance, gpu, uuid) (gpulens_gpu_clock_event_active{` + selNode + `,` + throttleReasons + `}))`), legend: "any reason"},
		}})
	bd.table(panel{title: "Throttling GPUs and reasons", unit: "percentunit", w: 8,
		desc: "Each GPU and throttling reason active in the last 10 minutes, with the share of those 10 minutes it was active (gpu_reason:gpulens_gpu_clock_event_active:avg_over_time10m; 100% = throttled throughout).",
		th:   steps("green", 0.5, "orange", 0.9, "red"),
		qs:   []q{{expr: `gpu_reason:gpulens_gpu_clock_event_active:avg_over_time10m{` + selNode + `} > 0`}}}, "uuid")
	bd.ts(panel{title: "XID errors by GPU and code", unit: "none", w: 8, th: steps("green", 1, "red"),
		desc: "XID events the driver reported, per GPU and code (each shows while it counts), and in all GPUs (0 when none). 48, 61-64, 74, 92, 94, 95, 119, 120 and 140 are hardware or driver errors (GpulensGPUXIDCriticalError); 79 (fallen off the bus) pages as GpulensGPULost; the others usually come from applications.",
		qs: []q{
			{expr: `sum by (instance, gpu, xid) (increase(gpulens_gpu_xid_errors_total{` + selNode + `}[$__rate_interval])) > 0`, legend: "{{instance}} GPU {{gpu}} XID {{xid}}"},
			{expr: orZero(`sum(increase(gpulens_gpu_xid_errors_total{` + selNode + `}[$__rate_interval]))`), legend: "all GPUs"},
		}})
	bd.ts(panel{title: "ECC errors", unit: "none", w: 8, th: steps("green", 1, "red"),
		desc: "Corrected and uncorrected ECC errors per GPU (each shows while it counts) and in all GPUs. Any uncorrected error fires GpulensGPUUncorrectableECCErrors.",
		qs: []q{
			{expr: `sum by (instance, gpu, type) (increase(gpulens_gpu_ecc_errors_total{` + selNode + `}[$__rate_interval])) > 0`, legend: "{{instance}} GPU {{gpu}} {{type}}"},
			{expr: orZero(`sum(increase(gpulens_gpu_ecc_errors_total{` + selNode + `}[$__rate_interval]))`), legend: "all GPUs"},
		}})
	bd.ts(panel{title: "Row remapping pending or failed", unit: "none", w: 8, th: steps("green", 1, "red"),
		desc: "GPUs waiting for a reset to remap memory rows (pending) and GPUs whose remapping failed (replace them).",
		qs: []q{
			{expr: orZero(`sum(gpulens_gpu_remapping_pending{` + selNode + `})`), legend: "pending"},
			{expr: orZero(`sum(gpulens_gpu_remapping_failed{` + selNode + `})`), legend: "failed"},
		}})
	bd.ts(panel{title: "Collectors failing", unit: "none", w: 8, th: steps("green", 1, "orange"),
		desc: "Exporters whose collector made a failed NVML call in its last cycle, by collector (each shows while it fails), and in all (0 when none fails).",
		qs: []q{
			{expr: `count by (collector) (gpulens_scrape_collector_success{` + selNode + `} == 0)`, legend: "{{collector}}"},
			{expr: orZero(`count(gpulens_scrape_collector_success{` + selNode + `} == 0)`), legend: "all collectors"},
		}})

	bd.row("Hot spots")
	bd.table(panel{title: "Hottest GPUs", unit: "celsius", th: steps("green", 75, "orange", 83, "red"),
		desc: "The ten hottest GPUs now. H100/H200 start thermal slowdown at about 83 °C.",
		qs:   []q{{expr: `topk(10, gpulens_gpu_temperature_celsius{` + selNode + `})`}}}, "uuid")
	bd.table(panel{title: "Most power-hungry GPUs (5m mean)", unit: "watt", th: steps("green", 600, "orange"),
		desc: "The ten GPUs with the highest mean power over 5 minutes, from the energy counter (gpu:gpulens_gpu_energy_joules:rate5m).",
		qs:   []q{{expr: `topk(10, gpu:gpulens_gpu_energy_joules:rate5m{` + selNode + `})`}}}, "uuid")

	bd.row("Exporter and sampler health")
	bd.ts(panel{title: "Sampler data age", unit: "s", w: 8, th: steps("green", 30, "orange", 60, "red"),
		desc: "Age of the oldest GPU reading per exporter (time since the last successful sampler cycle). Over 60 s for 5 minutes on a GPU reported up fires GpulensSamplerStale (a GPU reported down pages as GpulensGPULost instead).",
		qs:   []q{{expr: `max by (instance) (gpu:gpulens_sampler_data_age:seconds{` + selNode + `})`, legend: "{{instance}}"}}})
	bd.ts(panel{title: "Sampler cycle duration p99", unit: "s", w: 8, th: steps("green", 0.5, "orange", 1, "red"),
		desc: "99th percentile of one GPU's sampler cycle per exporter over 5 minutes (instance:gpulens_sampler_duration_seconds:p99_rate5m). Near the sampler interval means readings lag.",
		qs:   []q{{expr: `instance:gpulens_sampler_duration_seconds:p99_rate5m{` + selNode + `}`, legend: "{{instance}}"}}})
	bd.ts(panel{title: "NVML errors by call", unit: "cps", w: 8, th: steps("green", 0.1, "orange"),
		desc: "Failed NVML calls per second by exporter, call and error (deadline_exceeded: a call still running after the device timeout), and in all (0 when none fails).",
		qs: []q{
			{expr: `sum by (instance, call, error) (rate(gpulens_nvml_errors_total{` + selNode + `}[$__rate_interval])) > 0`, legend: "{{instance}} {{call}} {{error}}"},
			{expr: orZero(`sum(rate(gpulens_nvml_errors_total{` + selNode + `}[$__rate_interval]))`), legend: "all calls"},
		}})
	return bd.build()
}
