package dashboards

// The probe's panels (gpulens-exporter --collector.probe): what each GPU
// delivers to its tenant, measured from the inside, beside what NVML says.

// probeLabels identify a probed device: a whole GPU, or a MIG instance
// (its own uuid under its parent's gpu).
var probeLabels = []string{"cluster", "instance", "gpu", "uuid"}

// lgProbe names a probed device: a whole GPU, or a MIG instance (its own
// uuid under its parent's gpu).
const lgProbe = lgGPU + " {{uuid}}"

// probeRows adds the "Is this GPU mine?" row to the GPU detail dashboard.
func probeRows(bd *board) {
	bd.row("Is this GPU mine?")
	bd.ts(panel{title: "Stolen time", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.05, "orange", 0.2, "red"),
		desc: "Share of the probe's stolen-time window in which its kernel, holding every SM, did not run: GPU time another context took (time-slicing, vGPU scheduling), which NVML does not show from inside a VM or container. ~0 on a GPU that is yours alone. A 30-minute mean over 20% for 15 minutes fires GpulensGPUStolenTimeHigh. Needs the exporter's --collector.probe.",
		qs:   []q{{expr: `gpulens_probe_stolen_time_ratio{` + selGPU + `}`, legend: lgProbe}}})
	bd.ts(panel{title: "NVML's view of sharing", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.25, "orange", 0.5, "red"),
		desc: "What NVML sees on the same GPUs: the contention ratio (share of busy time with two or more processes active, left axis) and the processes with SM activity (right axis). Stolen time with no second process here means a neighbour NVML cannot see (another VM or container).",
		qs: []q{
			{expr: `gpu:gpulens_gpu_contention:ratio_rate5m{` + selGPU + `}`, legend: lgGPU + " contention"},
			{expr: `gpulens_gpu_active_processes{` + selGPU + `}`, legend: lgGPU + " active processes"},
		}, units: map[string]string{"B": "none"}})
	bd.ts(panel{title: "Device memory bandwidth against its 7-day baseline", unit: "Bps", w: 8, th: steps("green"),
		desc: "Device memory bandwidth of the probe's copy kernel (bytes read plus written per second) and its 7-day 90th percentile (gpu:gpulens_probe_device_copy_bandwidth_bytes_per_second:p90_over_time7d). Under 70% of the baseline for 30 minutes, without stolen time, fires GpulensGPUProbeBandwidthDegraded.",
		qs: []q{
			{expr: `gpulens_probe_device_copy_bandwidth_bytes_per_second{` + selGPU + `}`, legend: lgProbe},
			{expr: `gpu:gpulens_probe_device_copy_bandwidth_bytes_per_second:p90_over_time7d{` + selGPU + `}`, legend: lgProbe + " 7-day p90"},
		}})
	bd.ts(panel{title: "Host-device bandwidth against its 7-day baseline", unit: "Bps", w: 8, th: steps("green"),
		desc: "Pinned host-to-device (H2D) and device-to-host (D2H) copy bandwidth over PCIe or NVLink-C2C, and their 7-day 90th percentiles. A drop without stolen time points at the link (trained down to a lower generation or width) or the host.",
		qs: []q{
			{expr: `gpulens_probe_h2d_bandwidth_bytes_per_second{` + selGPU + `}`, legend: lgProbe + " H2D"},
			{expr: `gpulens_probe_d2h_bandwidth_bytes_per_second{` + selGPU + `}`, legend: lgProbe + " D2H"},
			{expr: `gpu:gpulens_probe_h2d_bandwidth_bytes_per_second:p90_over_time7d{` + selGPU + `}`, legend: lgProbe + " H2D 7-day p90"},
			{expr: `gpu:gpulens_probe_d2h_bandwidth_bytes_per_second:p90_over_time7d{` + selGPU + `}`, legend: lgProbe + " D2H 7-day p90"},
		}})
	bd.ts(panel{title: "Time slice of the neighbour", unit: "s", w: 8, th: steps("green"),
		desc: "Length of the gaps the stolen-time kernel saw (median and longest per probe): the time slice the other context got each time. Your kernels' latency can grow by this much. 0 without gaps.",
		qs: []q{
			{expr: `gpulens_probe_stolen_gap_seconds{` + selGPU + `,stat="median"}`, legend: lgProbe + " median"},
			{expr: `gpulens_probe_stolen_gap_seconds{` + selGPU + `,stat="max"}`, legend: lgProbe + " max"},
		}})
	bd.ts(panel{title: "FLOP/s against the 7-day baseline", unit: "flops", w: 12, th: steps("green"),
		desc: "FP32 FMA and tensor-core (mma.sync f16/bf16, f32 accumulate) throughput the probe measured, with their 7-day 90th percentiles (legend: 7-day p90). Under 70% of the baseline for 30 minutes, without stolen time or a thermal slowdown, fires GpulensGPUProbeComputeDegraded.",
		qs: []q{
			{expr: `gpulens_probe_fp32_flop_per_second{` + selGPU + `}`, legend: lgProbe + " FP32"},
			{expr: `gpulens_probe_tensor_flop_per_second{` + selGPU + `}`, legend: lgProbe + " {{dtype}} tensor"},
			{expr: `gpu:gpulens_probe_fp32_flop_per_second:p90_over_time7d{` + selGPU + `}`, legend: lgProbe + " FP32 7-day p90"},
			{expr: `gpu_dtype:gpulens_probe_tensor_flop_per_second:p90_over_time7d{` + selGPU + `}`, legend: lgProbe + " {{dtype}} tensor 7-day p90"},
		}})
	bd.ts(panel{title: "Kernel launch latency", unit: "s", w: 6, th: steps("green"),
		desc: "Round trip of an empty kernel (launch and synchronise) in each probe: median and 99th percentile. A few microseconds on an idle GPU; a busy or time-sliced GPU makes every launch wait.",
		qs:   []q{{expr: `gpulens_probe_launch_latency_seconds{` + selGPU + `}`, legend: lgProbe + " {{stat}}"}}})
	bd.ts(panel{title: "Probe health", unit: "s", w: 6, th: steps("green", 900, "orange", 1800, "red"),
		desc: "Age of each device's probe figures (time since its last successful probe, left axis; about one --collector.probe.interval when healthy) and gpulens_probe_up (right axis: 0 when the last probe failed as a whole). Persistent failures fire GpulensGPUProbeFailing.",
		qs: []q{
			{expr: `time() - gpulens_probe_last_success_timestamp_seconds{` + selGPU + `}`, legend: lgProbe + " age"},
			{expr: `gpulens_probe_up{` + selGPU + `}`, legend: lgProbe + " up"},
		}, units: map[string]string{"B": "bool_on_off"}})
}

// probeFleetRows adds the tenant's view to the sharing dashboard: stolen
// time per GPU, against the NVML view.
func probeFleetRows(bd *board) {
	bd.row("Is this GPU mine? The tenant's view (probe)")
	bd.table(panel{title: "Stolen time and figures against baseline per GPU", unit: "percentunit", w: 12, h: 9,
		th:   steps("green", 0.2, "orange", 0.5, "red"),
		desc: "One row per probed GPU or MIG instance (node, GPU, its UUID), from the last probe: stolen time (Value #A), device memory bandwidth and FP32 FLOP/s as a share of their 7-day 90th percentile (Value #B, #C; under 70% is degraded), and the age of the figures (Value #D). Needs the exporter's --collector.probe. Under MIG every instance has a row: CUDA shows a process one MIG instance, so the exporter measures the others in probe children of its own (--collector.probe.mig-children; off, they count in gpulens_probe_skipped_total{reason=\"mig_instance_not_visible\"}); a GPU in a compute mode other than DEFAULT or short of free memory is left alone (gpulens_probe_skipped_total) and has no row.",
		qs: []q{
			{expr: by(probeLabels, `gpulens_probe_stolen_time_ratio{`+selGPU+`}`)},
			{expr: by(probeLabels, `gpulens_probe_device_copy_bandwidth_bytes_per_second{`+selGPU+`} / gpu:gpulens_probe_device_copy_bandwidth_bytes_per_second:p90_over_time7d{`+selGPU+`}`)},
			{expr: by(probeLabels, `gpulens_probe_fp32_flop_per_second{`+selGPU+`} / gpu:gpulens_probe_fp32_flop_per_second:p90_over_time7d{`+selGPU+`}`)},
			{expr: by(probeLabels, `time() - gpulens_probe_last_success_timestamp_seconds{`+selGPU+`}`)},
		}, units: map[string]string{"D": "s"}})
	bd.ts(panel{title: "Stolen time against NVML contention", unit: "percentunit", min: f(0), max: f(1), w: 12, h: 9,
		th:   steps("green", 0.2, "orange", 0.5, "red"),
		desc: "The probe's stolen time per GPU with NVML's contention ratio for the same GPUs. Both high: a neighbour on this host, named in the tables above. Stolen time alone: a neighbour NVML cannot see (another VM or container on a time-sliced or vGPU host).",
		qs: []q{
			{expr: `gpulens_probe_stolen_time_ratio{` + selGPU + `}`, legend: "stolen " + lgProbe},
			{expr: `gpu:gpulens_gpu_contention:ratio_rate5m{` + selGPU + `}`, legend: "contention " + lgGPU},
		}})
}
