package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// sharing shows how GPUs are shared, how much tenants contend, who the
// noisy neighbour is, and whether it hurts the inference latency measured by
// the load generator.
func sharing() (dashboard.Dashboard, error) {
	bd := newBoard("gpulens-sharing", "gpulens / Sharing and contention",
		"How each GPU is shared (exclusive, time-sliced, MPS, MIG), how often its tenants run at the same time, each tenant's share of the GPU, the noisy neighbour, the time the probe sees taken by neighbours NVML cannot show, and the load generator's TTFT on the same time axis.",
		varCluster(), varInstance(), varGPU(), varNamespace(), varTarget(), varModel())

	bd.row("How is each GPU shared?")
	bd.table(panel{title: "Sharing mode per GPU", unit: "none", w: 12, th: steps("green"),
		desc: "Current sharing mode of each GPU: exclusive (one process), time_sliced (several processes), mps, mig, or idle.",
		qs:   []q{{expr: `gpulens_gpu_sharing_mode{` + selGPU + `} == 1`}}}, "uuid", "Value")
	bd.ts(panel{title: "Active processes per GPU", unit: "none", w: 12, th: steps("green", 2, "orange"),
		desc: "Processes with SM activity in the last sampler interval. Two or more means they take turns on the GPU.",
		qs:   []q{{expr: `gpulens_gpu_active_processes{` + selGPU + `}`, legend: lgGPU}}})

	bd.row("Contention: do tenants run at the same time?")
	bd.ts(panel{title: "Contention ratio (5m)", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.25, "orange", 0.5, "red"),
		desc: "Share of each GPU's busy time during which two or more processes were active, over 5 minutes (gpu:gpulens_gpu_contention:ratio_rate5m). Over 50% for 10 minutes on a GPU serving a latency SLO fires GpulensGPUHighContention.",
		qs:   []q{{expr: `gpu:gpulens_gpu_contention:ratio_rate5m{` + selGPU + `}`, legend: lgGPU}}})
	bd.ts(panel{title: "Contended seconds per second", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.25, "orange", 0.5, "red"),
		desc: "Share of wall-clock time with two or more processes active on each GPU, over each graph interval.",
		qs:   []q{{expr: `rate(gpulens_gpu_contended_seconds_total{` + selGPU + `}[$__rate_interval])`, legend: lgGPU}}})

	bd.row("Tenants: who uses the GPU?")
	bd.ts(panel{title: "Time share per tenant", unit: "percentunit", min: f(0), max: f(1), w: 12, th: steps("green"),
		desc: "Each process's share of its GPU's busy time (sums to 1 over a busy GPU's processes): the 20 largest shares of the selected GPUs at each point, so that a fleet's view does not draw every process (choose a node or GPU to see all of its processes).",
		qs:   []q{{expr: `topk(20, gpulens_process_gpu_time_share_ratio{` + selGPU + `,namespace=~"$namespace"})`, legend: "GPU {{gpu}} {{namespace}}/{{pod}} {{process_name}} ({{pid}})"}}},
		stacked)
	bd.table(panel{title: "Noisy neighbour per shared GPU", unit: "percentunit", w: 12, th: steps("green", 0.5, "orange"),
		desc: "On each GPU with two or more active processes, the process with the largest share of the busy time (gpu:gpulens_process_gpu_time_share_ratio:top1): the likely noisy neighbour of the others.",
		qs:   []q{{expr: `gpu:gpulens_process_gpu_time_share_ratio:top1{` + selGPU + `}`}}}, "uuid", "gpu_instance_id", "compute_instance_id")
	bd.ts(panel{title: "GPU memory by namespace", unit: "bytes", w: 12, th: steps("green"),
		desc: "GPU memory held by each namespace's processes on the selected nodes and GPUs.",
		qs:   []q{{expr: `sum by (namespace) (gpulens_process_memory_used_bytes{` + selGPU + `,namespace=~"$namespace"})`, legend: "{{namespace}}"}}},
		stacked)
	bd.ts(panel{title: "MIG instance saturation", unit: "percentunit", min: f(0), max: f(1), w: 12,
		th:   steps("green", 0.8, "orange", 0.95, "red"),
		desc: "How close each MIG instance runs to its own limits: the largest of its SM activity, DRAM bandwidth and memory used share. MIG tenants cannot slow each other; a saturated instance needs a bigger profile.",
		qs:   []q{{expr: `gpulens_mig_saturation_ratio{` + selGPU + `}`, legend: lgGPU + " GI {{gpu_instance_id}}"}}})

	probeFleetRows(bd)

	bd.row("Is the neighbour hurting latency and cost?")
	bd.ts(panel{title: "TTFT p99 against contention", unit: "s", w: 12, h: 10, th: steps("green", 1, "red"),
		desc: "The load generator's 99th-percentile time to first token (left axis) with the contention ratio of the selected GPUs (right axis). TTFT rising with contention ties a slowdown to a neighbour; check the noisy-neighbour table for who it is.",
		qs: []q{
			{expr: `target_model:gpulens_loadgen_time_to_first_token_seconds:p99_rate5m{` + selLoad + `}`, legend: "TTFT p99 " + lgLG},
			{expr: `gpu:gpulens_gpu_contention:ratio_rate5m{` + selGPU + `}`, legend: "contention " + lgGPU},
		}, units: map[string]string{"B": "percentunit"}})
	bd.ts(panel{title: "Cost per 1,000 requests against contention", unit: "currencyUSD", w: 12, h: 10, th: steps("green"),
		desc: "What 1,000 successful requests cost over 5 minutes (left axis: the load generator's billed GPU time divided by its successes) with the contention ratio of the selected GPUs (right axis). A GPU that serves fewer requests per hour because a neighbour takes its time costs more per request; at a fixed request rate the cost stays and the latency pays instead.",
		qs: []q{
			{expr: `1000 * target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: "per 1,000 requests " + lgLG},
			{expr: `gpu:gpulens_gpu_contention:ratio_rate5m{` + selGPU + `}`, legend: "contention " + lgGPU},
		}, units: map[string]string{"B": "percentunit"}})
	return bd.build()
}
