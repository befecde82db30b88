package observe

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/promtext"
	"github.com/gpulens/gpulens/loadgen/report"
)

// Normalised series names (report.ServerMetrics.Series).
const (
	KVCacheUsage        = "kv_cache_usage_ratio"
	RequestsRunning     = "requests_running"
	RequestsWaiting     = "requests_waiting"
	Preemptions         = "preemptions"
	PrefixCacheHitRatio = "prefix_cache_hit_ratio"
)

// Server flavours (report.ServerMetrics.Flavor).
const (
	VLLM   = "vllm"
	SGLang = "sglang"
	TGI    = "tgi"
)

// How a series combines the label sets of its source (engines, data-
// parallel ranks) and what it is.
const (
	gaugeSum  = iota // counts: summed over label sets
	gaugeMean        // ratios: averaged over label sets
	counter          // summed over label sets; Increase over the run
)

// source is a server metric a normalised series comes from.
type source struct {
	name, flavor string
}

// mapping lists, per normalised series, its sources in order of
// preference: the first one a scrape has is used.
var mapping = []struct {
	name    string
	kind    int
	sources []source
}{
	{KVCacheUsage, gaugeMean, []source{{"vllm:kv_cache_usage_perc", VLLM}, {"vllm:gpu_cache_usage_perc", VLLM}, {"sglang:token_usage", SGLang}}},
	{RequestsRunning, gaugeSum, []source{{"vllm:num_requests_running", VLLM}, {"sglang:num_running_reqs", SGLang}, {"tgi_batch_current_size", TGI}}},
	{RequestsWaiting, gaugeSum, []source{{"vllm:num_requests_waiting", VLLM}, {"sglang:num_queue_reqs", SGLang}, {"tgi_queue_size", TGI}}},
	{Preemptions, counter, []source{{"vllm:num_preemptions_total", VLLM}, {"sglang:num_retracted_requests_total", SGLang}}},
	// SGLang's hit rate is a gauge; vLLM's comes from two counters
	// (prefixHits).
	{PrefixCacheHitRatio, gaugeMean, []source{{"sglang:cache_hit_rate", SGLang}}},
}

// prefixHits are vLLM's prefix-cache counters (in tokens), newest names
// first: hits and queries.
var prefixHits = [][2]string{
	{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"},
	{"vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total"},
}

// scrape is what one scrape found.
type scrape struct {
	at     time.Time
	values map[string]float64 // by normalised name; counters cumulative
	// hits and queries are vLLM's prefix-cache counters, when present.
	hits, queries float64
	hitsOK        bool
	hitsSource    string
}

// Recorder accumulates scrapes. It is not safe for concurrent use.
type Recorder struct {
	scrapes []scrape
	sources map[string]string // normalised name → the server metric it came from
	flavor  string
	failed  int
	lastErr error
}

// NewRecorder returns an empty recorder.
func NewRecorder() *Recorder { return &Recorder{sources: map[string]string{}} }

// Add parses one scrape in the Prometheus text format, taken at at. A
// scrape that cannot be parsed is counted as failed and returned.
func (r *Recorder) Add(at time.Time, body io.Reader) error {
	fams, err := promtext.Parse(body)
	if err != nil {
		err = fmt.Errorf("parsing metrics: %w", err)
		r.Fail(err)
		return err
	}
	s := scrape{at: at, values: map[string]float64{}}
	for _, m := range mapping {
		for _, src := range m.sources {
			f := family(fams, src.name)
			if f == nil || len(f.GetMetric()) == 0 {
				continue
			}
			// NaN and ±Inf samples are no reading (promtext.Value):
			// left out of the sum and the mean, not counted as 0.
			v, n := 0.0, 0
			for _, mt := range f.GetMetric() {
				if x, ok := promtext.Value(mt); ok {
					v += x
					n++
				}
			}
			if n == 0 {
				continue
			}
			if m.kind == gaugeMean {
				v /= float64(n)
			}
			s.values[m.name] = v
			r.sources[m.name] = src.name
			if r.flavor == "" {
				r.flavor = src.flavor
			}
			break
		}
	}
	for _, p := range prefixHits {
		h, q := family(fams, p[0]), family(fams, p[1])
		if h == nil || q == nil {
			continue
		}
		for _, mt := range h.GetMetric() {
			v, _ := promtext.Value(mt)
			s.hits += v
		}
		for _, mt := range q.GetMetric() {
			v, _ := promtext.Value(mt)
			s.queries += v
		}
		s.hitsOK, s.hitsSource = true, p[0]+" / "+p[1]
		if r.flavor == "" {
			r.flavor = VLLM
		}
		break
	}
	if r.flavor == "" {
		r.flavor = flavorOf(fams)
	}
	r.scrapes = append(r.scrapes, s)
	return nil
}

// Fail counts a scrape that failed.
func (r *Recorder) Fail(err error) {
	r.failed++
	r.lastErr = err
}

// family returns the family called name, also when a counter's family is
// named without its "_total" suffix (OpenMetrics style).
func family(fams map[string]*dto.MetricFamily, name string) *dto.MetricFamily {
	if f := fams[name]; f != nil {
		return f
	}
	if base, ok := strings.CutSuffix(name, "_total"); ok {
		return fams[base]
	}
	return nil
}

// flavorOf recognises a server by its metric name prefixes.
func flavorOf(fams map[string]*dto.MetricFamily) string {
	for name := range fams {
		switch {
		case strings.HasPrefix(name, "vllm:"):
			return VLLM
		case strings.HasPrefix(name, "sglang:"):
			return SGLang
		case strings.HasPrefix(name, "tgi_"):
			return TGI
		}
	}
	return ""
}

// Summary summarises the scrapes: url is recorded as given (without
// credentials: the caller's job), the timeline's offsets count from
// runStart. Gauges get Mean, Max and Last over the scrapes that had them;
// counters their Increase over the run (a counter that went down was
// reset: its new value counts as increase) and Last; the prefix-cache hit
// ratio from vLLM's counters is the run's hits over its queries (Mean), the
// largest and the last ratio of one interval between scrapes (Max, Last).
func (r *Recorder) Summary(url string, runStart time.Time) *report.ServerMetrics {
	sm := &report.ServerMetrics{URL: url, Flavor: r.flavor, Samples: len(r.scrapes)}
	if r.failed > 0 {
		sm.Error = fmt.Sprintf("%d of %d scrapes failed; last: %v", r.failed, r.failed+len(r.scrapes), r.lastErr)
	}
	series := map[string]report.SeriesSummary{}
	for _, m := range mapping {
		var vals []float64
		for _, s := range r.scrapes {
			if v, ok := s.values[m.name]; ok {
				vals = append(vals, v)
			}
		}
		if len(vals) == 0 {
			continue
		}
		ss := report.SeriesSummary{Source: r.sources[m.name], Last: vals[len(vals)-1], Max: slices.Max(vals)}
		if m.kind == counter {
			ss.Increase = increase(vals)
		} else {
			sum := 0.0
			for _, v := range vals {
				sum += v
			}
			ss.Mean = sum / float64(len(vals))
		}
		series[m.name] = ss
	}
	ratios := r.intervalRatios()
	if _, sglang := series[PrefixCacheHitRatio]; !sglang {
		var hits, queries []float64
		src := ""
		for _, s := range r.scrapes {
			if s.hitsOK {
				hits, queries, src = append(hits, s.hits), append(queries, s.queries), s.hitsSource
			}
		}
		if q := increase(queries); q > 0 {
			ss := report.SeriesSummary{Source: src, Mean: increase(hits) / q}
			var last float64
			for _, v := range ratios {
				if !math.IsNaN(v) {
					ss.Max, last = max(ss.Max, v), v
				}
			}
			ss.Last = last
			series[PrefixCacheHitRatio] = ss
		}
	}
	if len(series) > 0 {
		sm.Series = series
	}
	for i, s := range r.scrapes {
		v := make(map[string]float64, len(s.values)+1)
		for k, x := range s.values {
			v[k] = x
		}
		if !math.IsNaN(ratios[i]) {
			v[PrefixCacheHitRatio] = ratios[i]
		}
		sm.Timeline = append(sm.Timeline, report.ServerSample{OffsetSeconds: s.at.Sub(runStart).Seconds(), Values: v})
	}
	return sm
}

// intervalRatios returns, per scrape, vLLM's prefix-cache hit ratio over
// the interval since the previous scrape, or NaN when there is none (no
// counters, the first scrape, no queries in the interval).
func (r *Recorder) intervalRatios() []float64 {
	out := make([]float64, len(r.scrapes))
	for i := range out {
		out[i] = math.NaN()
		if i == 0 {
			continue
		}
		a, b := r.scrapes[i-1], r.scrapes[i]
		if !a.hitsOK || !b.hitsOK {
			continue
		}
		dq := delta(a.queries, b.queries)
		if dq > 0 {
			out[i] = math.Min(delta(a.hits, b.hits)/dq, 1)
		}
	}
	return out
}

// increase is a counter's increase over vals, counting a drop as a reset.
func increase(vals []float64) float64 {
	inc := 0.0
	for i := 1; i < len(vals); i++ {
		inc += delta(vals[i-1], vals[i])
	}
	return inc
}

func delta(prev, cur float64) float64 {
	if cur < prev {
		return cur // reset
	}
	return cur - prev
}
