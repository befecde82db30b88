package verify

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"strings"
)

//go:embed compare.html.tmpl
var compareTemplate string

var comparePage = styledTemplate("compare", compareTemplate, template.FuncMap{
	"upper":  func(v CompareVerdict) string { return strings.ToUpper(string(v)) },
	"devref": devRefLine,
})

type htmlPair struct {
	DC   DeviceComparison
	Pair string
	Rows []compareRow
}

type htmlCompared struct {
	RC                       ReportComparison
	File, Ref, Hosts, Counts string
	Devices                  []htmlPair
}

type htmlComparison struct {
	C                              *Comparison
	Title, Rules, Baseline, Counts string
	Simulated                      bool
	Reports                        []htmlCompared
}

// WriteCompareHTML renders a comparison as one self-contained HTML page in
// the report's style (inline CSS, no scripts, no external resources); all
// text is escaped by html/template. Each figure is a row coloured by its
// verdict, with data-figure (its ID) and the full reason as its title.
func WriteCompareHTML(w io.Writer, c *Comparison) error {
	v := htmlComparison{C: c, Title: "GPU host comparison", Rules: "Rule: " + rulesLine(c.Settings) + ".",
		Baseline: refLine(c.Baseline), Counts: countsLine(c.Summary.CompareCounts), Simulated: c.Baseline.Simulated != nil}
	for _, rc := range c.Comparisons {
		hc := htmlCompared{RC: rc, File: rc.Other.File, Ref: refLine(rc.Other), Hosts: hostsLine(rc), Counts: countsLine(rc.Counts)}
		v.Simulated = v.Simulated || rc.Other.Simulated != nil
		for _, dc := range rc.Devices {
			hc.Devices = append(hc.Devices, htmlPair{DC: dc, Pair: pairLine(dc), Rows: compareRows(dc, c.Settings)})
		}
		v.Reports = append(v.Reports, hc)
	}
	if err := comparePage.Execute(w, v); err != nil {
		return fmt.Errorf("rendering HTML comparison: %w", err)
	}
	return nil
}
