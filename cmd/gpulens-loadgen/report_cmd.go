package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/loadgen/render"
	"github.com/gpulens/gpulens/loadgen/report"
)

// reportCommand is `gpulens-loadgen report FILE.json --html OUT.html`.
func reportCommand(app *kingpin.Application) command {
	cmd := app.Command("report", "Render a JSON report of run, sweep or merge as a self-contained HTML page.")
	input := cmd.Arg("report", "JSON report written by --output.").Required().String()
	html := cmd.Flag("html", "HTML file to write.").Required().PlaceHolder("OUT.html").String()
	return command{clause: cmd, run: func(_ context.Context, logger *slog.Logger) error {
		return renderReport(*input, *html, logger)
	}}
}

func renderReport(input, html string, logger *slog.Logger) error {
	doc, err := report.Read(input)
	if err != nil {
		return usageError{err}
	}
	if len(doc.Runs) == 0 {
		return usageError{fmt.Errorf("report %s has no runs: nothing to render", input)}
	}
	if err := render.WriteFile(html, doc); err != nil {
		return fmt.Errorf("--html: %w", err)
	}
	logger.Info("HTML report written", "input", input, "html", html, "runs", len(doc.Runs))
	return nil
}
