package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

const selNS = `cluster=~"$cluster",namespace=~"$namespace"`

// namespaceLabels identify a namespace's row.
var namespaceLabels = []string{"cluster", "namespace"}

// cost is the manager's view: unit costs, spend, GPU-hours and idle GPUs.
func cost() (dashboard.Dashboard, error) {
	bd := newBoard("gpulens-cost", "gpulens / Cost",
		"What inference costs per request, per 1,000 requests and per million tokens, what the fleet spends, how many GPU-hours it used, and which namespaces pay for idle GPUs. Prices come from gpulens-loadgen --cost.* flags and the gpulens:gpu_hourly_price:usd recording rule.",
		varCluster(), varNamespace(), varTarget(), varModel())

	bd.row("Unit costs")
	bd.stat(panel{title: "Cost per request", unit: "currencyUSD", w: 8, th: steps("green", 0.01, "red"), decimals: f(7),
		desc: "GPU cost per successful request over 5 minutes (load generator's billed cost / successes), to a ten-millionth of a dollar: a request often costs hundredths of a cent. Above gpulens:cost_per_request_budget:usd for 15 minutes fires GpulensCostPerRequestOverBudget.",
		qs:   []q{{expr: `target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.stat(panel{title: "Cost per 1,000 requests", unit: "currencyUSD", w: 8, th: steps("green", 10, "red"), decimals: f(4),
		desc: "GPU cost of 1,000 successful requests (samples) at the last 5 minutes' rate.",
		qs:   []q{{expr: `1000 * target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.stat(panel{title: "Cost per million output tokens", unit: "currencyUSD", w: 8, th: steps("green"),
		desc: "GPU cost of one million output tokens at the last 5 minutes' rate.",
		qs:   []q{{expr: `target_model:gpulens_loadgen_cost_per_million_output_tokens_usd:rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.ts(panel{title: "Unit costs over time", unit: "currencyUSD", w: 24, th: steps("green"), decimals: f(4),
		desc: "Cost per 1,000 requests (left) and per million output tokens (right axis) over time.",
		qs: []q{
			{expr: `1000 * target_model:gpulens_loadgen_cost_per_request_usd:rate5m{` + selLoad + `}`, legend: "per 1,000 requests " + lgLG},
			{expr: `target_model:gpulens_loadgen_cost_per_million_output_tokens_usd:rate5m{` + selLoad + `}`, legend: "per 1M output tokens " + lgLG},
		}, units: map[string]string{"B": "currencyUSD"}})

	bd.row("Spend and GPU-hours")
	bd.stat(panel{title: "Fleet spend in the time range", unit: "currencyUSD", w: 6, th: steps("green"),
		desc: "GPU count times the hourly price (gpulens:gpu_hourly_price:usd), over the selected time range.",
		qs:   []q{{expr: `sum(avg_over_time(cluster:gpulens_gpus_cost:usd_per_hour{cluster=~"$cluster"}[$__range])) * $__range_s / 3600`}}})
	bd.stat(panel{title: "GPU-hours in the time range", unit: "h", w: 6, th: steps("green"),
		desc: "GPUs the exporters report, times the hours of the selected time range.",
		qs:   []q{{expr: `sum(avg_over_time(cluster:gpulens_gpus:count{cluster=~"$cluster"}[$__range])) * $__range_s / 3600`}}})
	bd.stat(panel{title: "Load generator spend in the time range", unit: "currencyUSD", w: 6, th: steps("green"),
		desc: "Cost the load generator billed for its runs in the selected time range (its --cost.* flags).",
		qs:   []q{{expr: `sum(increase(gpulens_loadgen_cost_usd_total{` + selLoad + `}[$__range]))`}}})
	bd.stat(panel{title: "Idle GPU spend per hour", unit: "currencyUSD", w: 6, th: steps("green", 0.01, "orange"),
		desc: "Hourly cost of GPUs allocated to pods but under 5% busy (per hour, all selected namespaces).",
		qs:   []q{{expr: `sum(namespace:gpulens_idle_allocated_gpus_cost:usd_per_hour{` + selNS + `}) or vector(0)`}}})
	bd.ts(panel{title: "Spend rate", unit: "currencyUSD", w: 24, th: steps("green"),
		desc: "USD per hour: the whole fleet at the hourly price, and each load-generator target's billed cost.",
		qs: []q{
			{expr: `sum(cluster:gpulens_gpus_cost:usd_per_hour{cluster=~"$cluster"})`, legend: "fleet (per hour)"},
			{expr: `3600 * target_model:gpulens_loadgen_cost_usd:rate5m{` + selLoad + `}`, legend: "load generator (per hour) " + lgLG},
		}})

	bd.ts(panel{title: "GPUs reported and up", unit: "none", w: 24, th: steps("green"),
		desc: "GPUs the exporters report (billed at the hourly price) and how many of them are readable.",
		qs: []q{
			{expr: `sum(cluster:gpulens_gpus:count{cluster=~"$cluster"})`, legend: "reported"},
			{expr: `sum(cluster:gpulens_gpus_up:sum{cluster=~"$cluster"})`, legend: "up"},
		}})

	bd.row("Idle GPUs by namespace")
	bd.ts(panel{title: "Idle allocated GPUs by namespace", unit: "none", w: 12, th: steps("green", 1, "orange"),
		desc: "GPUs allocated to a namespace's pods but under 5% busy over 5 minutes (namespace:gpulens_idle_allocated_gpus:count). An hour of this fires GpulensIdleGPUsBurningMoney.",
		qs:   []q{{expr: `namespace:gpulens_idle_allocated_gpus:count{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)
	bd.ts(panel{title: "Cost of idle GPUs by namespace", unit: "currencyUSD", w: 12, th: steps("green", 0.01, "orange"),
		desc: "USD per hour spent on idle allocated GPUs, by namespace.",
		qs:   []q{{expr: `namespace:gpulens_idle_allocated_gpus_cost:usd_per_hour{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)
	bd.table(panel{title: "Allocated GPU cost by namespace", unit: "currencyUSD", w: 12, th: steps("green"),
		desc: "One row per namespace: USD per hour for its allocated GPUs (Value #A) and for the idle ones among them (Value #B, 0 when none is idle).",
		qs: []q{
			{expr: by(namespaceLabels, `namespace:gpulens_allocated_gpus_cost:usd_per_hour{`+selNS+`}`)},
			{expr: by(namespaceLabels, `namespace:gpulens_idle_allocated_gpus_cost:usd_per_hour{`+selNS+`} or namespace:gpulens_allocated_gpus_cost:usd_per_hour{`+selNS+`} * 0`)},
		}})
	bd.ts(panel{title: "GPU memory held by namespace", unit: "bytes", w: 12, th: steps("green"),
		desc: "GPU memory held by each namespace's processes, in the whole cluster (namespace:gpulens_process_memory_used_bytes:sum): who holds the GPUs, busy or not.",
		qs:   []q{{expr: `namespace:gpulens_process_memory_used_bytes:sum{` + selNS + `}`, legend: "{{namespace}}"}}},
		stacked)
	return bd.build()
}
