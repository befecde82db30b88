package dashboards

import (
	"slices"

	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
)

// The identifying labels the joined tables' rows are keyed by (with the
// descriptive labels every query of the table carries).
var (
	// A process on a GPU, with its pod.
	processLabels = []string{"cluster", "instance", "gpu", "pid", "namespace", "pod", "container", "process_name"}
	// A MIG compute instance.
	migLabels = []string{"cluster", "instance", "gpu", "gpu_instance_id", "compute_instance_id"}
)

// gpuDetail drills into one node or GPU.
func gpuDetail() (dashboard.Dashboard, error) {
	bd := newBoard("gpulens-gpu", "gpulens / GPU detail",
		"One node or GPU (it opens on the first GPU of the first node; pick others in the filters): memory, utilisation, its processes' CPU and I/O and the host's pressure beside it (is the GPU waiting for its inputs?), power, energy, clocks and clock events, what the GPU delivers to its tenant (the probe: stolen time, bandwidths, FLOP/s), the processes on it with their pods, and its MIG instances.",
		varCluster(), varInstanceOne(), varGPUOne(), varNamespace())

	bd.row("Memory")
	bd.ts(panel{title: "Memory used, free and reserved", unit: "bytes", w: 12, th: steps("green"),
		desc: "Framebuffer memory per GPU: used by processes, free, and reserved by the driver.",
		qs: []q{
			{expr: `gpulens_gpu_memory_used_bytes{` + selGPU + `}`, legend: lgGPU + " used"},
			{expr: `gpulens_gpu_memory_free_bytes{` + selGPU + `}`, legend: lgGPU + " free"},
			{expr: `gpulens_gpu_memory_reserved_bytes{` + selGPU + `}`, legend: lgGPU + " reserved"},
		}})
	bd.ts(panel{title: "VRAM headroom", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("red", 0.05, "orange", 0.2, "green"),
		desc: "Free share of the memory each GPU can hand out (gpu:gpulens_gpu_memory_headroom:ratio). A steady fall predicts exhaustion (GpulensGPUMemoryExhaustionPredicted).",
		qs:   []q{{expr: `gpu:gpulens_gpu_memory_headroom:ratio{` + selGPU + `}`, legend: lgGPU}}})

	bd.row("Utilisation")
	bd.ts(panel{title: "GPU and memory-bandwidth utilisation", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("blue", 0.05, "green"),
		desc: "Share of time a kernel ran over each interval (from the integrated busy counter) and memory-bandwidth utilisation (NVML's last sample).",
		qs: []q{
			{expr: `rate(gpulens_gpu_busy_seconds_total{` + selGPU + `}[$__rate_interval])`, legend: lgGPU + " busy"},
			{expr: `gpulens_gpu_memory_bandwidth_utilization_ratio{` + selGPU + `}`, legend: lgGPU + " memory bandwidth"},
		}})
	bd.ts(panel{title: "GPM activity", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("blue", 0.05, "green"),
		desc: "GPU Performance Monitoring (Hopper and newer): SM activity and occupancy, tensor-core activity and DRAM bandwidth, averaged over the sampler interval.",
		qs: []q{
			{expr: `gpulens_gpu_sm_activity_ratio{` + selGPU + `}`, legend: lgGPU + " SM activity"},
			{expr: `gpulens_gpu_sm_occupancy_ratio{` + selGPU + `}`, legend: lgGPU + " SM occupancy"},
			{expr: `gpulens_gpu_tensor_activity_ratio{` + selGPU + `}`, legend: lgGPU + " tensor"},
			{expr: `gpulens_gpu_dram_bandwidth_utilization_ratio{` + selGPU + `}`, legend: lgGPU + " DRAM bandwidth"},
		}})

	bd.row("Input pipeline: CPU, I/O and host pressure")
	bd.ts(panel{title: "GPU busy and its processes' CPU", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("blue", 0.05, "green"),
		desc: "Share of time a kernel ran (left axis) beside the CPU cores each process on the GPU uses (right axis, user + system). A GPU mostly idle while its process keeps a core or more busy waits for its inputs (GpulensGPUInputBound); a busy GPU with an idle CPU is healthy. Loader worker processes, which NVML does not list, are not here: see the host pressure.",
		qs: []q{
			{expr: `rate(gpulens_gpu_busy_seconds_total{` + selGPU + `}[$__rate_interval])`, legend: lgGPU + " busy"},
			{expr: `sum without (mode) (rate(gpulens_process_cpu_seconds_total{` + selGPU + `,namespace=~"$namespace"}[$__rate_interval]))`, legend: "{{namespace}}/{{pod}} {{process_name}} ({{pid}}) CPU cores"},
		}, units: map[string]string{"B": "none"}})
	bd.ts(panel{title: "Host pressure (PSI)", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.3, "orange", 0.5, "red"),
		desc: "Share of the last 5 minutes in which at least one task of the GPU's host (some) or all of them (full) waited for a CPU, storage I/O or memory (Linux pressure stall information, instance:gpulens_host_pressure_stall:ratio_rate5m). CPU some at 50% or I/O some at 30% with an idle GPU fires GpulensGPUInputBound. Empty where the kernel has no PSI.",
		qs:   []q{{expr: `instance:gpulens_host_pressure_stall:ratio_rate5m{` + selNode + `}`, legend: "{{instance}} {{resource}} {{kind}}"}}})
	bd.ts(panel{title: "Process CPU share of its threads", unit: "percentunit", min: f(0), max: f(1), w: 8, th: steps("green"),
		desc: "Share of its threads' time each process spent on a CPU over 5 minutes (process:gpulens_process_cpu_thread_share:ratio_rate5m): 100% when every thread runs all the time. A Python loop holding the GIL is one core whatever the thread count: compare with the CPU cores above.",
		qs:   []q{{expr: `process:gpulens_process_cpu_thread_share:ratio_rate5m{` + selGPU + `,namespace=~"$namespace"}`, legend: "{{namespace}}/{{pod}} {{process_name}} ({{pid}})"}}})
	bd.ts(panel{title: "Process storage I/O", unit: "Bps", w: 8, th: steps("green"),
		desc: "Bytes per second each process on the GPU reads from (positive) and writes to (negative) storage (/proc/PID/io read_bytes, write_bytes: page-cache hits and network reads are not counted). Absent where /proc/PID/io is not readable: a process of another user than the exporter's, unless the exporter has CAP_SYS_PTRACE.",
		qs: []q{
			{expr: `rate(gpulens_process_io_read_bytes_total{` + selGPU + `,namespace=~"$namespace"}[$__rate_interval])`, legend: "{{process_name}} ({{pid}}) read"},
			{expr: `-rate(gpulens_process_io_written_bytes_total{` + selGPU + `,namespace=~"$namespace"}[$__rate_interval])`, legend: "{{process_name}} ({{pid}}) written"},
		}})
	bd.ts(panel{title: "Process host memory and threads", unit: "bytes", w: 8, th: steps("green"),
		desc: "Host memory resident for each process on the GPU (left axis) and its threads (right axis).",
		qs: []q{
			{expr: `gpulens_process_resident_memory_bytes{` + selGPU + `,namespace=~"$namespace"}`, legend: "{{process_name}} ({{pid}}) resident"},
			{expr: `gpulens_process_threads{` + selGPU + `,namespace=~"$namespace"}`, legend: "{{process_name}} ({{pid}}) threads"},
		}, units: map[string]string{"B": "none"}})

	bd.row("Power, energy and temperature")
	bd.ts(panel{title: "Power draw and limit", unit: "watt", w: 8, th: steps("green"),
		desc: "Board power and the enforced power limit. Power at the limit cuts clocks (sw_power_cap).",
		qs: []q{
			{expr: `gpulens_gpu_power_watts{` + selGPU + `}`, legend: lgGPU},
			{expr: `gpulens_gpu_power_limit_watts{` + selGPU + `}`, legend: lgGPU + " limit"},
		}})
	bd.ts(panel{title: "Energy per hour", unit: "kwatth", w: 6, th: steps("green"),
		desc: "Energy each GPU uses per hour at its mean power over each graph interval, from the energy counter (kWh per hour: the mean power in kW). The same whatever the zoom, unlike energy per graph interval, whose length the zoom sets.",
		qs:   []q{{expr: `rate(gpulens_gpu_energy_joules_total{` + selGPU + `}[$__rate_interval]) * 3600 / 3.6e6`, legend: lgGPU}}})
	bd.stat(panel{title: "Energy in the time range", unit: "kwatth", w: 2, h: 8, th: steps("green"),
		desc: "Energy the selected GPUs used over the whole selected time range, from the energy counter.",
		qs:   []q{{expr: `sum(increase(gpulens_gpu_energy_joules_total{` + selGPU + `}[$__range])) / 3.6e6`}}})
	bd.ts(panel{title: "Temperature", unit: "celsius", w: 8, th: steps("green", 75, "orange", 83, "red"),
		desc: "GPU core temperature. H100/H200 start thermal slowdown at about 83 °C.",
		qs:   []q{{expr: `gpulens_gpu_temperature_celsius{` + selGPU + `}`, legend: lgGPU}}})

	bd.row("Clocks and clock events")
	bd.ts(panel{title: "SM clock and its maximum", unit: "hertz", w: 12, th: steps("green"),
		desc: "Current SM clock against the GPU's maximum: a gap under load means throttling (see clock events).",
		qs: []q{
			{expr: `gpulens_gpu_clock_hertz{` + selGPU + `,clock="sm"}`, legend: lgGPU},
			{expr: `gpulens_gpu_max_clock_hertz{` + selGPU + `,clock="sm"}`, legend: lgGPU + " max"},
		}})
	bd.ts(panel{title: "Active clock events", unit: "bool_on_off", w: 12, th: steps("green", 1, "orange"),
		desc: "Clock-event (throttle) reasons active per GPU: idle, power cap, thermal and hardware slowdowns, power brake, sync boost, application or display clock settings.",
		qs:   []q{{expr: `gpulens_gpu_clock_event_active{` + selGPU + `} == 1`, legend: lgGPU + " {{reason}}"}}})

	probeRows(bd)

	bd.row("Processes")
	bd.table(panel{title: "Processes on the GPU", unit: "bytes", w: 24, h: 9, th: steps("green"),
		desc: "One row per process on the selected GPUs (node, GPU, PID) with its pod, namespace and container: memory used (Value #A), SM utilisation (Value #B) and its share of the GPU's busy time (Value #C; both empty for a process on a MIG instance: NVML has no per-process samples in MIG mode), the CPU cores it uses (Value #D) and the bytes per second it reads from storage (Value #E; empty where /proc/PID/io is not readable).",
		qs: []q{
			{expr: by(processLabels, `gpulens_process_memory_used_bytes{`+selGPU+`,namespace=~"$namespace"}`)},
			{expr: by(processLabels, `gpulens_process_sm_utilization_ratio{`+selGPU+`,namespace=~"$namespace"}`)},
			{expr: by(processLabels, `gpulens_process_gpu_time_share_ratio{`+selGPU+`,namespace=~"$namespace"}`)},
			{expr: by(processLabels, `sum without (mode) (rate(gpulens_process_cpu_seconds_total{`+selGPU+`,namespace=~"$namespace"}[$__rate_interval]))`)},
			{expr: by(processLabels, `rate(gpulens_process_io_read_bytes_total{`+selGPU+`,namespace=~"$namespace"}[$__rate_interval])`)},
		}, units: map[string]string{"B": "percentunit", "C": "percentunit", "D": "none", "E": "Bps"}})
	bd.ts(panel{title: "Process memory", unit: "bytes", w: 12, th: steps("green"),
		desc: "GPU memory per process; a process whose line only climbs leaks.",
		qs:   []q{{expr: `gpulens_process_memory_used_bytes{` + selGPU + `,namespace=~"$namespace"}`, legend: "{{namespace}}/{{pod}} {{process_name}} ({{pid}})"}}})
	bd.ts(panel{title: "Process SM utilisation", unit: "percentunit", min: f(0), max: f(1), w: 12, th: steps("green"),
		desc: "SM utilisation per process over each interval, from its SM busy-seconds counter.",
		qs:   []q{{expr: `rate(gpulens_process_sm_busy_seconds_total{` + selGPU + `,namespace=~"$namespace"}[$__rate_interval])`, legend: "{{namespace}}/{{pod}} {{process_name}} ({{pid}})"}}})

	bd.row("MIG instances")
	bd.table(panel{title: "MIG instances", unit: "bytes", w: 24, h: 8, th: steps("green"),
		desc: "One row per MIG instance of the selected GPUs (node, GPU, GPU and compute instance): its UUID and profile, memory used (Value #B) and total (Value #C), and GPM SM activity (Value #D).",
		qs: []q{
			{expr: by(slices.Concat(migLabels, []string{"mig_uuid", "profile"}), `gpulens_mig_instance_info{`+selGPU+`}`)},
			{expr: by(migLabels, `gpulens_mig_memory_used_bytes{`+selGPU+`}`)},
			{expr: by(migLabels, `gpulens_mig_memory_total_bytes{`+selGPU+`}`)},
			{expr: by(migLabels, `gpulens_mig_sm_activity_ratio{`+selGPU+`}`)},
		}, units: map[string]string{"D": "percentunit"}}, "Value #A")
	bd.ts(panel{title: "MIG memory headroom", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("red", 0.05, "orange", 0.2, "green"),
		desc: "Free share of each MIG instance's memory (mig:gpulens_mig_memory_headroom:ratio). Under 5% for 10 minutes fires GpulensMIGMemoryHeadroomLow.",
		qs:   []q{{expr: `mig:gpulens_mig_memory_headroom:ratio{` + selGPU + `}`, legend: lgGPU + " GI {{gpu_instance_id}}"}}})
	bd.ts(panel{title: "MIG GPM activity", unit: "percentunit", min: f(0), max: f(1), w: 12, th: steps("green"),
		desc: "GPM SM activity, tensor activity and DRAM bandwidth of each MIG instance.",
		qs: []q{
			{expr: `gpulens_mig_sm_activity_ratio{` + selGPU + `}`, legend: lgGPU + " GI {{gpu_instance_id}} SM"},
			{expr: `gpulens_mig_tensor_activity_ratio{` + selGPU + `}`, legend: lgGPU + " GI {{gpu_instance_id}} tensor"},
			{expr: `gpulens_mig_dram_bandwidth_utilization_ratio{` + selGPU + `}`, legend: lgGPU + " GI {{gpu_instance_id}} DRAM"},
		}})
	return bd.build()
}
