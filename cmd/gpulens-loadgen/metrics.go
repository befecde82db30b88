// Package metrics exposes a run's live measurements as Prometheus metrics
// on a private registry. Histogram buckets match vLLM's server-side
// histograms so client and server curves overlay.

package main

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/loadgen/report"
)

// vLLM's bucket boundaries (vllm/engine/metrics.py, v0.8+).
var (
	TTFTBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	ITLBuckets  = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	E2EBuckets  = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	TPSBuckets  = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000}
	LagBuckets  = []float64{0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1}
)

// Labels are the constant, low-cardinality labels of every metric.
type Labels struct {
	Target, Model, Scenario string
}

// Info are the labels of gpulens_loadgen_run_info.
type Info struct {
	RunID, Version, Endpoint, Mode string
}

// Metrics records live run measurements. It implements runner.Observer.
type Metrics struct {
	ttft, itl, tpot, e2e, tps, lag prometheus.Histogram
	answerTTFT                     prometheus.Histogram
	requests                       *prometheus.CounterVec
	tokens                         *prometheus.CounterVec
	reasoningTokens                prometheus.Counter
	inFlight                       prometheus.Gauge

	mu        sync.Mutex
	prices    report.CostSettings
	start     time.Time
	now       func() time.Time
	completed float64
	outTokens float64
}

// New registers the metrics on reg. now is the clock (time.Now when nil);
// billing starts at the first call to Start.
func New(reg prometheus.Registerer, l Labels, info Info, prices report.CostSettings, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	cl := prometheus.Labels{"target": l.Target, "model": l.Model, "scenario": l.Scenario}
	hist := func(name, help string, buckets []float64) prometheus.Histogram {
		return prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "gpulens", Subsystem: "loadgen", Name: name, Help: help, ConstLabels: cl, Buckets: buckets,
			NativeHistogramBucketFactor: 1.025, NativeHistogramMaxBucketNumber: 160, NativeHistogramMinResetDuration: time.Hour,
		})
	}
	m := &Metrics{
		ttft: hist("time_to_first_token_seconds", "Time from the intended send time to the first generated token of any kind, reasoning included.", TTFTBuckets),
		answerTTFT: hist("time_to_first_answer_token_seconds",
			"Time from the intended send time to the first answer token (not reasoning): the TTFT a reader of the answer sees; equal to TTFT without reasoning.", TTFTBuckets),
		itl:  hist("inter_token_latency_seconds", "Token-level latency between consecutive output tokens.", ITLBuckets),
		tpot: hist("time_per_output_token_seconds", "Per request (E2E - TTFT) / (output tokens - 1).", ITLBuckets),
		e2e:  hist("request_duration_seconds", "Time from the intended send time to the last byte of a successful request.", E2EBuckets),
		tps:  hist("output_tokens_per_second", "Per request output tokens divided by its duration from send.", TPSBuckets),
		lag:  hist("schedule_lag_seconds", "Actual minus intended send time.", LagBuckets),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpulens", Subsystem: "loadgen", Name: "requests_total", ConstLabels: cl,
			Help: "Finished requests by outcome (success or an error class); warmup requests included.",
		}, []string{"outcome"}),
		tokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "gpulens", Subsystem: "loadgen", Name: "tokens_total", ConstLabels: cl,
			Help: "Input and output tokens of successful requests.",
		}, []string{"kind"}),
		reasoningTokens: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "gpulens", Subsystem: "loadgen", Name: "reasoning_tokens_total", ConstLabels: cl,
			Help: "Output tokens of successful requests that were reasoning (part of tokens_total{kind=\"output\"}).",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "gpulens", Subsystem: "loadgen", Name: "in_flight_requests", ConstLabels: cl,
			Help: "Requests sent and not yet finished.",
		}),
		prices: prices, now: now,
	}
	for _, o := range append([]string{"success"}, report.ErrorClasses...) {
		m.requests.WithLabelValues(o)
	}
	m.tokens.WithLabelValues("input")
	m.tokens.WithLabelValues("output")
	runInfo := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "gpulens", Subsystem: "loadgen", Name: "run_info", ConstLabels: prometheus.Labels{
			"target": l.Target, "model": l.Model, "scenario": l.Scenario, "run_id": info.RunID,
			"version": info.Version, "endpoint": info.Endpoint, "mode": info.Mode},
		Help: "Always 1: describes the current run.",
	})
	runInfo.Set(1)
	costTotal := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "gpulens", Subsystem: "loadgen", Name: "cost_usd_total", ConstLabels: cl,
		Help: "GPU cost billed so far: hourly price x GPUs x (elapsed hours + overhead hours).",
	}, func() float64 { t, _, _ := m.cost(); return t })
	perReq := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "gpulens", Subsystem: "loadgen", Name: "cost_per_request_usd", ConstLabels: cl,
		Help: "Cost so far divided by successful requests (NaN before the first).",
	}, func() float64 { _, r, _ := m.cost(); return r })
	perMOut := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "gpulens", Subsystem: "loadgen", Name: "cost_per_million_output_tokens_usd", ConstLabels: cl,
		Help: "Cost so far divided by output tokens, times one million (NaN before the first).",
	}, func() float64 { _, _, o := m.cost(); return o })
	reg.MustRegister(m.ttft, m.answerTTFT, m.itl, m.tpot, m.e2e, m.tps, m.lag, m.requests, m.tokens, m.reasoningTokens, m.inFlight, runInfo,
		costTotal, perReq, perMOut)
	return m
}

// Start starts the billing clock.
func (m *Metrics) Start() {
	m.mu.Lock()
	m.start = m.now()
	m.mu.Unlock()
}

func (m *Metrics) cost() (total, perRequest, perMillionOut float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	hours := 0.0
	if !m.start.IsZero() {
		hours = m.now().Sub(m.start).Hours()
	}
	total = m.prices.Total(hours)
	perRequest, perMillionOut = math.NaN(), math.NaN()
	if m.completed > 0 {
		perRequest = total / m.completed
	}
	if m.outTokens > 0 {
		perMillionOut = total / m.outTokens * 1e6
	}
	return total, perRequest, perMillionOut
}

// Started implements runner.Observer.
func (m *Metrics) Started() { m.inFlight.Inc() }

// Finished implements runner.Observer.
func (m *Metrics) Finished(r *report.Record, warmup bool) {
	m.inFlight.Dec()
	if r.Interrupted() {
		return
	}
	m.lag.Observe((r.Sent - r.Intended).Seconds())
	if !r.OK() {
		m.requests.WithLabelValues(r.ErrorClass).Inc()
		return
	}
	m.requests.WithLabelValues("success").Inc()
	m.tokens.WithLabelValues("input").Add(float64(r.PromptTokens))
	m.tokens.WithLabelValues("output").Add(float64(r.OutputTokens))
	m.reasoningTokens.Add(float64(r.ReasoningTokens))
	if !warmup {
		m.mu.Lock()
		m.completed++
		m.outTokens += float64(r.OutputTokens)
		m.mu.Unlock()
	}
	e2e := (r.End - r.Intended).Seconds()
	m.e2e.Observe(e2e)
	if d := (r.End - r.Sent).Seconds(); d > 0 && r.OutputTokens > 0 {
		m.tps.Observe(float64(r.OutputTokens) / d)
	}
	if r.FirstToken != 0 {
		ttft := (r.FirstToken - r.Intended).Seconds()
		m.ttft.Observe(ttft)
		if r.OutputTokens > 1 {
			m.tpot.Observe((e2e - ttft) / float64(r.OutputTokens-1))
		}
	}
	if fa := r.FirstAnswer(); fa != 0 {
		m.answerTTFT.Observe((fa - r.Intended).Seconds())
	}
	for g := range r.InterTokenLatencies() {
		m.itl.Observe(g)
	}
}
