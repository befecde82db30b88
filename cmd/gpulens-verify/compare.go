package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"

	"github.com/gpulens/gpulens/internal/verify"
)

// `gpulens-verify compare BASELINE.json OTHER.json...`: reports of this
// tool compared figure by figure with the first (verify.Compare).

type compareOptions struct {
	files                  []string
	tolerance, ratioTol    float64
	outputJSON, outputHTML string
}

func parseCompareFlags(args []string, stderr io.Writer) (*compareOptions, error) {
	app, o := newCompareApp(stderr)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	if len(o.files) < 2 {
		return nil, fmt.Errorf("compare needs at least two reports, the baseline and one to compare with it; got %d", len(o.files))
	}
	if err := checkOutputs(o.outputJSON, o.outputHTML); err != nil {
		return nil, err
	}
	for _, out := range []string{o.outputJSON, o.outputHTML} {
		for _, f := range o.files {
			if out != "" && filepath.Clean(out) == filepath.Clean(f) {
				return nil, fmt.Errorf("the output %s is one of the reports compared", out)
			}
		}
	}
	return o, nil
}

// newCompareApp declares the compare command's flags, stored in the
// options it returns.
func newCompareApp(stderr io.Writer) (*kingpin.Application, *compareOptions) {
	app := kingpin.New("gpulens-verify compare", "Compare two or more JSON reports of gpulens-verify (--output.json) figure by figure with the first, the baseline: the same host last month and today, or two providers' hosts. GPUs are matched by UUID (the same host), else paired by model and position. A figure is better or worse only when its medians differ by more than the tolerance and every run of one report lies beyond every run of the other (with at least 3 runs each, or as many as make that a 1-in-20 chance); otherwise it is same or inconclusive. Exit status: 0 no figure worse, 1 a figure worse, 2 bad input (a file that is not a gpulens-verify report of this schema version).")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	o := &compareOptions{}
	tol := shareValue{name: "compare.tolerance", v: &o.tolerance}
	ratioTol := shareValue{name: "compare.ratio-tolerance", v: &o.ratioTol}
	app.Arg("reports", "The baseline's JSON report, then one or more to compare with it.").Required().StringsVar(&o.files)
	app.Flag("compare.tolerance", "The smallest change of a median that counts, as a share of the baseline's: 5% or 0.05 (figures other than ratios).").Default(fmtShare(verify.DefaultCompareTolerance)).SetValue(&tol)
	app.Flag("compare.ratio-tolerance", "The smallest change of a ratio figure (stolen time, 0–1) that counts, in absolute terms: 5% or 0.05 is 5 percentage points.").Default(fmtShare(verify.DefaultCompareRatioTolerance)).SetValue(&ratioTol)
	app.Flag("output.json", "Also write the comparison as JSON to this file.").PlaceHolder("FILE").StringVar(&o.outputJSON)
	app.Flag("output.html", "Also write the comparison as a self-contained HTML page to this file.").PlaceHolder("FILE").StringVar(&o.outputHTML)
	app.Version(version.Print("gpulens-verify"))
	app.HelpFlag.Short('h')
	return app, o
}

// runCompare is `gpulens-verify compare`: every report is read and checked
// before anything is compared or written.
func runCompare(args []string, stdout, stderr io.Writer) int {
	o, err := parseCompareFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-verify compare: error: %v\n", err)
		return verify.ExitBadInput
	}
	reports := make([]verify.NamedReport, len(o.files))
	for i, f := range o.files {
		r, err := verify.ReadReportFile(f)
		if err != nil {
			fmt.Fprintf(stderr, "gpulens-verify compare: error: %v\n", err)
			return verify.ExitBadInput
		}
		reports[i] = verify.NamedReport{File: f, Report: r}
	}
	c := verify.Compare(reports[0], reports[1:], verify.CompareOptions{
		Tool: verify.CompareTool, Version: version.Version, Tolerance: o.tolerance, RatioTolerance: o.ratioTol,
	})
	if err := verify.WriteCompareText(stdout, c); err != nil {
		fmt.Fprintf(stderr, "gpulens-verify compare: error: writing the comparison: %v\n", err)
		return verify.ExitBadInput
	}
	for _, out := range []struct {
		path   string
		render func(io.Writer, *verify.Comparison) error
	}{{o.outputJSON, verify.WriteCompareJSON}, {o.outputHTML, verify.WriteCompareHTML}} {
		if out.path == "" {
			continue
		}
		if err := verify.WriteCompareFile(out.path, c, out.render); err != nil {
			fmt.Fprintf(stderr, "gpulens-verify compare: error: %v\n", err)
			return verify.ExitBadInput
		}
	}
	return c.Summary.ExitCode
}

// checkOutputs refuses --output.json and --output.html in a folder that
// does not exist, or naming the same file.
func checkOutputs(jsonPath, htmlPath string) error {
	for _, out := range []struct{ flag, path string }{{"output.json", jsonPath}, {"output.html", htmlPath}} {
		if out.path == "" {
			continue
		}
		dir := filepath.Dir(out.path)
		if st, err := os.Stat(dir); err != nil || !st.IsDir() {
			return fmt.Errorf("--%s: folder %s does not exist", out.flag, dir)
		}
	}
	if jsonPath != "" && jsonPath == htmlPath {
		return fmt.Errorf("--output.json and --output.html name the same file %s", jsonPath)
	}
	return nil
}

// shareValue is a share flag ("5%" or "0.05") whose errors name it.
type shareValue struct {
	name string
	v    *float64
}

func (s *shareValue) Set(str string) error {
	v, err := verify.ParseShare(str)
	if err != nil {
		return fmt.Errorf("--%s: %w", s.name, err)
	}
	*s.v = v
	return nil
}

func (s *shareValue) String() string { return fmtShare(*s.v) }

// fmtShare formats a share as a percentage: 0.05 → "5%".
func fmtShare(v float64) string {
	return strings.TrimSuffix(strconv.FormatFloat(v*100, 'f', -1, 64), ".0") + "%"
}
