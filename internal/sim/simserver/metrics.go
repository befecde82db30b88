package simserver

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Bucket boundaries copied from vLLM's Prometheus metrics, so dashboards and
// client-side histograms built for vLLM work unchanged.
var (
	ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBuckets = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
		0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
		20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
)

// Fault names used in the gpulens_sim_faults_injected_total metric.
const (
	faultError      = "error"
	faultQueueFull  = "queue_full"
	faultDisconnect = "disconnect"
	faultStall      = "stall"
)

// metrics are the server's vLLM-style metrics, on a private registry. The
// histograms and counters are observed by the scheduler goroutine.
type metrics struct {
	reg *prometheus.Registry

	ttft, itl, tpot, e2e prometheus.Observer
	promptTokens         prometheus.Counter
	generationTokens     prometheus.Counter
	success              *prometheus.CounterVec
	running, waiting     prometheus.Gauge
	gpuCache, kvCache    prometheus.Gauge
	faults               *prometheus.CounterVec

	// The prefix cache (prefixcache.go) and preemptions.
	prefixQueries, prefixHits, preemptions prometheus.Counter

	// The GPU tie (GPUTie): the slowdown and what it comes from.
	slowdown       prometheus.Gauge
	neighbourUtil  prometheus.Gauge
	gpuReads       *prometheus.CounterVec
	gpuReadSuccess prometheus.Gauge
	probeSpans     prometheus.Counter
	probeRequests  *prometheus.CounterVec
}

func newMetrics(model string) *metrics {
	labels := prometheus.Labels{"model_name": model}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets, ConstLabels: labels})
	}
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help, ConstLabels: labels})
	}
	m := &metrics{reg: prometheus.NewRegistry()}
	ttft := hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttftBuckets)
	itl := hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itlBuckets)
	tpot := hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds (pre-0.8 name of the inter-token latency).", itlBuckets)
	e2e := hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2eBuckets)
	m.ttft, m.itl, m.tpot, m.e2e = ttft, itl, tpot, e2e
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:prompt_tokens_total", Help: "Number of prefill tokens processed.", ConstLabels: labels})
	m.generationTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "vllm:generation_tokens_total", Help: "Number of generation tokens processed.", ConstLabels: labels})
	m.success = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "vllm:request_success_total", Help: "Count of successfully processed requests.", ConstLabels: labels}, []string{"finished_reason"})
	m.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
	m.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
	m.gpuCache = gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage (pre-0.10 name).")
	m.kvCache = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
	m.faults = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpulens_sim_faults_injected_total", Help: "Faults injected by the simulated server, by kind."}, []string{"fault"})
	m.slowdown = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpulens_sim_slowdown_ratio",
		Help: "Factor the simulated GPU's step and token delays are stretched by: 1 alone on the GPU, 1 + the neighbours' SM utilisation when tied to a GPU (--sim.gpu.exporter-url), 1 more while the exporter's probe holds it."})
	m.neighbourUtil = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpulens_sim_gpu_neighbour_sm_utilization_ratio",
		Help: "SM utilisation of the other processes on the GPU the server is tied to, summed, as the exporter last reported it (0 when not tied; tied to several GPUs, the highest GPU's)."})
	m.gpuReads = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpulens_sim_gpu_reads_total",
		Help: "Reads of the exporter's view of the tied GPU, by result (ok, error)."}, []string{"result"})
	m.gpuReadSuccess = prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpulens_sim_gpu_last_read_success_timestamp_seconds",
		Help: "When the exporter's view of the tied GPU was last read successfully (0: never)."})
	m.probeSpans = prometheus.NewCounter(prometheus.CounterOpts{Name: "gpulens_sim_gpu_probe_runs_total",
		Help: "Runs of the exporter's probe on the tied GPU that slowed the server (by one step per step, for the run's GPU time)."})
	m.probeRequests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpulens_sim_probe_slowed_requests_total",
		Help: "Requests the exporter's probe on the tied GPU slowed (an engine step that began while the probe held a tied GPU ran while the request waited or ran, or a token delay of its was stretched by it), counted at their first token (until=\"first_token\") and at their last (until=\"end\")."}, []string{"until"})
	for _, r := range []string{"ok", "error"} {
		m.gpuReads.WithLabelValues(r)
	}
	for _, u := range []string{"first_token", "end"} {
		m.probeRequests.WithLabelValues(u)
	}
	for _, r := range []string{"stop", "length"} {
		m.success.WithLabelValues(r)
	}
	for _, f := range []string{faultError, faultQueueFull, faultDisconnect, faultStall} {
		m.faults.WithLabelValues(f)
	}
	m.prefixQueries, m.prefixHits, m.preemptions = prefixMetrics(labels)
	m.reg.MustRegister(m.prefixQueries, m.prefixHits, m.preemptions)
	m.reg.MustRegister(ttft, itl, tpot, e2e, m.promptTokens, m.generationTokens, m.success,
		m.running, m.waiting, m.gpuCache, m.kvCache, m.faults,
		m.slowdown, m.neighbourUtil, m.gpuReads, m.gpuReadSuccess, m.probeSpans, m.probeRequests)
	return m
}

// probed counts a request the probe slowed, at its first token and at its
// last (done).
func (m *metrics) probed(first, done bool) {
	if first {
		m.probeRequests.WithLabelValues("first_token").Inc()
	}
	if done {
		m.probeRequests.WithLabelValues("end").Inc()
	}
}

// token records one produced token of r at now.
func (m *metrics) token(r *request, now time.Time, done bool) {
	m.generationTokens.Inc()
	if r.produced == 1 {
		m.ttft.Observe(now.Sub(r.arrival).Seconds())
	} else {
		gap := now.Sub(r.lastToken).Seconds()
		m.itl.Observe(gap)
		m.tpot.Observe(gap)
	}
	if done {
		m.e2e.Observe(now.Sub(r.arrival).Seconds())
		reason := "stop"
		if r.lengthCapped {
			reason = "length"
		}
		m.success.WithLabelValues(reason).Inc()
	}
}

// state records the scheduler's queue and cache state.
func (m *metrics) state(running, waiting, kvUsed, kvCapacity int) {
	m.running.Set(float64(running))
	m.waiting.Set(float64(waiting))
	usage := 0.0
	if kvCapacity > 0 {
		usage = float64(kvUsed) / float64(kvCapacity)
	}
	m.gpuCache.Set(usage)
	m.kvCache.Set(usage)
}
