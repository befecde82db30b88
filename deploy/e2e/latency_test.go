package e2e

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// percentileTolerance is how far a latency percentile Prometheus computes
// from the load generator's native histograms (buckets 2^(1/32) ≈ 2.2 % wide,
// interpolated on a log scale) may be from the exact percentile of the
// report's per-request records.
const percentileTolerance = 0.05

// latencyHistogram is one latency histogram of the load generator and how
// the report measures the same thing.
type latencyHistogram struct {
	short, metric string
	values        func(r *report.Record) []float64
	summary       func(s *report.Summary) report.Dist
}

var latencyHistograms = []latencyHistogram{
	{"TTFT", "gpulens_loadgen_time_to_first_token_seconds", func(r *report.Record) []float64 {
		if r.FirstToken == 0 {
			return nil
		}
		return []float64{(r.FirstToken - r.Intended).Seconds()}
	}, func(s *report.Summary) report.Dist { return s.TTFT }},
	{"ITL", "gpulens_loadgen_inter_token_latency_seconds", func(r *report.Record) []float64 {
		return slices.Collect(r.InterTokenLatencies())
	}, func(s *report.Summary) report.Dist { return s.ITL }},
	{"TPOT", "gpulens_loadgen_time_per_output_token_seconds", func(r *report.Record) []float64 {
		if r.FirstToken == 0 || r.OutputTokens < 2 {
			return nil
		}
		return []float64{((r.End - r.Intended) - (r.FirstToken - r.Intended)).Seconds() / float64(r.OutputTokens-1)}
	}, func(s *report.Summary) report.Dist { return s.TPOT }},
	{"E2E", "gpulens_loadgen_request_duration_seconds", func(r *report.Record) []float64 {
		return []float64{(r.End - r.Intended).Seconds()}
	}, func(s *report.Summary) report.Dist { return s.E2E }},
}

var quantiles = []struct {
	q    float64
	name string
	of   func(d report.Dist) float64
}{
	{0.5, "p50", func(d report.Dist) float64 { return d.P50 }},
	{0.9, "p90", func(d report.Dist) float64 { return d.P90 }},
	{0.99, "p99", func(d report.Dist) float64 { return d.P99 }},
}

// comparePercentiles checks the p50, p90 and p99 of TTFT, ITL, TPOT and E2E
// that Prometheus reads from the load generator's native histograms against
// the exact percentiles of the report, twice:
//
//   - the whole run: histogram_quantile over the last scrape of each
//     histogram (every request of the report, as compareTTFT checked)
//     against the report's summary;
//   - what the dashboards show: the shipped recording rules
//     (target_model:…:pNN_rate5m), evaluated after the last scrape. Their
//     rate() counts what the histograms gained after Prometheus's first
//     scrape of the load generator, so they are compared with the
//     percentiles of the requests that finished after it (the report's
//     requests in order of their end, less as many as the first scrape had
//     already counted).
//
// Both must be within percentileTolerance, or, in a sparse tail, between
// the observations around the quantile's rank (inRankBracket). The classic buckets' estimates
// are logged beside them, for comparison. The load generator lingers with
// its final counts, scraped by Prometheus: compareTTFT has waited for them.
func comparePercentiles(ctx context.Context, t *testing.T, api promClient, run report.Run) {
	t.Helper()
	const sel = `{job="gpulens-loadgen"}`
	one := func(q string) float64 {
		t.Helper()
		res, err := api.query(ctx, q)
		if err != nil || len(res) != 1 {
			t.Fatalf("%s = %v, %v; want one sample", q, res, err)
		}
		return res[0].Value
	}

	// The successful requests in the order the load generator observed
	// them, and how many the first scrape already held.
	var ok []*report.Record
	for i := range run.Requests {
		if r := &run.Requests[i]; r.OK() {
			ok = append(ok, r)
		}
	}
	slices.SortStableFunc(ok, func(a, b *report.Record) int { return cmp.Compare(a.End, b.End) })
	e2eCount := `gpulens_loadgen_request_duration_seconds_count` + sel
	first := int(one(`min_over_time(` + e2eCount + `[10m])`))
	if first < 0 || first >= len(ok) {
		t.Fatalf("the first scrape held %d requests of %d", first, len(ok))
	}
	// The recording rules must have been evaluated after the last scrape
	// with the final counts.
	lastScrape := one(`timestamp(` + e2eCount + `)`)
	rule := func(h latencyHistogram, name string) string {
		return "target_model:" + h.metric + ":" + name + "_rate5m"
	}
	if !testenv.Poll(ctx, 200*time.Millisecond, func() bool {
		res, err := api.query(ctx, `timestamp(`+rule(latencyHistograms[len(latencyHistograms)-1], "p99")+`)`)
		return err == nil && len(res) == 1 && res[0].Value > lastScrape+1
	}) {
		t.Fatalf("no recording-rule evaluation after the last scrape at %.3f: %v", lastScrape, ctx.Err())
	}

	var table strings.Builder
	fmt.Fprintf(&table, "%d requests; the rules' window holds the %d after the first scrape\n", len(ok), len(ok)-first)
	fmt.Fprintf(&table, "%-5s %-4s %12s %12s %7s %12s %12s %7s %12s\n",
		"", "", "report", "native", "error", "report-win", "rule", "error", "classic")
	for _, h := range latencyHistograms {
		var window, whole []float64
		for _, r := range ok[first:] {
			window = append(window, h.values(r)...)
		}
		for _, r := range ok {
			whole = append(whole, h.values(r)...)
		}
		windowDist := stats.Dist(window)
		for _, qq := range quantiles {
			exact := qq.of(h.summary(&run.Summary))
			native := one(fmt.Sprintf(`histogram_quantile(%g, sum by (target, model) (last_over_time(%s%s[10m])))`, qq.q, h.metric, sel))
			classic := one(fmt.Sprintf(`histogram_quantile(%g, sum by (target, model, le) (last_over_time(%s_bucket%s[10m])))`, qq.q, h.metric, sel))
			exactWin := qq.of(windowDist)
			recorded := one(rule(h, qq.name))
			errWhole, errRule := relErr(native, exact), relErr(recorded, exactWin)
			fmt.Fprintf(&table, "%-5s %-4s %12.6f %12.6f %6.2f%% %12.6f %12.6f %6.2f%% %12.6f\n",
				h.short, qq.name, exact, native, 100*errWhole, exactWin, recorded, 100*errRule, classic)
			if !(errWhole <= percentileTolerance) && !inRankBracket(whole, qq.q, native) {
				t.Errorf("%s %s of the whole run: Prometheus %.6f s (native histogram), report %.6f s: %.1f %% off, more than %.0f %%",
					h.short, qq.name, native, exact, 100*errWhole, 100*percentileTolerance)
			}
			if !(errRule <= percentileTolerance) && !inRankBracket(window, qq.q, recorded) {
				t.Errorf("%s %s recorded by %s: %.6f s, the report's requests in its window %.6f s: %.1f %% off, more than %.0f %%",
					h.short, qq.name, rule(h, qq.name), recorded, exactWin, 100*errRule, 100*percentileTolerance)
			}
		}
	}
	t.Logf("latency percentiles, Prometheus against the report (seconds):\n%s", table.String())
}

// inRankBracket reports whether got lies between the observations on
// either side of the q-quantile's rank in values (the one below rank q·n
// and the one above it), widened by percentileTolerance. In a sparse tail
// (the p99 of a few hundred requests is the 3rd or 4th largest) adjacent
// observations can be 10 % apart, and the exact percentile (interpolated
// between them) and a histogram's (interpolated within the bucket holding
// rank q·n) are both estimates of the same rank: the error that matters is
// landing outside the observations around that rank, not the distance
// between two ways of interpolating in between.
func inRankBracket(values []float64, q, got float64) bool {
	if len(values) == 0 {
		return false
	}
	sorted := slices.Sorted(slices.Values(values))
	n := len(sorted)
	r := q * float64(n)
	lo := sorted[max(0, min(n-1, int(math.Floor(r))-1))]
	hi := sorted[max(0, min(n-1, int(math.Ceil(r))))]
	return got >= lo*(1-percentileTolerance) && got <= hi*(1+percentileTolerance)
}

// relErr is |got − want| / want.
func relErr(got, want float64) float64 {
	if want == 0 {
		return math.Abs(got)
	}
	return math.Abs(got-want) / want
}

// checkNeighbourSlowsServer checks the tie of the simulated server to GPU 0
// of the simulated fleet (gpulens-loadgen sim --sim.gpu.exporter-url):
// batch-train (70 % SM) joins llm-serve on GPU 0 at 8 s of the exporter's
// time, so the server's slowdown goes from 1 to about 1.7, and the TTFT
// the load generator measures grows by as much — contention and latency
// on one time axis. began is just before the exporter started.
func checkNeighbourSlowsServer(ctx context.Context, t *testing.T, api promClient, doc *report.Document, began time.Time) {
	t.Helper()
	// The neighbours' share, not the slowdown: the exporter's probe (every
	// 5 s here) adds 1 to the slowdown for each run's 235 ms, which a
	// scrape may or may not catch.
	res, err := api.query(ctx, `max_over_time(gpulens_sim_gpu_neighbour_sm_utilization_ratio{job="gpulens-sim"}[10m])`)
	if err != nil || len(res) != 1 {
		t.Fatalf("neighbour utilisation the simulated server read: %v, %v", res, err)
	}
	if s := res[0].Value; s < 0.55 || s > 0.85 {
		t.Errorf("the simulated server read its neighbours' SM utilisation up to %.3f; want batch-train's 0.70 ± 0.15", s)
	}
	// Requests sent more than a second before the neighbour joined, and
	// from 3 s after (the exporter samples every second, the server reads
	// it every 0.5 s, and a step in progress finishes at the old speed).
	joins := began.Add(8 * time.Second)
	var before, after []float64
	run := doc.Runs[0]
	for _, r := range run.Requests {
		if !r.OK() || r.FirstToken == 0 {
			continue
		}
		sent := doc.Metadata.Started.Add(r.Intended)
		ttft := (r.FirstToken - r.Intended).Seconds()
		switch {
		case sent.Before(joins.Add(-time.Second)):
			before = append(before, ttft)
		case sent.After(joins.Add(3 * time.Second)):
			after = append(after, ttft)
		}
	}
	if len(before) < 10 || len(after) < 100 {
		t.Fatalf("%d requests before the neighbour joined and %d after; the timeline is off (run started %s after the exporter)",
			len(before), len(after), doc.Metadata.Started.Sub(began).Round(time.Millisecond))
	}
	b, a := stats.Dist(before).P50, stats.Dist(after).P50
	t.Logf("TTFT median alone on GPU 0: %.2f ms (%d requests); with batch-train: %.2f ms (%d requests): %.2fx; neighbour utilisation %.3f",
		1e3*b, len(before), 1e3*a, len(after), a/b, res[0].Value)
	if a/b < 1.3 {
		t.Errorf("TTFT median went from %.2f ms to %.2f ms when the neighbour joined GPU 0: want at least 1.3x", 1e3*b, 1e3*a)
	}
}

func TestInRankBracket(t *testing.T) {
	// 100 values 1..100: the p99's rank 99 lies between 98 and 100.
	var v []float64
	for i := 1; i <= 100; i++ {
		v = append(v, float64(i))
	}
	for _, tc := range []struct {
		q, got float64
		want   bool
	}{
		{0.99, 99, true},
		{0.99, 100 * 1.04, true},
		{0.99, 98 * 0.96, true},
		{0.99, 100 * 1.06, false},
		{0.99, 90, false},
		{0.5, 50, true},
		{0.5, 40, false},
	} {
		if got := inRankBracket(v, tc.q, tc.got); got != tc.want {
			t.Errorf("inRankBracket(1..100, %g, %g) = %v, want %v", tc.q, tc.got, got, tc.want)
		}
	}
	if inRankBracket(nil, 0.5, 1) {
		t.Error("no values: in bracket")
	}
}
