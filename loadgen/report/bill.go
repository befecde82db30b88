package report

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/gpulens/gpulens/internal/pricing"
	"github.com/gpulens/gpulens/loadgen/option"
)

// Terms are the billing terms of a campaign: the billed items besides the
// runs its reports record, and how the provider rounds billed time.
type Terms struct {
	// GPUHourlyUSD and GPUs override the price and GPU count the reports
	// were run with (their settings.cost); zero keeps the reports' own.
	GPUHourlyUSD float64
	GPUs         int
	// SetupHours and RetryHours are billed instance hours that produced
	// no report: provisioning, downloading weights, warming up, and runs
	// that were thrown away.
	SetupHours float64
	RetryHours float64
	// StorageUSD and EgressUSD are billed amounts that do not depend on
	// the GPU time: volumes, snapshots, dataset and result transfer.
	StorageUSD float64
	EgressUSD  float64
	// BillingIncrement is the unit the provider bills instance time in
	// (time.Second, time.Minute, time.Hour): the total is rounded up to a
	// whole number of increments. Zero bills the exact time.
	BillingIncrement time.Duration
	// MinimumCharge is the least instance time billed (e.g. one minute,
	// one hour); zero for none.
	MinimumCharge time.Duration
}

// Bill is what the campaign cost, as on the invoice: the instance
// time of every report (failed, interrupted and repeated runs included),
// setup and retries, rounded as billed, times the GPU price, plus storage
// and egress; divided by the samples completed.
type Bill struct {
	Reports []Line `json:"reports"`
	// GPUHourlyUSD and GPUs are the price billed; PriceFrom and GPUsFrom
	// say where each came from: "reports" or "options" (an override).
	GPUHourlyUSD float64 `json:"gpu_hourly_usd"`
	GPUs         int     `json:"gpus"`
	PriceFrom    string  `json:"price_from"`
	GPUsFrom     string  `json:"gpus_from"`

	// RunHours is the instance time of the reports; SetupHours and
	// RetryHours the campaign's own; RoundingHours what rounding up to
	// the increment and the minimum charge added; BilledHours their sum,
	// the instance time on the invoice.
	RunHours                float64 `json:"run_hours"`
	SetupHours              float64 `json:"setup_hours"`
	RetryHours              float64 `json:"retry_hours"`
	RoundingHours           float64 `json:"rounding_hours"`
	BilledHours             float64 `json:"billed_hours"`
	BillingIncrementSeconds float64 `json:"billing_increment_seconds"`
	MinimumChargeSeconds    float64 `json:"minimum_charge_seconds"`

	// GPUUSD is GPUHourlyUSD × GPUs × BilledHours; TotalUSD adds storage
	// and egress.
	GPUUSD     float64 `json:"gpu_usd"`
	StorageUSD float64 `json:"storage_usd"`
	EgressUSD  float64 `json:"egress_usd"`
	TotalUSD   float64 `json:"total_usd"`

	// Runs counts the runs of every report (levels × repeats, aggregates
	// not counted); SamplesCompleted their completed requests and
	// RequestsFailed their failed ones (which cost, but are no sample).
	Runs             int `json:"runs"`
	SamplesCompleted int `json:"samples_completed"`
	RequestsFailed   int `json:"requests_failed"`
	// PerSampleUSD is TotalUSD / SamplesCompleted and Per1kSamplesUSD
	// 1000 × that; zero when no sample completed.
	PerSampleUSD    float64 `json:"per_sample_usd"`
	Per1kSamplesUSD float64 `json:"per_1k_samples_usd"`

	// Notes are facts the reader should know (an ignored per-run overhead,
	// an interrupted report, no completed sample).
	Notes []string `json:"notes,omitempty"`
}

// Line is one report's share of the campaign: a line of the Bill.
type Line struct {
	Name string `json:"name"`
	// Hours is the report's instance time: from metadata.started to
	// metadata.finished (the whole command: every level and repeat, their
	// warm-ups and grace periods and the gaps between them), or, when the
	// report lacks them, the sum of its runs' durations and warm-ups.
	// HoursFrom says which: "metadata" or "runs".
	Hours            float64 `json:"hours"`
	HoursFrom        string  `json:"hours_from"`
	Runs             int     `json:"runs"`
	SamplesCompleted int     `json:"samples_completed"`
	RequestsFailed   int     `json:"requests_failed"`
	Interrupted      bool    `json:"interrupted,omitempty"`
	// GPUHourlyUSD and GPUs are the report's own cost settings.
	GPUHourlyUSD float64 `json:"gpu_hourly_usd"`
	GPUs         int     `json:"gpus"`
}

// Validate checks the terms: no negative or non-finite amount, and a
// GPU-hour price by the rule every gpulens price follows
// (pricing.CheckPrice: 0 to 1000 USD).
func (t Terms) Validate() error {
	if err := pricing.CheckPrice(t.GPUHourlyUSD); err != nil {
		return option.Errorf("%s: %w", option.Name("GPUHourlyUSD"), err)
	}
	for _, f := range []struct {
		name option.Name
		v    float64
	}{
		{"SetupHours", t.SetupHours}, {"RetryHours", t.RetryHours},
		{"StorageUSD", t.StorageUSD}, {"EgressUSD", t.EgressUSD},
	} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return option.Errorf("%s must be a non-negative number, got %v", f.name, f.v)
		}
	}
	if t.GPUs < 0 {
		return option.Errorf("%s must not be negative, got %d", option.Name("GPUs"), t.GPUs)
	}
	if t.BillingIncrement < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("BillingIncrement"), t.BillingIncrement)
	}
	if t.MinimumCharge < 0 {
		return option.Errorf("%s must not be negative, got %v", option.Name("MinimumCharge"), t.MinimumCharge)
	}
	return nil
}

// Sum bills the campaign made of the reports in inputs (each Name, its
// file, appears in errors and in the result) on the terms t.
// Every run of every report counts (failed, interrupted and repeated ones
// too: they were billed); the samples are the completed requests. The reports must agree on the GPU price and count unless t
// overrides them: a campaign is billed for one kind of instance.
func Sum(t Terms, inputs []Named) (*Bill, error) {
	if err := t.Validate(); err != nil {
		return nil, err
	}
	if len(inputs) == 0 {
		return nil, fmt.Errorf("no report given")
	}
	out := &Bill{SetupHours: t.SetupHours, RetryHours: t.RetryHours, StorageUSD: t.StorageUSD, EgressUSD: t.EgressUSD,
		BillingIncrementSeconds: t.BillingIncrement.Seconds(), MinimumChargeSeconds: t.MinimumCharge.Seconds()}
	runIDs := map[string]string{}
	overhead := false
	for _, in := range inputs {
		rt, err := line(in)
		if err != nil {
			return nil, err
		}
		if id := in.Doc.Metadata.RunID; id != "" {
			if prev, ok := runIDs[id]; ok {
				return nil, fmt.Errorf("reports %s and %s are the same run (run_id %s): it would be billed twice", prev, in.Name, id)
			}
			runIDs[id] = in.Name
		}
		for _, r := range in.Doc.Runs {
			overhead = overhead || (!r.Aggregate && r.Settings.Cost.OverheadHours > 0)
		}
		if rt.Interrupted {
			out.Notes = append(out.Notes, fmt.Sprintf("%s was interrupted: its time until the stop is billed", in.Name))
		}
		out.Reports = append(out.Reports, rt)
		out.RunHours += rt.Hours
		out.Runs += rt.Runs
		out.SamplesCompleted += rt.SamplesCompleted
		out.RequestsFailed += rt.RequestsFailed
	}
	if err := price(t, out); err != nil {
		return nil, err
	}
	if overhead {
		out.Notes = append(out.Notes, "the reports' per-run overhead hours (settings.cost.overhead_hours) are not used: the campaign's setup and retry hours replace them")
	}

	used := out.RunHours + t.SetupHours + t.RetryHours
	out.BilledHours = billedHours(used, t.BillingIncrement, t.MinimumCharge)
	out.RoundingHours = out.BilledHours - used
	out.GPUUSD = tidy(out.GPUHourlyUSD * float64(out.GPUs) * out.BilledHours)
	out.TotalUSD = tidy(out.GPUUSD + t.StorageUSD + t.EgressUSD)
	out.RunHours, out.BilledHours, out.RoundingHours = tidy(out.RunHours), tidy(out.BilledHours), tidy(out.RoundingHours)
	if out.SamplesCompleted > 0 {
		out.PerSampleUSD = tidy(out.TotalUSD / float64(out.SamplesCompleted))
		out.Per1kSamplesUSD = tidy(1000 * out.TotalUSD / float64(out.SamplesCompleted))
	} else {
		out.Notes = append(out.Notes, "no request completed: there is no cost per sample")
	}
	return out, nil
}

// line measures one report: its instance time, runs and samples.
func line(in Named) (Line, error) {
	rt := Line{Name: in.Name, Interrupted: in.Doc.Metadata.Interrupted}
	runSeconds := 0.0
	first := true
	for _, r := range in.Doc.Runs {
		if r.Aggregate {
			continue // the mean of runs counted on their own
		}
		s := r.Summary
		if s.DurationSeconds < 0 || math.IsNaN(s.DurationSeconds) || math.IsInf(s.DurationSeconds, 0) {
			return rt, fmt.Errorf("report %s: run %q: summary.duration_seconds %v is not a duration", in.Name, r.Name, s.DurationSeconds)
		}
		rt.Runs++
		rt.SamplesCompleted += s.RequestsCompleted
		rt.RequestsFailed += s.RequestsFailed
		runSeconds += s.DurationSeconds + max(r.Settings.WarmupSeconds, 0)
		if first {
			rt.GPUHourlyUSD, rt.GPUs = r.Settings.Cost.GPUHourlyUSD, r.Settings.Cost.GPUs
			first = false
		} else if r.Settings.Cost.GPUHourlyUSD != rt.GPUHourlyUSD || r.Settings.Cost.GPUs != rt.GPUs {
			return rt, fmt.Errorf("report %s: run %q was priced at $%v/h × %d GPUs, its first run at $%v/h × %d",
				in.Name, r.Name, r.Settings.Cost.GPUHourlyUSD, r.Settings.Cost.GPUs, rt.GPUHourlyUSD, rt.GPUs)
		}
	}
	if rt.Runs == 0 {
		return rt, fmt.Errorf("report %s has no runs: nothing was billed to it", in.Name)
	}
	m := in.Doc.Metadata
	if !m.Started.IsZero() && m.Finished.After(m.Started) {
		rt.Hours, rt.HoursFrom = m.Finished.Sub(m.Started).Hours(), "metadata"
	} else {
		rt.Hours, rt.HoursFrom = runSeconds/3600, "runs"
	}
	return rt, nil
}

// price settles the GPU price and count: the terms' when set, otherwise
// the reports', which must agree.
func price(t Terms, out *Bill) error {
	out.PriceFrom, out.GPUsFrom = "reports", "reports"
	first := out.Reports[0]
	if t.GPUHourlyUSD == 0 {
		for _, r := range out.Reports[1:] {
			if r.GPUHourlyUSD != first.GPUHourlyUSD {
				return option.Errorf("reports %s ($%v/h) and %s ($%v/h) were priced differently: a campaign is billed for one kind of instance; cost each separately or set %s",
					first.Name, first.GPUHourlyUSD, r.Name, r.GPUHourlyUSD, option.Name("GPUHourlyUSD"))
			}
		}
		if first.GPUHourlyUSD == 0 {
			return option.Errorf("the reports carry no GPU price (they were run without one): set %s", option.Name("GPUHourlyUSD"))
		}
		if err := pricing.CheckPrice(first.GPUHourlyUSD); err != nil {
			return option.Errorf("report %s: settings.cost.gpu_hourly_usd: %w; set %s", first.Name, err, option.Name("GPUHourlyUSD"))
		}
		out.GPUHourlyUSD = first.GPUHourlyUSD
	} else {
		out.GPUHourlyUSD, out.PriceFrom = t.GPUHourlyUSD, "options"
	}
	if t.GPUs == 0 {
		for _, r := range out.Reports[1:] {
			if r.GPUs != first.GPUs {
				return option.Errorf("reports %s (%d GPUs) and %s (%d GPUs) were priced for different GPU counts: cost each separately or set %s",
					first.Name, first.GPUs, r.Name, r.GPUs, option.Name("GPUs"))
			}
		}
		out.GPUs = max(first.GPUs, 1) // reports without cost settings: one GPU
	} else {
		out.GPUs, out.GPUsFrom = t.GPUs, "options"
	}
	return nil
}

// tidy rounds v to 12 significant digits, so that $0.60 × 6 h reads 3.6
// and not 3.5999999999999996; no bill is that precise.
func tidy(v float64) float64 {
	r, err := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 12, 64), 64)
	if err != nil {
		return v
	}
	return r
}

// billedHours rounds hours of instance time up to whole increments and to
// at least the minimum charge. A time within a microsecond of a whole
// increment is not rounded up (float error, not usage).
func billedHours(hours float64, increment, minimum time.Duration) float64 {
	secs := hours * 3600
	if inc := increment.Seconds(); inc > 0 {
		secs = math.Ceil(secs/inc-1e-6/inc) * inc
	}
	secs = max(secs, minimum.Seconds())
	return secs / 3600
}

// WriteText writes the campaign's bill as a table.
func (cc *Bill) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "report\truns\thours\tcompleted\tfailed\tpriced at\n")
	for _, r := range cc.Reports {
		flag := ""
		if r.Interrupted {
			flag = " (interrupted)"
		}
		fmt.Fprintf(tw, "%s%s\t%d\t%.4f\t%d\t%d\t%s/h × %d\n", r.Name, flag, r.Runs, r.Hours, r.SamplesCompleted, r.RequestsFailed, USD(r.GPUHourlyUSD, 4), r.GPUs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	gpus := "GPU"
	if cc.GPUs != 1 {
		gpus = "GPUs"
	}
	rate := cc.GPUHourlyUSD * float64(cc.GPUs)
	fmt.Fprintf(w, "GPU price: %s/h × %d %s (price from the %s, GPU count from the %s)\n", USD(cc.GPUHourlyUSD, 4), cc.GPUs, gpus, cc.PriceFrom, cc.GPUsFrom)
	fmt.Fprintf(w, "billed time: %s\n\n", billing(cc.BillingIncrementSeconds, cc.MinimumChargeSeconds))
	for _, l := range []struct {
		k string
		h float64
	}{{"runs", cc.RunHours}, {"setup", cc.SetupHours}, {"retries", cc.RetryHours}, {"rounding", cc.RoundingHours}} {
		fmt.Fprintf(tw, "%s\t%.4f h\t%s\n", l.k, l.h, USD(rate*l.h, 4))
	}
	fmt.Fprintf(tw, "billed GPU time\t%.4f h\t%s\n", cc.BilledHours, USD(cc.GPUUSD, 4))
	fmt.Fprintf(tw, "storage\t\t%s\n", USD(cc.StorageUSD, 4))
	fmt.Fprintf(tw, "egress\t\t%s\n", USD(cc.EgressUSD, 4))
	fmt.Fprintf(tw, "total\t\t%s\n", USD(cc.TotalUSD, 4))
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "samples completed\t%d\n", cc.SamplesCompleted)
	fmt.Fprintf(tw, "cost per sample\t%s\n", USD(cc.PerSampleUSD, 4))
	fmt.Fprintf(tw, "cost per 1,000 samples\t%s\n", USD(cc.Per1kSamplesUSD, 4))
	if err := tw.Flush(); err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "runs: %d in %d report(s); failed requests (billed, not samples): %d\n", cc.Runs, len(cc.Reports), cc.RequestsFailed); err != nil {
		return err
	}
	for _, n := range cc.Notes {
		if _, err := fmt.Fprintln(w, "NOTE:", n); err != nil {
			return err
		}
	}
	return nil
}

func billing(incSecs, minSecs float64) string {
	s := "the exact time"
	if incSecs > 0 {
		s = "rounded up to whole " + span(incSecs)
	}
	if minSecs > 0 {
		s += ", at least " + span(minSecs)
	}
	return s
}

// span writes seconds in the largest unit that divides them.
func span(secs float64) string {
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	switch {
	case secs >= 3600 && math.Mod(secs, 3600) == 0:
		return f(secs/3600) + " h"
	case secs >= 60 && math.Mod(secs, 60) == 0:
		return f(secs/60) + " min"
	default:
		return f(secs) + " s"
	}
}
