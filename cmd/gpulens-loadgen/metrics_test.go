package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/loadgen/report"
)

func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	clock := time.Unix(1000, 0)
	m := New(reg, Labels{Target: "http://127.0.0.1:1/v1", Model: "m", Scenario: "s"}, Info{RunID: "r1", Version: "v", Endpoint: "chat", Mode: "closed"},
		report.CostSettings{GPUHourlyUSD: 3.6, GPUs: 2}, func() time.Time { return clock })
	m.Start()
	t0 := 2 * time.Second // offsets from the run's start
	ok := report.Record{Intended: t0, Sent: t0 + time.Millisecond, FirstToken: t0 + 51*time.Millisecond, End: t0 + 71*time.Millisecond,
		PromptTokens: 10, OutputTokens: 5, ChunkOffsets: []time.Duration{50e6, 60e6, 70e6}, ChunkTokens: []int32{1, 2, 2}}
	m.Started()
	m.Finished(&ok, false)
	m.Started()
	m.Finished(&report.Record{ErrorClass: report.ErrHTTP429, Intended: t0, Sent: t0}, false)
	clock = clock.Add(10 * time.Second)

	if got := testutil.ToFloat64(m.requests.WithLabelValues("success")); got != 1 {
		t.Errorf("success = %v", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("http_429")); got != 1 {
		t.Errorf("http_429 = %v", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("output")); got != 5 {
		t.Errorf("output tokens = %v", got)
	}
	if got := testutil.ToFloat64(m.inFlight); got != 0 {
		t.Errorf("in flight = %v", got)
	}
	// 4 token-level gaps: 2×5 ms, 2×5 ms.
	if got := testutil.CollectAndCount(m.itl); got != 1 {
		t.Errorf("itl series = %d", got)
	}
	total, perReq, perMOut := m.cost()
	want := 3.6 * 2 * 10 / 3600
	if math.Abs(total-want) > 1e-12 || math.Abs(perReq-want) > 1e-12 || math.Abs(perMOut-want/5*1e6) > 1e-9 {
		t.Errorf("cost %v %v %v, want %v", total, perReq, perMOut, want)
	}
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, reg)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
	expected := `
# HELP gpulens_loadgen_time_to_first_token_seconds Time from the intended send time to the first generated token of any kind, reasoning included.
# TYPE gpulens_loadgen_time_to_first_token_seconds histogram
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected+ttftLines), "gpulens_loadgen_time_to_first_token_seconds"); err != nil {
		t.Error(err)
	}
}

const ttftLines = `gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.001"} 0
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.005"} 0
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.01"} 0
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.02"} 0
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.04"} 0
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.06"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.08"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.1"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.25"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.5"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="0.75"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="1"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="2.5"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="5"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="7.5"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="10"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="20"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="40"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="80"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="160"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="640"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="2560"} 1
gpulens_loadgen_time_to_first_token_seconds_bucket{model="m",scenario="s",target="http://127.0.0.1:1/v1",le="+Inf"} 1
gpulens_loadgen_time_to_first_token_seconds_sum{model="m",scenario="s",target="http://127.0.0.1:1/v1"} 0.051
gpulens_loadgen_time_to_first_token_seconds_count{model="m",scenario="s",target="http://127.0.0.1:1/v1"} 1
`

// TestMetricsReasoning: the time to the first answer token is the first
// token's without reasoning and the answer's with it; reasoning tokens
// are counted apart (and within the output tokens).
func TestMetricsReasoning(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, Labels{Target: "t", Model: "m"}, Info{}, report.CostSettings{GPUs: 1}, nil)
	plain := report.Record{Intended: 0, Sent: 0, FirstToken: 50 * time.Millisecond, End: 80 * time.Millisecond, OutputTokens: 2,
		ChunkOffsets: []time.Duration{50e6, 80e6}}
	thinking := report.Record{Intended: 0, Sent: 0, FirstToken: 20 * time.Millisecond, FirstAnswerToken: 300 * time.Millisecond, End: 320 * time.Millisecond,
		OutputTokens: 30, ReasoningTokens: 28, ChunkOffsets: []time.Duration{20e6, 300e6, 320e6}, ChunkTokens: []int32{1, 28, 1},
		ChunkReasoningTokens: []int32{1, 27, 0}}
	for _, r := range []*report.Record{&plain, &thinking} {
		m.Started()
		m.Finished(r, false)
	}
	if got := testutil.ToFloat64(m.reasoningTokens); got != 28 {
		t.Errorf("reasoning tokens = %v, want 28", got)
	}
	if got := testutil.ToFloat64(m.tokens.WithLabelValues("output")); got != 32 {
		t.Errorf("output tokens = %v, want 32", got)
	}
	var mf dto.Metric
	if err := m.answerTTFT.Write(&mf); err != nil {
		t.Fatal(err)
	}
	if h := mf.GetHistogram(); h.GetSampleCount() != 2 || math.Abs(h.GetSampleSum()-0.35) > 1e-12 {
		t.Errorf("answer TTFT: %d samples, sum %v; want 2 and 0.35 (50 ms, 300 ms)", h.GetSampleCount(), h.GetSampleSum())
	}
	mf.Reset()
	if err := m.ttft.Write(&mf); err != nil {
		t.Fatal(err)
	}
	if h := mf.GetHistogram(); math.Abs(h.GetSampleSum()-0.07) > 1e-12 {
		t.Errorf("TTFT sum %v, want 0.07 (50 ms, 20 ms)", h.GetSampleSum())
	}
}

func mustGather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
