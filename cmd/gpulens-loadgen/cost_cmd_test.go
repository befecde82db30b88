package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/gpulens/gpulens/loadgen/report"
)

// writeCostReport writes a report that ran for hours with the completed
// requests of each run, priced at price per GPU-hour.
func writeCostReport(t *testing.T, dir, name, id string, hours, price float64, completed ...int) string {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	d := &report.Document{Metadata: report.Metadata{RunID: id, Command: "sweep", Started: start, Finished: start.Add(time.Duration(hours * float64(time.Hour)))}}
	for i, n := range completed {
		d.Runs = append(d.Runs, report.Run{Name: "c=1", Level: float64(i + 1),
			Settings: report.Settings{Mode: "closed", Cost: report.CostSettings{GPUHourlyUSD: price, GPUs: 1}},
			Summary:  report.Summary{RequestsCompleted: n, RequestsFailed: 1, DurationSeconds: 60}})
	}
	p := filepath.Join(dir, name)
	if err := d.Write(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCampaignCostCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// The worked example: $0.60/h, 12,000 samples in 4 h (two reports of
	// 2 h) → $2.40, $0.20 per 1,000; +2 h of setup and retries → $3.60,
	// $0.30 per 1,000.
	a := writeCostReport(t, dir, "a.json", "a", 2, 0.60, 4000, 2000)
	b := writeCostReport(t, dir, "b.json", "b", 2, 0.60, 6000)
	for _, tc := range []struct {
		name   string
		c      report.Terms
		format string
		want   []string
	}{
		{"text, runs only", report.Terms{BillingIncrement: time.Second}, "text",
			[]string{"billed GPU time         4.0000 h  $2.40", "cost per 1,000 samples  $0.20", "samples completed       12000", "failed requests (billed, not samples): 3"}},
		{"text, setup and retries", report.Terms{SetupHours: 1.25, RetryHours: 0.75, BillingIncrement: time.Second}, "text",
			[]string{"setup                   1.2500 h  $0.75", "retries                 0.7500 h  $0.45", "total                             $3.60", "cost per 1,000 samples  $0.30"}},
		{"json", report.Terms{SetupHours: 2, BillingIncrement: time.Hour}, "json",
			[]string{`"total_usd": 3.6,`, `"per_1k_samples_usd": 0.3`, `"billed_hours": 6,`, `"samples_completed": 12000,`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := campaignCost([]string{a, b}, tc.c, tc.format, &buf); err != nil {
				t.Fatal(err)
			}
			// Compared with runs of spaces as one: the columns' widths
			// depend on the temporary folder's name.
			got := strings.Join(strings.Fields(buf.String()), " ")
			for _, w := range tc.want {
				if !strings.Contains(got, strings.Join(strings.Fields(w), " ")) {
					t.Errorf("output lacks %q:\n%s", w, buf.String())
				}
			}
			if tc.format == "json" && !json.Valid(buf.Bytes()) {
				t.Errorf("invalid JSON:\n%s", buf.String())
			}
		})
	}
}

func TestCampaignCostCommandErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := writeCostReport(t, dir, "ok.json", "ok", 1, 1, 10)
	empty := writeCostReport(t, dir, "empty.json", "e", 1, 1)
	dear := writeCostReport(t, dir, "dear.json", "d", 1, 4, 10)
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte("{\n\"runs\": [}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		paths []string
		c     report.Terms
		want  string
	}{
		{"negative setup hours", []string{ok}, report.Terms{SetupHours: -1}, "--setup-hours must be a non-negative number, got -1"},
		{"negative retry hours", []string{ok}, report.Terms{RetryHours: -2}, "--retry-hours must be a non-negative number"},
		{"negative storage", []string{ok}, report.Terms{StorageUSD: -3}, "--storage-usd must be a non-negative number"},
		{"negative increment", []string{ok}, report.Terms{BillingIncrement: -time.Minute}, "--billing-increment must not be negative"},
		{"missing file", []string{ok, filepath.Join(dir, "nope.json")}, report.Terms{}, "nope.json: reading report"},
		{"bad JSON", []string{bad}, report.Terms{}, "bad.json: line 2"},
		{"no runs", []string{empty}, report.Terms{}, "report " + empty + " has no runs"},
		{"prices differ", []string{ok, dear}, report.Terms{}, "were priced differently: a campaign is billed for one kind of instance; cost each separately or set --cost.gpu-hourly-usd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := campaignCost(tc.paths, tc.c, "text", &bytes.Buffer{})
			var ue usageError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ue) {
				t.Errorf("err = %v, want a usage error containing %q", err, tc.want)
			}
		})
	}
}

func TestCostFlagsParsed(t *testing.T) {
	t.Parallel()
	// The command line reaches the library: --billing-increment 1h turns
	// 0.5 h into 1 h billed; a negative flag exits 2.
	dir := t.TempDir()
	p := writeCostReport(t, dir, "r.json", "r", 0.5, 2, 100)
	if code := runMain([]string{"cost", p, "--billing-increment", "1h", "--setup-hours=-1"}); code != exitUsage {
		t.Errorf("negative --setup-hours: exit %d, want %d", code, exitUsage)
	}
	if code := runMain([]string{"cost", p, "--billing-increment", "1h", "--format", "yaml"}); code != exitUsage {
		t.Errorf("--format yaml: exit %d, want %d", code, exitUsage)
	}
}

// The cost command's price is --cost.gpu-hourly-usd, as run's and sweep's
// and the exporter's; --gpu-hourly-usd, its spelling before, still works
// (hidden, with a warning) so that scripts keep running, under the same
// rule.
func TestCostPriceFlagSpellings(t *testing.T) {
	t.Parallel()
	path := writeCostReport(t, t.TempDir(), "ok.json", "ok", 1, 1, 10)
	for _, tc := range []struct {
		args      []string
		wantPrice float64
		wantErr   string
		wantLog   string
	}{
		{[]string{"--cost.gpu-hourly-usd=2.5"}, 2.5, "", ""},
		{[]string{"--gpu-hourly-usd=2.5"}, 2.5, "", "--gpu-hourly-usd is deprecated: use --cost.gpu-hourly-usd"},
		{nil, 1, "", ""}, // the report's own price
		{[]string{"--gpu-hourly-usd=2.5", "--cost.gpu-hourly-usd=3"}, 0, "--gpu-hourly-usd is the deprecated spelling of --cost.gpu-hourly-usd: give only --cost.gpu-hourly-usd", ""},
		{[]string{"--gpu-hourly-usd=5000"}, 0, "--gpu-hourly-usd: price 5000 is more than 1000 USD per GPU-hour", ""},
		{[]string{"--cost.gpu-hourly-usd=5000"}, 0, "--cost.gpu-hourly-usd: price 5000 is more than 1000 USD per GPU-hour", ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			app := kingpin.New("t", "")
			var out, logs bytes.Buffer
			c := costCommand(app, &out)
			_, err := app.Parse(append([]string{"cost", path, "--format=json"}, tc.args...))
			if err == nil {
				err = c.run(context.Background(), slog.New(slog.NewTextHandler(&logs, nil)))
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var b report.Bill
			if err := json.Unmarshal(out.Bytes(), &b); err != nil {
				t.Fatal(err)
			}
			if b.GPUHourlyUSD != tc.wantPrice {
				t.Errorf("billed at %g USD/h, want %g", b.GPUHourlyUSD, tc.wantPrice)
			}
			if got := logs.String(); (tc.wantLog == "") != (got == "") || !strings.Contains(got, tc.wantLog) {
				t.Errorf("log %q, want %q", got, tc.wantLog)
			}
		})
	}
	// Hidden from the help, which shows only the new spelling.
	app := kingpin.New("t", "")
	costCommand(app, io.Discard)
	for _, f := range app.GetCommand("cost").Model().Flags {
		if f.Name == "gpu-hourly-usd" && !f.Hidden {
			t.Error("--gpu-hourly-usd is shown in the help")
		}
	}
}
