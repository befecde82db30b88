package promcheck

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpulens/gpulens/internal/testenv"
)

func TestSubstitute(t *testing.T) {
	tests := []struct{ in, want string }{
		{`rate(x{gpu=~"$gpu"}[$__rate_interval])`, `rate(x{gpu=~"x"}[5m])`},
		{`sum(avg_over_time(x[$__range])) * $__range_s / 3600`, `sum(avg_over_time(x[1h])) * 3600 / 3600`},
		{`x{uid="${datasource}",a="${a:regex}"}[${__interval}]`, `x{uid="x",a="x"}[1m]`},
		{`x[$__range_ms]`, `x[3600000]`},
	}
	for _, tc := range tests {
		if got := Substitute(tc.in); got != tc.want {
			t.Errorf("Substitute(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMetricNames(t *testing.T) {
	got, err := MetricNames(`sum by (gpu) (rate(b_total{gpu=~"$gpu"}[$__rate_interval])) / on () group_left () a:rec:ratio + {__name__="c"} or b_total`)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "a:rec:ratio,b_total,c" {
		t.Errorf("MetricNames = %q, want [a:rec:ratio b_total c]", got)
	}
}

// The checker must fail on a misspelt metric, a syntax error and a selector
// it cannot resolve, and pass a correct expression.
func TestCheckReportsBadExpressions(t *testing.T) {
	k := Known{}
	if err := k.AddExposition(strings.NewReader(`# HELP gpulens_gpu_up Up.
# TYPE gpulens_gpu_up gauge
gpulens_gpu_up{gpu="0"} 1
# HELP gpulens_sampler_duration_seconds Cycle.
# TYPE gpulens_sampler_duration_seconds histogram
gpulens_sampler_duration_seconds_bucket{le="+Inf"} 1
gpulens_sampler_duration_seconds_sum 0.1
gpulens_sampler_duration_seconds_count 1
`)); err != nil {
		t.Fatal(err)
	}
	k.Add(PrometheusSeries...)
	tests := []struct {
		expr, want string
	}{
		{`sum(gpulens_gpu_up{instance=~"$instance"})`, ""},
		{`histogram_quantile(0.99, sum by (le) (rate(gpulens_sampler_duration_seconds_bucket[$__rate_interval])))`, ""},
		{`up{job="gpulens-exporter"} == 0`, ""},
		{`sum(gpulens_gpu_upp)`, "unknown metric gpulens_gpu_upp (did you mean gpulens_gpu_up?)"},
		{`rate(gpulens_sampler_duration_seconds_buckets[5m])`, "unknown metric gpulens_sampler_duration_seconds_buckets (did you mean gpulens_sampler_duration_seconds_bucket?)"},
		{`gpulens_sampler_duration_seconds`, "unknown metric gpulens_sampler_duration_seconds (did you mean"},
		{`totally_different_name`, "unknown metric totally_different_name"},
		{`sum(gpulens_gpu_up{gpu="0"}`, "parsing"},
		{`{__name__=~"gpulens_.*"}`, "has no fixed metric name"},
	}
	for _, tc := range tests {
		err := k.Check(tc.expr)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("Check(%q) = %v, want no error", tc.expr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("Check(%q) = %v, want an error containing %q", tc.expr, err, tc.want)
		}
	}
}

func TestAddRuleFiles(t *testing.T) {
	k := Known{}
	if err := k.AddRuleFiles("../gpulens-recording.rules.yml"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"gpu:gpulens_gpu_memory_headroom:ratio", "gpulens:ttft_slo_objective:ratio", "target_model:gpulens_loadgen_ttft_slo_errors:ratio_rate3d"} {
		if !k[n] {
			t.Errorf("recording rule %s not found", n)
		}
	}
	if err := k.AddRuleFiles("testdata/does-not-exist.yml"); err == nil {
		t.Error("a missing rule file gave no error")
	}
}

func TestVariableQuery(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{`label_values(gpulens_gpu_info{cluster=~"$cluster"}, instance)`, `gpulens_gpu_info{cluster=~"$cluster"}`, true},
		{`label_values(gpulens_gpu_info, cluster)`, `gpulens_gpu_info`, true},
		{`label_names()`, "", false},
	}
	for _, tc := range tests {
		got, ok := VariableQuery(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("VariableQuery(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// A protobuf scrape (what Prometheus asks for when it ingests native
// histograms) adds a native histogram's own name as well as its classic
// series; a classic-only histogram adds only _bucket, _sum and _count.
func TestAddExpositionProtobufNativeHistograms(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	native := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "lat_seconds", Help: "Native and classic.", Buckets: []float64{0.1, 1},
		NativeHistogramBucketFactor: 1.1,
	})
	classic := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "old_seconds", Help: "Classic.", Buckets: []float64{0.1, 1}})
	reg.MustRegister(native, classic)
	native.Observe(0.2)
	classic.Observe(0.2)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	for _, tc := range []struct {
		accept     string
		nativeName bool
	}{{testenv.AcceptProtobuf, true}, {testenv.AcceptText, false}} {
		body, err := testenv.Scrape(context.Background(), srv.URL, tc.accept)
		if err != nil {
			t.Fatal(err)
		}
		k := Known{}
		if err := k.AddExposition(bytes.NewReader(body)); err != nil {
			t.Fatalf("Accept %s: %v", tc.accept, err)
		}
		for _, n := range []string{"lat_seconds_bucket", "lat_seconds_count", "old_seconds_bucket", "old_seconds_sum"} {
			if !k[n] {
				t.Errorf("Accept %s: %s unknown", tc.accept, n)
			}
		}
		if k["lat_seconds"] != tc.nativeName {
			t.Errorf("Accept %s: native histogram name known = %v, want %v", tc.accept, k["lat_seconds"], tc.nativeName)
		}
		if k["old_seconds"] {
			t.Errorf("Accept %s: a classic-only histogram's own name is known", tc.accept)
		}
	}
	if err := (Known{}).AddExposition(strings.NewReader("\x05\x0anot a metric family")); err == nil {
		t.Error("garbage parsed as an exposition")
	}
}
