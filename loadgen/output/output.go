// Package output writes run results as CSV and a console table, and
// aggregates repeats.
package output

import (
	"encoding/csv"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/gpulens/gpulens/loadgen/outfile"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// metric is one scalar of a summary, named as in the JSON report.
type metric struct {
	name string
	get  func(*report.Summary) float64
}

func distMetrics(prefix string, d func(*report.Summary) *report.Dist) []metric {
	return []metric{
		{prefix + ".mean", func(s *report.Summary) float64 { return d(s).Mean }},
		{prefix + ".stddev", func(s *report.Summary) float64 { return d(s).Stddev }},
		{prefix + ".p50", func(s *report.Summary) float64 { return d(s).P50 }},
		{prefix + ".p90", func(s *report.Summary) float64 { return d(s).P90 }},
		{prefix + ".p95", func(s *report.Summary) float64 { return d(s).P95 }},
		{prefix + ".p99", func(s *report.Summary) float64 { return d(s).P99 }},
		{prefix + ".max", func(s *report.Summary) float64 { return d(s).Max }},
	}
}

// Metrics lists every scalar aggregated across repeats and written to CSV.
var metrics = func() []metric {
	m := []metric{
		{"requests_completed", func(s *report.Summary) float64 { return float64(s.RequestsCompleted) }},
		{"requests_failed", func(s *report.Summary) float64 { return float64(s.RequestsFailed) }},
		{"request_throughput_per_second", func(s *report.Summary) float64 { return s.RequestThroughput }},
		{"output_tokens_per_second", func(s *report.Summary) float64 { return s.OutputTokensPerSecond }},
		{"total_tokens_per_second", func(s *report.Summary) float64 { return s.TotalTokensPerSecond }},
		{"goodput_per_second", func(s *report.Summary) float64 { return s.GoodputPerSecond }},
		{"goodput_ratio", func(s *report.Summary) float64 { return s.GoodputRatio }},
		{"achieved_rate_per_second", func(s *report.Summary) float64 { return s.AchievedRatePerSecond }},
		{"duration_seconds", func(s *report.Summary) float64 { return s.DurationSeconds }},
		{"cost.per_request_usd", func(s *report.Summary) float64 { return s.Cost.PerRequestUSD }},
		{"cost.per_1k_requests_usd", func(s *report.Summary) float64 { return s.Cost.Per1kRequestsUSD }},
		{"cost.per_million_input_tokens_usd", func(s *report.Summary) float64 { return s.Cost.PerMillionInputTokensUSD }},
		{"cost.per_million_output_tokens_usd", func(s *report.Summary) float64 { return s.Cost.PerMillionOutputTokensUSD }},
		{"cost.total_usd", func(s *report.Summary) float64 { return s.Cost.TotalUSD }},
	}
	m = append(m, distMetrics("ttft_seconds", func(s *report.Summary) *report.Dist { return &s.TTFT })...)
	m = append(m, distMetrics("itl_seconds", func(s *report.Summary) *report.Dist { return &s.ITL })...)
	m = append(m, distMetrics("tpot_seconds", func(s *report.Summary) *report.Dist { return &s.TPOT })...)
	m = append(m, distMetrics("e2e_seconds", func(s *report.Summary) *report.Dist { return &s.E2E })...)
	m = append(m, distMetrics("schedule_lag_seconds", func(s *report.Summary) *report.Dist { return &s.ScheduleLag })...)
	return m
}()

// Aggregate combines the repeats of one level: every scalar metric becomes
// the mean across repeats, with its stddev and Student-t 95 % CI in Stats;
// counts are summed.
func Aggregate(reps []report.Run) report.Run {
	agg := report.Run{Name: reps[0].Name, Settings: reps[0].Settings, Level: reps[0].Level, Aggregate: true}
	if i := len(agg.Name) - len(" repeat=1"); i > 0 && agg.Name[i:] == " repeat=1" {
		agg.Name = agg.Name[:i]
	}
	agg.Name += " (mean of " + strconv.Itoa(len(reps)) + ")"
	s := &agg.Summary
	s.Errors = map[string]int{}
	s.Stats = map[string]report.Stat{}
	// Means of every metric are written back into the aggregate summary.
	for _, m := range metrics {
		vals := make([]float64, len(reps))
		for i := range reps {
			vals[i] = m.get(&reps[i].Summary)
		}
		st := stats.Interval(vals)
		s.Stats[m.name] = st
	}
	dists := []struct {
		dst *report.Dist
		get func(*report.Summary) *report.Dist
	}{
		{&s.TTFT, func(x *report.Summary) *report.Dist { return &x.TTFT }},
		{&s.ITL, func(x *report.Summary) *report.Dist { return &x.ITL }},
		{&s.TPOT, func(x *report.Summary) *report.Dist { return &x.TPOT }},
		{&s.E2E, func(x *report.Summary) *report.Dist { return &x.E2E }},
		{&s.ScheduleLag, func(x *report.Summary) *report.Dist { return &x.ScheduleLag }},
		{&s.TTFTFromSend, func(x *report.Summary) *report.Dist { return &x.TTFTFromSend }},
		{&s.E2EFromSend, func(x *report.Summary) *report.Dist { return &x.E2EFromSend }},
	}
	n := float64(len(reps))
	for _, d := range dists {
		for i := range reps {
			v := d.get(&reps[i].Summary)
			d.dst.Count += v.Count
			d.dst.Mean += v.Mean / n
			d.dst.Stddev += v.Stddev / n
			d.dst.P50 += v.P50 / n
			d.dst.P90 += v.P90 / n
			d.dst.P95 += v.P95 / n
			d.dst.P99 += v.P99 / n
			d.dst.Max = max(d.dst.Max, v.Max)
		}
	}
	for i := range reps {
		r := &reps[i].Summary
		s.RequestsCompleted += r.RequestsCompleted
		s.RequestsFailed += r.RequestsFailed
		s.RequestsInterrupted += r.RequestsInterrupted
		s.WarmupRequests += r.WarmupRequests
		s.GoodRequests += r.GoodRequests
		s.InputTokensTotal += r.InputTokensTotal
		s.OutputTokensTotal += r.OutputTokensTotal
		s.UsageMismatches += r.UsageMismatches
		s.KernelTimestamped += r.KernelTimestamped
		s.TokensEstimated = s.TokensEstimated || r.TokensEstimated
		s.RateNotAchieved = s.RateNotAchieved || r.RateNotAchieved
		s.MaxInFlight = max(s.MaxInFlight, r.MaxInFlight)
		for k, v := range r.Errors {
			s.Errors[k] += v
		}
		s.TargetRatePerSecond = r.TargetRatePerSecond
	}
	mean := func(k string) float64 { return s.Stats[k].Mean }
	s.RequestThroughput = mean("request_throughput_per_second")
	s.OutputTokensPerSecond = mean("output_tokens_per_second")
	s.TotalTokensPerSecond = mean("total_tokens_per_second")
	s.GoodputPerSecond = mean("goodput_per_second")
	s.GoodputRatio = mean("goodput_ratio")
	s.AchievedRatePerSecond = mean("achieved_rate_per_second")
	s.DurationSeconds = mean("duration_seconds")
	s.Cost = report.Cost{PerRequestUSD: mean("cost.per_request_usd"), Per1kRequestsUSD: mean("cost.per_1k_requests_usd"),
		PerMillionInputTokensUSD: mean("cost.per_million_input_tokens_usd"), PerMillionOutputTokensUSD: mean("cost.per_million_output_tokens_usd"),
		TotalUSD: mean("cost.total_usd")}
	return agg
}

// WriteCSVFile writes one row per run to path (loadgen/outfile: a regular
// file atomically, a device, FIFO or symlink in place).
func WriteCSVFile(path string, d *report.Document) error {
	if err := outfile.Write(path, func(w io.Writer) error { return WriteCSV(w, d) }); err != nil {
		return fmt.Errorf("writing CSV %s: %w", path, err)
	}
	return nil
}

// WriteCSV writes one row per run: name, level, repeat, aggregate, every
// metric, then the error counts by class.
func WriteCSV(w io.Writer, d *report.Document) error {
	cw := csv.NewWriter(w)
	head := []string{"name", "level", "repeat", "aggregate"}
	for _, m := range metrics {
		head = append(head, m.name)
	}
	for _, c := range report.ErrorClasses {
		head = append(head, "errors."+c)
	}
	if err := cw.Write(head); err != nil {
		return err
	}
	for i := range d.Runs {
		r := &d.Runs[i]
		row := []string{r.Name, ff(r.Level), strconv.Itoa(r.Repeat), strconv.FormatBool(r.Aggregate)}
		for _, m := range metrics {
			row = append(row, ff(m.get(&r.Summary)))
		}
		for _, c := range report.ErrorClasses {
			row = append(row, strconv.Itoa(r.Summary.Errors[c]))
		}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func ff(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// WriteTable prints a human-readable summary.
func WriteTable(w io.Writer, d *report.Document) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tok\tfailed\treq/s\tout tok/s\tTTFT p50 ms\tTTFT p99 ms\tITL p50 ms\tITL p99 ms\tTPOT p50 ms\tE2E p99 s\tgoodput/s\t$/1k req\t")
	for _, r := range d.Runs {
		s := r.Summary
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.4f\t\n", r.Name, s.RequestsCompleted, s.RequestsFailed,
			s.RequestThroughput, s.OutputTokensPerSecond, s.TTFT.P50*1e3, s.TTFT.P99*1e3, s.ITL.P50*1e3, s.ITL.P99*1e3,
			s.TPOT.P50*1e3, s.E2E.P99, s.GoodputPerSecond, s.Cost.Per1kRequestsUSD)
	}
	tw.Flush()
	for _, wmsg := range d.Metadata.Warnings {
		fmt.Fprintln(w, "WARNING:", wmsg)
	}
	for _, r := range d.Runs {
		if n := r.Summary.RequestsInterrupted; n > 0 && !r.Aggregate {
			fmt.Fprintf(w, "NOTE: %s: %d requests in flight when the run was interrupted are in requests_interrupted, not in ok or failed\n", r.Name, n)
		}
		if r.Summary.TokensEstimated {
			fmt.Fprintf(w, "NOTE: %s: the server sent no usage; token counts are estimates (one per chunk)\n", r.Name)
		}
		if s := r.Summary; r.Settings.Timestamps == "kernel" && s.KernelTimestamped < s.RequestsCompleted {
			fmt.Fprintf(w, "NOTE: %s: token times of %d of %d requests are when reads returned, not kernel receive times (those need Linux)\n",
				r.Name, s.RequestsCompleted-s.KernelTimestamped, s.RequestsCompleted)
		}
	}
}
