// Package render writes a load-generator report document (package
// loadgen/report) for people. As text (text*.go): a CSV summary (one row
// per run: every figure of report.SummaryFigures, the error counts, then
// report.GPUFigures, report.TokenFigures, report.PromptFigures and
// report.ReasoningFigures) and the console table gpulens-loadgen prints at
// the end of a command, with its warnings and notes. As HTML (html*.go):
// one self-contained page with metadata and summary tables and inline SVG
// charts, with no network access needed to view it; all text from the
// report is escaped by html/template.
package render
