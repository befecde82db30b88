package dashboards

import "github.com/grafana/grafana-foundation-sdk/go/dashboard"

// latencyPanel plots the recorded p50, p90 and p99 of a load-generator
// histogram.
func (bd *board) latencyPanel(title, metric, desc string, th *dashboard.ThresholdsConfigBuilder) {
	var qs []q
	for _, p := range []string{"p50", "p90", "p99"} {
		qs = append(qs, q{expr: "target_model:" + metric + ":" + p + "_rate5m{" + selLoad + "}", legend: p + " " + lgLG})
	}
	bd.ts(panel{title: title, unit: "s", w: 12, th: th, desc: desc, qs: qs})
}

// inference shows the load generator's view of an inference server.
func inference() (dashboard.Dashboard, error) {
	bd := newBoard("gpulens-inference", "gpulens / Inference performance",
		"Latency percentiles, throughput, goodput, errors, in-flight requests and schedule lag measured by gpulens-loadgen, per target and model.",
		varTarget(), varModel())

	bd.row("Latency")
	bd.latencyPanel("Time to first token", "gpulens_loadgen_time_to_first_token_seconds",
		"TTFT percentiles over 5 minutes, from the intended send time (corrects for coordinated omission). The SLO counts requests over 1 s.",
		steps("green", 1, "red"))
	bd.latencyPanel("Inter-token latency", "gpulens_loadgen_inter_token_latency_seconds",
		"Token-level gaps between consecutive output tokens, percentiles over 5 minutes.",
		steps("green", 0.1, "orange", 0.25, "red"))
	bd.latencyPanel("Time per output token", "gpulens_loadgen_time_per_output_token_seconds",
		"Per request (E2E - TTFT) / (output tokens - 1), percentiles over 5 minutes.",
		steps("green", 0.1, "orange", 0.25, "red"))
	bd.latencyPanel("End-to-end latency", "gpulens_loadgen_request_duration_seconds",
		"From the intended send time to the last byte of successful requests, percentiles over 5 minutes.",
		steps("green", 30, "orange", 60, "red"))

	bd.row("Throughput and goodput")
	bd.ts(panel{title: "Requests per second by outcome", unit: "reqps", w: 8, th: steps("green"),
		desc: "Finished requests per second by outcome, over 5 minutes: successes, and each error class while it occurs (classes at 0 stay out of the legend).",
		qs: []q{{expr: `target_model_outcome:gpulens_loadgen_requests:rate5m{` + selLoad + `,outcome="success"} or target_model_outcome:gpulens_loadgen_requests:rate5m{` + selLoad + `,outcome!="success"} > 0`,
			legend: "{{outcome}} " + lgLG}}})
	bd.ts(panel{title: "Tokens per second", unit: "short", w: 8, th: steps("green"),
		desc: "Input and output tokens of successful requests per second, over 5 minutes.",
		qs:   []q{{expr: `target_model_kind:gpulens_loadgen_tokens:rate5m{` + selLoad + `}`, legend: "{{kind}} " + lgLG}}})
	bd.ts(panel{title: "Goodput", unit: "reqps", w: 8, th: steps("green"),
		desc: "Requests per second whose first token came within the 1 s TTFT objective (right axis: their share of all finished requests, failures included).",
		qs: []q{
			{expr: `target_model:gpulens_loadgen_goodput_requests:rate5m{` + selLoad + `}`, legend: "goodput " + lgLG},
			{expr: `target_model:gpulens_loadgen_goodput_requests:rate5m{` + selLoad + `} / target_model:gpulens_loadgen_requests:rate5m{` + selLoad + `}`, legend: "goodput ratio " + lgLG},
		}, units: map[string]string{"B": "percentunit"}})

	bd.row("Errors, load and SLO")
	bd.ts(panel{title: "Errors by class", unit: "reqps", w: 8, th: steps("green", 0.01, "red"),
		desc: "Failed requests per second by class while it occurs (timeout, connect, http_429, http_4xx, http_5xx, stream_broken, cancelled_at_end, parse), and all errors together (0 when none fails).",
		qs: []q{
			{expr: `sum by (target, model, outcome) (rate(gpulens_loadgen_requests_total{` + selLoad + `,outcome!="success"}[$__rate_interval])) > 0`, legend: "{{outcome}} " + lgLG},
			{expr: `sum by (target, model) (rate(gpulens_loadgen_requests_total{` + selLoad + `,outcome!="success"}[$__rate_interval]))`, legend: "all errors " + lgLG},
		}})
	bd.ts(panel{title: "Error ratio", unit: "percentunit", min: f(0), w: 8, th: steps("green", 0.01, "orange", 0.05, "red"),
		desc: "Failed share of finished requests over 5 minutes. Above gpulens:inference_error_ratio_threshold:ratio (5%) for 5 minutes fires GpulensInferenceErrorRatioHigh.",
		qs:   []q{{expr: `target_model:gpulens_loadgen_request_errors:ratio_rate5m{` + selLoad + `}`, legend: lgLG}}})
	bd.ts(panel{title: "TTFT error-budget burn rate (1h)", unit: "short", min: f(0), w: 8, th: steps("green", 1, "orange", 6, "red"),
		desc: "How fast the TTFT SLO's error budget burns: the share of requests slower than 1 s over the last hour divided by the budget (1 - objective). 1 spends the budget exactly in 30 days; 14.4 pages (GpulensTTFTSLOBurnFast).",
		qs:   []q{{expr: `target_model:gpulens_loadgen_ttft_slo_errors:ratio_rate1h{` + selLoad + `} / on () group_left () (1 - gpulens:ttft_slo_objective:ratio)`, legend: lgLG}}})
	bd.ts(panel{title: "In-flight requests", unit: "none", w: 12, th: steps("green"),
		desc: "Requests sent and not yet finished (the closed-loop concurrency, or the open-loop backlog).",
		qs:   []q{{expr: `gpulens_loadgen_in_flight_requests{` + selLoad + `}`, legend: lgLG}}})
	bd.ts(panel{title: "Schedule lag", unit: "s", w: 12, th: steps("green", 0.01, "orange", 0.1, "red"),
		desc: "How late requests were sent after their scheduled time (p50 and p99 over 5 minutes). A median over 100 ms means the load generator cannot keep up (GpulensLoadBelowTarget).",
		qs: []q{
			{expr: `target_model:gpulens_loadgen_schedule_lag_seconds:p50_rate5m{` + selLoad + `}`, legend: "p50 " + lgLG},
			{expr: `target_model:gpulens_loadgen_schedule_lag_seconds:p99_rate5m{` + selLoad + `}`, legend: "p99 " + lgLG},
		}})
	return bd.build()
}
