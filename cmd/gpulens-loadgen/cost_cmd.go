package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// costFlagNames spell the options of loadgen/report.Terms as the cost
// command's flags.
var costFlagNames = map[option.Name]string{
	"GPUHourlyUSD":     "--cost.gpu-hourly-usd",
	"GPUs":             "--gpus",
	"SetupHours":       "--setup-hours",
	"RetryHours":       "--retry-hours",
	"StorageUSD":       "--storage-usd",
	"EgressUSD":        "--egress-usd",
	"BillingIncrement": "--billing-increment",
	"MinimumCharge":    "--minimum-charge",
}

// costCommand is `gpulens-loadgen cost REPORT.json [REPORT.json …]`,
// writing the bill to stdout.
func costCommand(app *kingpin.Application, stdout io.Writer) command {
	cmd := app.Command("cost", "Total spend of an evaluation campaign: the instance time of every report (failed and repeated runs included), setup, retries, storage and egress, billed as the provider rounds it; per completed sample and per 1,000.")
	inputs := cmd.Arg("reports", "JSON reports of run, sweep or merge, all billed at one GPU price.").Required().Strings()
	var c report.Terms
	var priceSet, oldPriceSet bool
	cliflag.Price(cmd, "cost.gpu-hourly-usd", "Price of one GPU-hour in USD, 0 to 1000 (default: the reports' settings.cost.gpu_hourly_usd, which must agree).", "", &c.GPUHourlyUSD).PlaceHolder("USD").IsSetByUser(&priceSet)
	// The spelling before the run command's: kept for scripts, hidden.
	cliflag.Price(cmd, "gpu-hourly-usd", "Deprecated spelling of --cost.gpu-hourly-usd.", "", &c.GPUHourlyUSD).PlaceHolder("USD").Hidden().IsSetByUser(&oldPriceSet)
	cmd.Flag("gpus", "GPUs billed (default: the reports' settings.cost.gpus).").PlaceHolder("N").IntVar(&c.GPUs)
	cmd.Flag("setup-hours", "Billed hours that produced no report: provisioning, model download, warm-up.").Default("0").Float64Var(&c.SetupHours)
	cmd.Flag("retry-hours", "Billed hours of runs thrown away and not passed as reports.").Default("0").Float64Var(&c.RetryHours)
	cmd.Flag("storage-usd", "Storage billed for the campaign (volumes, snapshots), in dollars.").Default("0").Float64Var(&c.StorageUSD)
	cmd.Flag("egress-usd", "Data transfer billed for the campaign (dataset, weights, results), in dollars.").Default("0").Float64Var(&c.EgressUSD)
	cliflag.Duration(cmd, "billing-increment", "Unit of billed instance time: the total is rounded up to whole increments (1s, 1m, 1h; 0s: the exact time).", "1s", &c.BillingIncrement)
	cliflag.Duration(cmd, "minimum-charge", "Least instance time billed (e.g. 1m, 1h; 0s: none).", "0s", &c.MinimumCharge)
	format := cmd.Flag("format", "Output: text or json.").Default("text").Enum("text", "json")
	return command{clause: cmd, run: func(_ context.Context, logger *slog.Logger) error {
		if oldPriceSet {
			if priceSet {
				return usageError{errors.New("--gpu-hourly-usd is the deprecated spelling of --cost.gpu-hourly-usd: give only --cost.gpu-hourly-usd")}
			}
			logger.Warn("--gpu-hourly-usd is deprecated: use --cost.gpu-hourly-usd, as run and sweep do")
		}
		return campaignCost(*inputs, c, *format, stdout)
	}}
}

// campaignCost reads the reports, sums the campaign and writes the bill
// to w as text or JSON.
func campaignCost(paths []string, c report.Terms, format string, w io.Writer) error {
	if err := c.Validate(); err != nil {
		return usageError{flagged(costFlagNames, err)}
	}
	inputs, err := readReports(paths)
	if err != nil {
		return err
	}
	cc, err := report.Sum(c, inputs)
	if err != nil {
		return usageError{flagged(costFlagNames, err)}
	}
	return writeResult(w, format, cc, cc.WriteText)
}

// writeResult writes v to w as indented JSON (format "json") or with text.
func writeResult(w io.Writer, format string, v any, text func(io.Writer) error) error {
	if format != "json" {
		return text(w)
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// readReports reads every report named; an unreadable one is a usage
// error naming its file.
func readReports(paths []string) ([]report.Named, error) {
	in, err := report.ReadAll(paths)
	if err != nil {
		return nil, usageError{err}
	}
	return in, nil
}
