package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/compare"
	"github.com/gpulens/gpulens/loadgen/render"
)

// compareCommand is `gpulens-loadgen compare A.json B.json [C.json …]`.
func compareCommand(app *kingpin.Application) command {
	cmd := app.Command("compare", "Compare reports of the same workload (two hosts, GPUs or server versions) level by level, with 95 % confidence intervals from the repeats and a verdict on whether each difference is larger than the noise (Welch's t-test); every report after the first is compared with the first.")
	inputs := cmd.Arg("reports", "JSON reports of run, sweep or merge: the baseline first.").Required().Strings()
	html := cmd.Flag("html", "Also write the comparison as a self-contained HTML page.").PlaceHolder("OUT.html").String()
	format := cmd.Flag("format", "Output on stdout: text or json.").Default("text").Enum("text", "json")
	return command{clause: cmd, run: func(_ context.Context, logger *slog.Logger) error {
		return compareReports(*inputs, *html, *format, os.Stdout, logger)
	}}
}

func compareReports(paths []string, html, format string, w io.Writer, logger *slog.Logger) error {
	if len(paths) < 2 {
		return usageError{fmt.Errorf("compare needs at least two reports, got %d", len(paths))}
	}
	inputs, err := readReports(paths)
	if err != nil {
		return err
	}
	res, err := compare.Compare(inputs)
	if err != nil {
		return usageError{err}
	}
	for _, x := range res.Warnings {
		logger.Warn("configurations differ", "warning", x)
	}
	if html != "" {
		if err := render.WriteCompareFile(html, res); err != nil {
			return fmt.Errorf("--html: %w", err)
		}
		logger.Info("HTML comparison written", "html", html)
	}
	return writeResult(w, format, res, res.WriteText)
}
