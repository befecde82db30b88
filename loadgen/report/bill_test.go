package report

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// doc is a report started at t0 that ran for wall, with one run per entry
// of completed (and failed), priced at price per hour for gpus GPUs. A
// zero wall leaves the metadata times unset.
func doc(id string, wall time.Duration, price float64, gpus int, completed, failed []int) *Document {
	d := &Document{Metadata: Metadata{RunID: id}}
	if wall > 0 {
		d.Metadata.Started, d.Metadata.Finished = t0, t0.Add(wall)
	}
	for i := range completed {
		d.Runs = append(d.Runs, Run{Name: "c=1 repeat=" + string(rune('1'+i)), Level: 1, Repeat: i + 1,
			Settings: Settings{Cost: CostSettings{GPUHourlyUSD: price, GPUs: gpus}, WarmupSeconds: 60},
			Summary:  Summary{RequestsCompleted: completed[i], RequestsFailed: failed[i], DurationSeconds: 1740}})
	}
	return d
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestCampaignWorkedExample(t *testing.T) {
	// $0.60/h, 12,000 samples in 4 h → $2.40, $0.20 per 1,000; two more
	// hours of setup and retries → $3.60, $0.30 per 1,000. The samples
	// come from two reports (2 h each, one with a failed repeat that
	// completed 500 requests and failed 100: billed, its 500 counted).
	a := doc("a", 2*time.Hour, 0.60, 1, []int{3000, 3000}, []int{0, 0})
	b := doc("b", 2*time.Hour, 0.60, 1, []int{5500, 500}, []int{0, 100})
	for _, tc := range []struct {
		name                        string
		c                           Terms
		billed, total, per1k, perSm float64
	}{
		{"runs only", Terms{BillingIncrement: time.Second}, 4, 2.40, 0.20, 0.0002},
		{"with setup and retries", Terms{SetupHours: 1.5, RetryHours: 0.5, BillingIncrement: time.Second}, 6, 3.60, 0.30, 0.0003},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := Sum(tc.c, []Named{{Name: "a.json", Doc: a}, {Name: "b.json", Doc: b}})
			if err != nil {
				t.Fatal(err)
			}
			if !near(cc.RunHours, 4) || !near(cc.BilledHours, tc.billed) || !near(cc.RoundingHours, 0) {
				t.Errorf("hours: run %v billed %v rounding %v, want 4, %v, 0", cc.RunHours, cc.BilledHours, cc.RoundingHours, tc.billed)
			}
			if !near(cc.TotalUSD, tc.total) || !near(cc.GPUUSD, tc.total) || !near(cc.Per1kSamplesUSD, tc.per1k) || !near(cc.PerSampleUSD, tc.perSm) {
				t.Errorf("total %v per 1k %v per sample %v, want %v, %v, %v", cc.TotalUSD, cc.Per1kSamplesUSD, cc.PerSampleUSD, tc.total, tc.per1k, tc.perSm)
			}
			if cc.SamplesCompleted != 12000 || cc.RequestsFailed != 100 || cc.Runs != 4 || cc.GPUHourlyUSD != 0.60 || cc.GPUs != 1 || cc.PriceFrom != "reports" {
				t.Errorf("counts/price: %+v", cc)
			}
			if len(cc.Reports) != 2 || cc.Reports[1].SamplesCompleted != 6000 || cc.Reports[1].HoursFrom != "metadata" || !near(cc.Reports[1].Hours, 2) {
				t.Errorf("reports: %+v", cc.Reports)
			}
		})
	}
}

func TestCampaignBilling(t *testing.T) {
	// One report of 1 h 10 min 20 s = 4220 s, 1,000 samples, 2 GPUs at $3/h
	// (from the report) unless overridden.
	d := doc("x", 4220*time.Second, 3, 2, []int{1000}, []int{0})
	for _, tc := range []struct {
		name          string
		c             Terms
		billed, total float64
		priceFrom     string
	}{
		{"exact", Terms{}, 4220.0 / 3600, 6 * 4220.0 / 3600, "reports"},
		{"per second: already whole", Terms{BillingIncrement: time.Second}, 4220.0 / 3600, 6 * 4220.0 / 3600, "reports"},
		{"per minute: 71 min", Terms{BillingIncrement: time.Minute}, 71.0 / 60, 6 * 71.0 / 60, "reports"},
		{"per hour: 2 h", Terms{BillingIncrement: time.Hour}, 2, 12, "reports"},
		{"per hour with 20 s setup: still 2 h", Terms{BillingIncrement: time.Hour, SetupHours: 20.0 / 3600}, 2, 12, "reports"},
		{"minimum 3 h", Terms{BillingIncrement: time.Minute, MinimumCharge: 3 * time.Hour}, 3, 18, "reports"},
		{"storage and egress", Terms{BillingIncrement: time.Hour, StorageUSD: 1.25, EgressUSD: 0.75}, 2, 14, "reports"},
		{"price override", Terms{BillingIncrement: time.Hour, GPUHourlyUSD: 0.5}, 2, 2, "options"},
		{"price and GPU override", Terms{BillingIncrement: time.Hour, GPUHourlyUSD: 0.5, GPUs: 8}, 2, 8, "options"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := Sum(tc.c, []Named{{Name: "x.json", Doc: d}})
			if err != nil {
				t.Fatal(err)
			}
			used := 4220.0/3600 + tc.c.SetupHours
			if !near(cc.BilledHours, tc.billed) || !near(cc.RoundingHours, tc.billed-used) || !near(cc.TotalUSD, tc.total) {
				t.Errorf("billed %v h (rounding %v), total $%v; want %v h (rounding %v), $%v", cc.BilledHours, cc.RoundingHours, cc.TotalUSD, tc.billed, tc.billed-used, tc.total)
			}
			if !near(cc.Per1kSamplesUSD, tc.total) || cc.PriceFrom != tc.priceFrom {
				t.Errorf("per 1k %v (want %v), price from %s", cc.Per1kSamplesUSD, tc.total, cc.PriceFrom)
			}
		})
	}
}

func TestCampaignHoursFromRuns(t *testing.T) {
	// Without start/finish times the report's time is its runs' durations
	// and warm-ups: 2 × (1740 + 60) s = 1 h. An aggregate run is not
	// counted again.
	d := doc("", 0, 1, 1, []int{100, 300}, []int{5, 0})
	d.Runs = append(d.Runs, Run{Name: "c=1 (mean of 2)", Level: 1, Aggregate: true,
		Settings: d.Runs[0].Settings, Summary: Summary{RequestsCompleted: 400, DurationSeconds: 1740}})
	cc, err := Sum(Terms{}, []Named{{Name: "r.json", Doc: d}})
	if err != nil {
		t.Fatal(err)
	}
	if r := cc.Reports[0]; r.HoursFrom != "runs" || !near(r.Hours, 1) || r.Runs != 2 || r.SamplesCompleted != 400 || r.RequestsFailed != 5 {
		t.Errorf("report: %+v", r)
	}
	if !near(cc.TotalUSD, 1) || !near(cc.Per1kSamplesUSD, 2.5) {
		t.Errorf("total %v, per 1k %v; want 1, 2.5", cc.TotalUSD, cc.Per1kSamplesUSD)
	}
}

func TestCampaignNotes(t *testing.T) {
	d := doc("n", time.Hour, 2, 1, []int{0}, []int{10})
	d.Metadata.Interrupted = true
	d.Runs[0].Settings.Cost.OverheadHours = 1
	cc, err := Sum(Terms{}, []Named{{Name: "n.json", Doc: d}})
	if err != nil {
		t.Fatal(err)
	}
	if !near(cc.TotalUSD, 2) || cc.PerSampleUSD != 0 || cc.Per1kSamplesUSD != 0 {
		t.Errorf("total %v (want 2, the overhead hour not added), per sample %v", cc.TotalUSD, cc.PerSampleUSD)
	}
	notes := strings.Join(cc.Notes, "\n")
	for _, want := range []string{"n.json was interrupted", "overhead hours", "no request completed"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes %q lack %q", notes, want)
		}
	}
}

func TestCampaignErrors(t *testing.T) {
	ok := doc("ok", time.Hour, 1, 1, []int{10}, []int{0})
	for _, tc := range []struct {
		name   string
		c      Terms
		inputs []Named
		want   string
	}{
		{"negative setup", Terms{SetupHours: -1}, []Named{{Name: "ok.json", Doc: ok}}, "SetupHours must be a non-negative number, got -1"},
		{"negative retries", Terms{RetryHours: -0.5}, []Named{{Name: "ok.json", Doc: ok}}, "RetryHours must be a non-negative number"},
		{"NaN storage", Terms{StorageUSD: math.NaN()}, []Named{{Name: "ok.json", Doc: ok}}, "StorageUSD must be a non-negative number"},
		{"infinite egress", Terms{EgressUSD: math.Inf(1)}, []Named{{Name: "ok.json", Doc: ok}}, "EgressUSD must be a non-negative number"},
		{"negative price", Terms{GPUHourlyUSD: -2}, []Named{{Name: "ok.json", Doc: ok}}, "GPUHourlyUSD: price -2 must not be negative"},
		// The cap every gpulens price has (pricing.CheckPrice), in the
		// options and in the reports.
		{"monthly price", Terms{GPUHourlyUSD: 5000}, []Named{{Name: "ok.json", Doc: ok}}, "GPUHourlyUSD: price 5000 is more than 1000 USD per GPU-hour (is it a monthly price?)"},
		{"monthly price in the reports", Terms{}, []Named{{Name: "month.json", Doc: doc("m", time.Hour, 2000, 1, []int{1}, []int{0})}},
			"report month.json: settings.cost.gpu_hourly_usd: price 2000 is more than 1000 USD per GPU-hour (is it a monthly price?); set GPUHourlyUSD"},
		{"negative GPUs", Terms{GPUs: -1}, []Named{{Name: "ok.json", Doc: ok}}, "GPUs must not be negative"},
		{"negative increment", Terms{BillingIncrement: -time.Second}, []Named{{Name: "ok.json", Doc: ok}}, "BillingIncrement must not be negative"},
		{"negative minimum", Terms{MinimumCharge: -time.Second}, []Named{{Name: "ok.json", Doc: ok}}, "MinimumCharge must not be negative"},
		{"no reports", Terms{}, nil, "no report given"},
		{"no runs", Terms{}, []Named{{Name: "ok.json", Doc: ok}, {Name: "empty.json", Doc: &Document{}}}, "report empty.json has no runs"},
		{"only an aggregate", Terms{}, []Named{{Name: "agg.json", Doc: &Document{Runs: []Run{{Aggregate: true}}}}}, "report agg.json has no runs"},
		{"same run twice", Terms{}, []Named{{Name: "ok.json", Doc: ok}, {Name: "copy.json", Doc: ok}}, "reports ok.json and copy.json are the same run (run_id ok)"},
		{"no price", Terms{}, []Named{{Name: "free.json", Doc: doc("f", time.Hour, 0, 1, []int{1}, []int{0})}}, "the reports carry no GPU price"},
		{"prices differ", Terms{}, []Named{{Name: "ok.json", Doc: ok}, {Name: "dear.json", Doc: doc("d", time.Hour, 4, 1, []int{1}, []int{0})}}, "reports ok.json ($1/h) and dear.json ($4/h) were priced differently"},
		{"GPU counts differ", Terms{}, []Named{{Name: "ok.json", Doc: ok}, {Name: "eight.json", Doc: doc("e", time.Hour, 1, 8, []int{1}, []int{0})}}, "reports ok.json (1 GPUs) and eight.json (8 GPUs)"},
		{"bad duration", Terms{}, []Named{{Name: "nan.json", Doc: func() *Document {
			d := doc("nan", time.Hour, 1, 1, []int{1}, []int{0})
			d.Runs[0].Summary.DurationSeconds = -3
			return d
		}()}}, `report nan.json: run "c=1 repeat=1": summary.duration_seconds -3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Sum(tc.c, tc.inputs)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Sum = %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Differing prices are fine when the options override them.
	if _, err := Sum(Terms{GPUHourlyUSD: 2, GPUs: 1}, []Named{{Name: "ok.json", Doc: ok}, {Name: "dear.json", Doc: doc("d", time.Hour, 4, 8, []int{1}, []int{0})}}); err != nil {
		t.Errorf("override: %v", err)
	}
}

func TestCampaignTextAndJSON(t *testing.T) {
	d := doc("w", 4*time.Hour, 0.60, 1, []int{12000}, []int{0})
	cc, err := Sum(Terms{SetupHours: 1, RetryHours: 1, BillingIncrement: time.Minute, MinimumCharge: time.Hour}, []Named{{Name: "w.json", Doc: d}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := cc.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	// Runs of spaces compared as one (column widths).
	text := strings.Join(strings.Fields(buf.String()), " ")
	for _, want := range []string{
		"w.json 1 4.0000 12000 0 $0.60/h × 1",
		"billed time: rounded up to whole 1 min, at least 1 h",
		"runs 4.0000 h $2.40",
		"setup 1.0000 h $0.60",
		"retries 1.0000 h $0.60",
		"rounding 0.0000 h $0.00",
		"billed GPU time 6.0000 h $3.60",
		"total $3.60",
		"samples completed 12000",
		"cost per sample $0.0003",
		"cost per 1,000 samples $0.30",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	b, err := json.Marshal(cc)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back["total_usd"] != 3.6 || back["per_1k_samples_usd"] != 0.3 || back["samples_completed"] != 12000.0 || back["billed_hours"] != 6.0 || back["billing_increment_seconds"] != 60.0 {
		t.Errorf("JSON: %s", b)
	}
}
