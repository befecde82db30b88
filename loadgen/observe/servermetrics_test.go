package observe

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

// vllmText is a vLLM exposition with two engines.
func vllmText(run0, run1, waiting, kv0, kv1, preempt, queries, hits float64) string {
	return fmt.Sprintf(`# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} %g
vllm:num_requests_running{engine="1",model_name="m"} %g
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} %g
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} %g
vllm:kv_cache_usage_perc{engine="1",model_name="m"} %g
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="m"} 0.99
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} %g
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} %g
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} %g
`, run0, run1, waiting, kv0, kv1, preempt, queries, hits)
}

func near(t *testing.T, name string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12 {
		t.Errorf("%s = %v, want %v", name, got, want)
	}
}

func TestRecorderVLLM(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	r := NewRecorder()
	for i, text := range []string{
		vllmText(1, 2, 0, 0.1, 0.3, 5, 1000, 100),
		vllmText(3, 3, 4, 0.5, 0.7, 8, 3000, 1100),
		vllmText(0, 0, 0, 0.2, 0.2, 2, 4000, 1100), // the preemption counter was reset
	} {
		if err := r.Add(start.Add(time.Duration(i)*time.Second-10*time.Millisecond), strings.NewReader(text)); err != nil {
			t.Fatal(err)
		}
	}
	r.Fail(errors.New("connection refused"))
	if err := r.Add(start, strings.NewReader("garbage{")); err == nil {
		t.Fatal("garbage parsed")
	}
	sm := r.Summary("http://h:8000/metrics", start)
	if sm.URL != "http://h:8000/metrics" || sm.Flavor != VLLM || sm.Samples != 3 {
		t.Errorf("url %q flavor %q samples %d", sm.URL, sm.Flavor, sm.Samples)
	}
	if !strings.HasPrefix(sm.Error, "2 of 5 scrapes failed; last: parsing metrics:") {
		t.Errorf("error %q", sm.Error)
	}
	for _, c := range []struct {
		name                      string
		source                    string
		mean, max, last, increase float64
	}{
		// Running requests summed over the engines: 3, 6, 0.
		{RequestsRunning, "vllm:num_requests_running", 3, 6, 0, 0},
		{RequestsWaiting, "vllm:num_requests_waiting", 4.0 / 3, 4, 0, 0},
		// KV usage averaged over the engines: 0.2, 0.6, 0.2 (the newer
		// name wins over gpu_cache_usage_perc).
		{KVCacheUsage, "vllm:kv_cache_usage_perc", 1.0 / 3, 0.6, 0.2, 0},
		// 5 → 8 → reset to 2: 3 + 2.
		{Preemptions, "vllm:num_preemptions_total", 0, 8, 2, 5},
		// 1000 of 3000 queried tokens hit over the run; the intervals
		// had 1000/2000 and 0/1000.
		{PrefixCacheHitRatio, "vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total", 1.0 / 3, 0.5, 0, 0},
	} {
		s, ok := sm.Series[c.name]
		if !ok {
			t.Errorf("no %s", c.name)
			continue
		}
		if s.Source != c.source {
			t.Errorf("%s source %q, want %q", c.name, s.Source, c.source)
		}
		near(t, c.name+" mean", s.Mean, c.mean)
		near(t, c.name+" max", s.Max, c.max)
		near(t, c.name+" last", s.Last, c.last)
		near(t, c.name+" increase", s.Increase, c.increase)
	}
	if len(sm.Timeline) != 3 {
		t.Fatalf("timeline %+v", sm.Timeline)
	}
	near(t, "first offset", sm.Timeline[0].OffsetSeconds, -0.01)
	near(t, "last offset", sm.Timeline[2].OffsetSeconds, 1.99)
	if _, ok := sm.Timeline[0].Values[PrefixCacheHitRatio]; ok {
		t.Error("the first scrape has no interval, hence no hit ratio")
	}
	near(t, "second scrape hit ratio", sm.Timeline[1].Values[PrefixCacheHitRatio], 0.5)
	near(t, "second scrape running", sm.Timeline[1].Values[RequestsRunning], 6)
}

func TestRecorderOtherServers(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	for _, tc := range []struct {
		name, flavor string
		texts        []string
		want         map[string]report.SeriesSummary
	}{
		{"sglang", SGLang, []string{
			"# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} 0.2\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 3\n" +
				"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 1\n# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name=\"m\"} 0.25\n" +
				"# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{model_name=\"m\"} 1\n",
			"# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name=\"m\"} 0.6\n# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name=\"m\"} 5\n" +
				"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name=\"m\"} 0\n# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name=\"m\"} 0.75\n" +
				"# TYPE sglang:num_retracted_requests_total counter\nsglang:num_retracted_requests_total{model_name=\"m\"} 4\n",
		}, map[string]report.SeriesSummary{
			KVCacheUsage:        {Source: "sglang:token_usage", Mean: 0.4, Max: 0.6, Last: 0.6},
			RequestsRunning:     {Source: "sglang:num_running_reqs", Mean: 4, Max: 5, Last: 5},
			RequestsWaiting:     {Source: "sglang:num_queue_reqs", Mean: 0.5, Max: 1, Last: 0},
			PrefixCacheHitRatio: {Source: "sglang:cache_hit_rate", Mean: 0.5, Max: 0.75, Last: 0.75},
			Preemptions:         {Source: "sglang:num_retracted_requests_total", Max: 4, Last: 4, Increase: 3},
		}},
		{"tgi", TGI, []string{
			"# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 8\n# TYPE tgi_queue_size gauge\ntgi_queue_size 2\n",
			"# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 4\n# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n",
		}, map[string]report.SeriesSummary{
			RequestsRunning: {Source: "tgi_batch_current_size", Mean: 6, Max: 8, Last: 4},
			RequestsWaiting: {Source: "tgi_queue_size", Mean: 1, Max: 2, Last: 0},
		}},
		{"unknown", "", []string{"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewRecorder()
			for i, text := range tc.texts {
				if err := r.Add(start.Add(time.Duration(i)*time.Second), strings.NewReader(text)); err != nil {
					t.Fatal(err)
				}
			}
			sm := r.Summary("u", start)
			if sm.Flavor != tc.flavor || len(sm.Series) != len(tc.want) || sm.Error != "" {
				t.Fatalf("flavor %q, series %+v, error %q", sm.Flavor, sm.Series, sm.Error)
			}
			for name, w := range tc.want {
				g := sm.Series[name]
				if g.Source != w.Source {
					t.Errorf("%s source %q", name, g.Source)
				}
				near(t, name+" mean", g.Mean, w.Mean)
				near(t, name+" max", g.Max, w.Max)
				near(t, name+" last", g.Last, w.Last)
				near(t, name+" increase", g.Increase, w.Increase)
			}
		})
	}
}

func TestScraper(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := float64(n.Add(1))
		fmt.Fprint(w, vllmText(k, 0, 0, 0.1*k, 0.1*k, 0, 100*k, 50*k))
	}))
	defer srv.Close()
	// An interval of an hour: the scrape before the run and the one at
	// its end, no other.
	u := strings.Replace(srv.URL, "http://", "http://user:secret@", 1) + "/metrics"
	s, err := Start(context.Background(), Config{URL: u, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if n.Load() != 1 {
		t.Fatalf("Start returned after %d scrapes, want 1", n.Load())
	}
	sm := s.Stop(time.Now())
	if sm.Samples != 2 || sm.Error != "" || sm.URL != srv.URL+"/metrics" {
		t.Fatalf("samples %d, error %q, url %q", sm.Samples, sm.Error, sm.URL)
	}
	near(t, "hit ratio", sm.Series[PrefixCacheHitRatio].Mean, 0.5)
	near(t, "running last", sm.Series[RequestsRunning].Last, 2)

	// A server that answers 500: every scrape fails, the run goes on.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", 500) }))
	defer bad.Close()
	ctx, cancel := context.WithCancel(context.Background())
	s, err = Start(ctx, Config{URL: bad.URL + "/metrics", Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cancel() // an interrupted run still gets its last scrape
	sm = s.Stop(time.Now())
	if want := "2 of 2 scrapes failed; last: GET " + bad.URL + "/metrics: HTTP 500"; sm.Samples != 0 || sm.Error != want || sm.Series != nil {
		t.Errorf("samples %d, error %q, want %q", sm.Samples, sm.Error, want)
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "ftp://h/metrics"}, `ServerMetricsURL "ftp://h/metrics": must be an http:// or https:// URL`},
		{Config{URL: "http:///metrics"}, "must be an http:// or https:// URL"},
		{Config{URL: "http://h/metrics", Interval: 10 * time.Millisecond}, "ServerMetricsInterval must be at least 100ms, got 10ms"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: err = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	c := Config{URL: "http://h/metrics", Interval: 2 * time.Second}
	if err := c.Validate(); err != nil || c.Timeout != 2*time.Second || c.Client == nil {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	c = Config{URL: "http://h/metrics"}
	if err := c.Validate(); err != nil || c.Interval != time.Second || c.Timeout != time.Second {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	for base, want := range map[string]string{
		"http://h:8000/v1":     "http://h:8000/metrics",
		"http://h:8000/v1/":    "http://h:8000/metrics",
		"https://h/api/v1":     "https://h/api/metrics",
		"http://h:8080":        "http://h:8080/metrics",
		"http://u:p@h:8000/v1": "http://u:p@h:8000/metrics",
	} {
		if got := DefaultURL(base); got != want {
			t.Errorf("DefaultURL(%q) = %q, want %q", base, got, want)
		}
	}
	if got := Redact("http://u:p@h:8000/metrics"); got != "http://h:8000/metrics" {
		t.Errorf("Redact = %q", got)
	}
}

// A NaN sample is no reading (promtext.Value, as the exporter's poller
// reads it): an engine whose KV usage is NaN is left out of the mean, not
// averaged in as 0; a series whose every sample is NaN is absent.
func TestRecorderNaNIsNoReading(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	r := NewRecorder()
	if err := r.Add(start, strings.NewReader(vllmText(1, math.NaN(), math.NaN(), 0.6, math.NaN(), 0, 0, 0))); err != nil {
		t.Fatal(err)
	}
	sm := r.Summary("u", start)
	near(t, "kv mean", sm.Series[KVCacheUsage].Mean, 0.6)
	near(t, "running", sm.Series[RequestsRunning].Last, 1)
	if s, ok := sm.Series[RequestsWaiting]; ok {
		t.Errorf("waiting from a NaN sample only: %+v", s)
	}
}
