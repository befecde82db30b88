package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/render"
)

// mergeCommand is `gpulens-loadgen merge OUT.json IN1.json IN2.json …`.
func mergeCommand(app *kingpin.Application) command {
	cmd := app.Command("merge", "Combine the JSON reports of workers that ran --shard i/N of one schedule into one report with exact percentiles.")
	out := cmd.Arg("output", "Merged JSON report to write.").Required().String()
	inputs := cmd.Arg("inputs", "Shard reports (written with --shard, which embeds per-request records), or reports merged with --embed-requests.").Required().Strings()
	csv := cmd.Flag("csv", "Also write a CSV summary (one row per run) to this file.").String()
	embed := cmd.Flag("embed-requests", "Embed the union of the inputs' per-request records in the merged report (runs[].requests), so that it can be merged again, e.g. per-node merges into one.").Bool()
	return command{clause: cmd, run: func(_ context.Context, logger *slog.Logger) error {
		return mergeFiles(*out, *inputs, *csv, campaign.MergeOptions{EmbedRequests: *embed}, logger)
	}}
}

// runMerge merges without embedding the records.
func runMerge(out string, inputs []string, csv string, logger *slog.Logger) error {
	return mergeFiles(out, inputs, csv, campaign.MergeOptions{}, logger)
}

func mergeFiles(out string, inputs []string, csv string, opt campaign.MergeOptions, logger *slog.Logger) error {
	if slices.Contains(inputs, out) {
		return fmt.Errorf("merge: output %s is also an input", out)
	}
	doc, err := campaign.Files(inputs, opt)
	if err != nil {
		return flagged(loadFlagNames, err)
	}
	doc.Metadata.Stamp()
	if err := doc.Write(out); err != nil {
		return err
	}
	if csv != "" {
		if err := render.WriteCSVFile(csv, doc); err != nil {
			return err
		}
	}
	for _, w := range doc.Metadata.Warnings {
		logger.Warn("merged report", "warning", w)
	}
	logger.Info("merged report written", "output", out, "inputs", len(inputs), "shards", doc.Metadata.Shards, "runs", len(doc.Runs))
	render.WriteTable(os.Stdout, doc)
	return nil
}
