package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

const (
	selNS      = `cluster=~"$cluster",namespace=~"$namespace"`
	selCluster = `cluster=~"$cluster"`
)

// Labels that identify a row of the cost tables.
var (
	namespaceLabels = []string{"cluster", "namespace"}
	podLabels       = []string{"cluster", "namespace", "pod"}
)

// Decimals of the currency panels: totals in cents; hourly rates to a
// tenth of a cent, as a slice of a GPU can cost a few cents an hour.
var (
	centsDecimals = f(2)
	rateDecimals  = f(3)
)

// cost is the manager's view: what the fleet spends (today, this month, by
// the month's end), who pays by allocation and by use, what idle GPUs
// waste, GPU-hours by model, and unit costs per model endpoint. The model
// and its formulas: docs/cost.md; the rules: alerts/gpulens-cost.rules.yml.
func cost() (dashboard.Dashboard, error) {
	bd := newBoard("gpulens-cost", "gpulens / Cost",
		"What the GPU fleet spends (today, this month, forecast for the month), who pays for it by allocation (the GPUs and MIG slices pods hold) and by use (their share of the GPUs' busy time), what idle GPUs waste, GPU-hours by model, and what inference costs per 1,000 requests and per million tokens. GPU prices come from the exporters (--cost.* flags) or the price table of alerts/gpulens-cost.rules.yml; the model is in docs/cost.md.",
		varCluster(), varNamespace(), varTarget(), varModel())

	bd.row("Spend")
	bd.stat(panel{title: "Spend today", unit: "currencyUSD", w: 4, th: steps("green"), decimals: centsDecimals,
		desc: "USD spent on GPUs since midnight UTC: the recording rule cluster:gpulens_cost_today:usd adds each minute's share of the fleet's hourly spend.",
		qs:   []q{{expr: `sum(cluster:gpulens_cost_today:usd{` + selCluster + `})`}}})
	bd.stat(panel{title: "Spend this month", unit: "currencyUSD", w: 4, th: steps("green"), decimals: centsDecimals,
		desc: "USD spent on GPUs since the 1st of the month (UTC), accumulated minute by minute (cluster:gpulens_cost_month_to_date:usd). Minutes when Prometheus did not evaluate its rules are not counted.",
		qs:   []q{{expr: `sum(cluster:gpulens_cost_month_to_date:usd{` + selCluster + `})`}}})
	bd.stat(panel{title: "Month-end forecast", unit: "currencyUSD", w: 4, th: steps("green"), decimals: centsDecimals,
		desc: "The month so far plus the last 24 hours' mean hourly spend until the month ends (cluster:gpulens_cost_month_forecast:usd).",
		qs:   []q{{expr: `sum(cluster:gpulens_cost_month_forecast:usd{` + selCluster + `})`}}})
	bd.stat(panel{title: "Spend per hour", unit: "currencyUSD", w: 4, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour the fleet costs now: the sum of every GPU's price, busy or idle (cluster:gpulens_gpus_cost:usd_per_hour).",
		qs:   []q{{expr: `sum(cluster:gpulens_gpus_cost:usd_per_hour{` + selCluster + `})`}}})
	bd.stat(panel{title: "Idle spend per hour", unit: "currencyUSD", w: 4, th: steps("green", 0.01, "orange"), decimals: rateDecimals,
		desc: "USD per hour paid for GPU time no process uses: each GPU's price less its processes' use costs (gpu:gpulens_gpu_idle_cost:usd_per_hour), summed.",
		qs:   []q{{expr: `sum(gpu:gpulens_gpu_idle_cost:usd_per_hour{` + selCluster + `})`}}})
	bd.stat(panel{title: "GPUs without a price", unit: "none", w: 4, th: steps("green", 1, "orange"),
		desc: "GPUs the exporters report that have no price (no --cost.* flag on their exporter and no entry in the price table): they are in no cost figure. Add their model to the price table (docs/cost.md#rules-only-prices).",
		qs:   []q{{expr: orZero(`sum(cluster:gpulens_unpriced_gpus:count{` + selCluster + `})`)}}})
	bd.ts(panel{title: "Spend rate: used and idle", unit: "currencyUSD", w: 24, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour, stacked: what processes used (their share of the GPUs' busy time) and the idle remainder; together the fleet's spend. The load generator's billed cost per target is shown for comparison (its own --cost.* price).",
		qs: []q{
			{expr: `sum(namespace:gpulens_use_cost:usd_per_hour{` + selCluster + `})`, legend: "used"},
			{expr: `sum(gpu:gpulens_gpu_idle_cost:usd_per_hour{` + selCluster + `})`, legend: "idle"},
			{expr: `3600 * target_model:gpulens_loadgen_cost_usd:rate5m{` + selLoad + `}`, legend: "load generator " + lgLG},
		}}, stacked)

	bd.row("Who pays: by allocation and by use")
	bd.table(panel{title: "Cost per namespace: allocation and use", unit: "currencyUSD", w: 24, h: 9, th: steps("green"), decimals: rateDecimals,
		desc: "One row per namespace. Allocation (Value #A, USD per hour): the price of the GPUs and MIG slices its pods hold, a GPU shared by several pods split evenly. Use (#B): its processes' share of the GPUs' busy time times the GPUs' prices. Spent this month by allocation (#C), forecast for the month (#D), GPUs held (#E). Allocation minus use is what the namespace holds but leaves idle.",
		qs: []q{
			{expr: by(namespaceLabels, `namespace:gpulens_allocated_gpus_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_use_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_cost_month_to_date:usd{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_cost_month_forecast:usd{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_allocated_gpus:count{`+selNS+`}`)},
		},
		units: map[string]string{"E": "none"}})
	bd.ts(panel{title: "Month-end forecast and budget by namespace", unit: "currencyUSD", w: 24, th: steps("green"), decimals: centsDecimals,
		desc: "Each namespace's forecast for the month by allocation (namespace:gpulens_cost_month_forecast:usd) and its monthly budget (namespace:gpulens_cost_budget:usd, a recording rule per namespace): a forecast above the budget for an hour fires GpulensNamespaceCostForecastOverBudget.",
		qs: []q{
			{expr: `namespace:gpulens_cost_month_forecast:usd{` + selNS + `}`, legend: "forecast {{namespace}}"},
			{expr: `namespace:gpulens_cost_budget:usd{namespace=~"$namespace"}`, legend: "budget {{namespace}}"},
		}})
	bd.ts(panel{title: "Cost per namespace by allocation", unit: "currencyUSD", w: 12, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour of the GPUs and MIG slices each namespace's pods hold (namespace:gpulens_allocated_gpus_cost:usd_per_hour), busy or not: what it is billed.",
		qs:   []q{{expr: `namespace:gpulens_allocated_gpus_cost:usd_per_hour{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)
	bd.ts(panel{title: "Cost per namespace by use", unit: "currencyUSD", w: 12, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour of the GPU time each namespace's processes used (namespace:gpulens_use_cost:usd_per_hour): time shares are upper bounds where processes are time-sliced (docs/cost.md).",
		qs:   []q{{expr: `namespace:gpulens_use_cost:usd_per_hour{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)
	bd.table(panel{title: "Cost per pod: allocation and use", unit: "currencyUSD", w: 12, h: 9, th: steps("green"), decimals: rateDecimals,
		desc: "One row per pod: USD per hour by allocation (Value #A) and by use (#B). A pod with a process but no allocation (no kubelet pod-resources) has use only; one holding a GPU it does not use, allocation only.",
		qs: []q{
			{expr: by(podLabels, `pod:gpulens_allocation_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(podLabels, `pod:gpulens_use_cost:usd_per_hour{`+selNS+`}`)},
		}})
	bd.table(panel{title: "Cost per process by use", unit: "currencyUSD", w: 12, h: 9, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour of each process's share of its GPU's busy time (or of its MIG instance's activity): the 50 most expensive processes, most expensive first (process:gpulens_use_cost:usd_per_hour; choose a namespace to narrow them).",
		qs:   []q{{expr: `sort_desc(topk(50, process:gpulens_use_cost:usd_per_hour{` + selNS + `}))`}}},
		"compute_instance_id", "container")

	bd.ts(panel{title: "GPU memory held by namespace", unit: "bytes", w: 24, th: steps("green"),
		desc: "GPU memory held by each namespace's processes, in the whole cluster (namespace:gpulens_process_memory_used_bytes:sum): who holds the GPUs, busy or not.",
		qs:   []q{{expr: `namespace:gpulens_process_memory_used_bytes:sum{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)

	bd.row("Idle money")
	bd.ts(panel{title: "Idle spend by GPU model", unit: "currencyUSD", w: 8, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour paid for GPU time no process used, by GPU model (cluster_model:gpulens_gpu_idle_cost:usd_per_hour).",
		qs:   []q{{expr: `sum by (name) (cluster_model:gpulens_gpu_idle_cost:usd_per_hour{` + selCluster + `})`, legend: "{{name}}"}}},
		stacked)
	bd.ts(panel{title: "Idle spend by node", unit: "currencyUSD", w: 8, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour paid for GPU time no process used, by node (the exporter's instance).",
		qs:   []q{{expr: `sum by (cluster, instance) (gpu:gpulens_gpu_idle_cost:usd_per_hour{` + selCluster + `})`, legend: "{{instance}}"}}},
		stacked)
	bd.ts(panel{title: "Unallocated spend by node", unit: "currencyUSD", w: 8, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour of GPUs, MIG instances and MIG slices no pod holds, by node (gpu:gpulens_gpu_unallocated_cost:usd_per_hour): the allocation view's remainder.",
		qs:   []q{{expr: `sum by (cluster, instance) (gpu:gpulens_gpu_unallocated_cost:usd_per_hour{` + selCluster + `})`, legend: "{{instance}}"}}},
		stacked)
	bd.ts(panel{title: "Idle allocated GPUs by namespace", unit: "none", w: 12, th: steps("green", 1, "orange"),
		desc: "Whole GPUs allocated to a namespace's pods but under 5% busy over 5 minutes (namespace:gpulens_idle_allocated_gpus:count). An hour of this fires GpulensIdleGPUsBurningMoney.",
		qs:   []q{{expr: `namespace:gpulens_idle_allocated_gpus:count{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)
	bd.ts(panel{title: "Cost of idle allocated GPUs by namespace", unit: "currencyUSD", w: 12, th: steps("green", 0.01, "orange"), decimals: rateDecimals,
		desc: "USD per hour of the namespace's allocation on whole GPUs under 5% busy (namespace:gpulens_idle_allocated_gpus_cost:usd_per_hour).",
		qs:   []q{{expr: `namespace:gpulens_idle_allocated_gpus_cost:usd_per_hour{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)

	bd.row("What the neighbours cost: paid vs delivered")
	bd.stat(panel{title: "Neighbours' cost per hour", unit: "currencyUSD", w: 6, th: steps("green", 0.01, "orange"), decimals: rateDecimals,
		desc: "USD per hour paid for GPU time that contexts nobody can see took (cluster:gpulens_neighbour_cost:usd_per_hour): each probed GPU's price times the share of the probe's window those contexts took, the mean of the last 30 minutes' probe runs. No data without --collector.probe (docs/cost.md#what-the-neighbours-cost).",
		qs:   []q{{expr: `sum(cluster:gpulens_neighbour_cost:usd_per_hour{` + selCluster + `})`}}})
	bd.stat(panel{title: "Neighbours' cost per day", unit: "currencyUSD", w: 6, th: steps("green", 0.24, "orange"), decimals: centsDecimals,
		desc: "The same at the current rate for 24 hours (gpu:gpulens_neighbour_cost:usd_per_day, summed).",
		qs:   []q{{expr: `sum(gpu:gpulens_neighbour_cost:usd_per_day{` + selCluster + `})`}}})
	bd.table(panel{title: "Paid vs delivered by namespace", unit: "currencyUSD", w: 12, h: 8, th: steps("green"), decimals: rateDecimals,
		desc: "One row per namespace holding probed whole GPUs. Paid (Value #A, USD per hour): their allocation. Delivered (#B): the same less the share invisible neighbours took (namespace:gpulens_delivered_gpus_cost:usd_per_hour). The neighbours' cost per hour (#C) and per day (#D). A namespace whose GPUs are not probed has no row.",
		qs: []q{
			{expr: by(namespaceLabels, `namespace:gpulens_delivered_gpus_cost:usd_per_hour{`+selNS+`} + namespace:gpulens_neighbour_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_delivered_gpus_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_neighbour_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_neighbour_cost:usd_per_day{`+selNS+`}`)},
		}})
	bd.ts(panel{title: "Neighbours' cost by GPU", unit: "currencyUSD", w: 12, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour each probed GPU (or MIG instance) loses to contexts nobody can see (gpu:gpulens_neighbour_cost:usd_per_hour).",
		qs:   []q{{expr: `gpu:gpulens_neighbour_cost:usd_per_hour{` + selCluster + `}`, legend: "{{instance}} GPU {{gpu}}"}}},
		stacked)
	bd.ts(panel{title: "GPU time taken by invisible neighbours", unit: "percentunit", w: 12, th: steps("green", 0.2, "orange"), min: f(0), max: f(1),
		desc: "Share of each probed GPU's time taken by contexts that are neither this tenant's visible processes nor the exporter, the mean of the last 30 minutes' probe runs (gpu:gpulens_probe_unexplained_stolen_time_ratio:avg_over_time30m); above 0.2 for 15 minutes fires GpulensGPUStolenTimeHigh.",
		qs:   []q{{expr: `gpu:gpulens_probe_unexplained_stolen_time_ratio:avg_over_time30m{` + selCluster + `}`, legend: "{{instance}} GPU {{gpu}}"}}})

	bd.row("GPU-hours and prices")
	bd.stat(panel{title: "GPU-hours by model in the time range", unit: "h", w: 8, th: steps("green"), decimals: f(1),
		desc: "GPUs the exporters report, by model, times the hours of the selected time range (the mean count over the range).",
		qs:   []q{{expr: `sum by (name) (avg_over_time(cluster_model:gpulens_gpus:count{` + selCluster + `}[$__range])) * $__range_s / 3600`, legend: "{{name}}"}}})
	bd.stat(panel{title: "Fleet spend in the time range", unit: "currencyUSD", w: 8, th: steps("green"), decimals: centsDecimals,
		desc: "The fleet's mean hourly spend over the selected time range times its hours.",
		qs:   []q{{expr: `sum(avg_over_time(cluster:gpulens_gpus_cost:usd_per_hour{` + selCluster + `}[$__range])) * $__range_s / 3600`}}})
	bd.stat(panel{title: "Load generator spend in the time range", unit: "currencyUSD", w: 8, th: steps("green"), decimals: centsDecimals,
		desc: "Cost the load generator billed for its runs in the selected time range (its --cost.* flags).",
		qs:   []q{{expr: `sum(increase(gpulens_loadgen_cost_usd_total{` + selLoad + `}[$__range]))`}}})
	bd.ts(panel{title: "Spend per hour by GPU model", unit: "currencyUSD", w: 12, th: steps("green"), decimals: rateDecimals,
		desc: "USD per hour of each GPU model's GPUs (cluster_model:gpulens_gpus_cost:usd_per_hour).",
		qs:   []q{{expr: `sum by (name) (cluster_model:gpulens_gpus_cost:usd_per_hour{` + selCluster + `})`, legend: "{{name}}"}}},
		stacked)
	bd.ts(panel{title: "GPUs by model", unit: "none", w: 12, th: steps("green"),
		desc: "GPUs the exporters report, by model (cluster_model:gpulens_gpus:count); of all models, how many are reported and how many readable (a GPU that is down is still billed).",
		qs: []q{
			{expr: `sum by (name) (cluster_model:gpulens_gpus:count{` + selCluster + `})`, legend: "{{name}}"},
			{expr: `sum(cluster:gpulens_gpus:count{` + selCluster + `})`, legend: "reported (all models)"},
			{expr: `sum(cluster:gpulens_gpus_up:sum{` + selCluster + `})`, legend: "up (all models)"},
		}})

	bd.row("Unit costs per model endpoint")
	bd.stat(panel{title: "Cost per request", unit: "currencyUSD", w: 8, th: steps("green", 0.01, "red"), decimals: f(7),
		desc: "GPU cost per successful request over 5 minutes (load generator's billed cost / successes), to a ten-millionth of a dollar: a request often costs hundredths of a cent. Above gpulens:cost_per_request_budget:usd for 15 minutes fires GpulensCostPerRequestOverBudget.",
		qs:   []q{{expr: `target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.stat(panel{title: "Cost per 1,000 requests", unit: "currencyUSD", w: 8, th: steps("green", 10, "red"), decimals: f(4),
		desc: "GPU cost of 1,000 successful requests (samples) at the last 5 minutes' rate, per model endpoint.",
		qs:   []q{{expr: `1000 * target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.stat(panel{title: "Cost per million output tokens", unit: "currencyUSD", w: 8, th: steps("green"), decimals: centsDecimals,
		desc: "GPU cost of one million output tokens at the last 5 minutes' rate, per model endpoint.",
		qs:   []q{{expr: `target_model:gpulens_loadgen_cost_per_million_output_tokens_usd:rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.ts(panel{title: "Unit costs over time", unit: "currencyUSD", w: 24, th: steps("green"), decimals: f(4),
		desc: "Cost per 1,000 requests (left) and per million output tokens (right axis) over time, per model endpoint.",
		qs: []q{
			{expr: `1000 * target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: "per 1,000 requests " + lgLG},
			{expr: `target_model:gpulens_loadgen_cost_per_million_output_tokens_usd:rate5m{` + selLoad + `}`, legend: "per 1M output tokens " + lgLG},
		}, units: map[string]string{"B": "currencyUSD"}})
	return bd.build()
}
