package render

import (
	"bytes"
	"html/template"
	"strings"

	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/report"
)

// searchTemplate is the page's "Capacity under the SLO" section
// (`gpulens-loadgen search`): the verdict, the objectives and the rule,
// one row per probed level (the bracket's ends marked) with every run's
// value of every objective, and the probes in order.
var searchTemplate = template.Must(template.New("search").Parse(`<h2 id="search">Capacity under the SLO</h2>
<p class="search-verdict"><strong>{{.Verdict}}</strong></p>
<table class="kv">
<tr><th>Objectives</th><td>{{.Objectives}}</td></tr>
<tr><th>Rule</th><td>{{.S.Rule}}</td></tr>
<tr><th>Runs per probe</th><td>{{.S.Repeats}}</td></tr>
<tr><th>Search</th><td>from {{.Start}}, ×{{.S.Growth}} until a level fails (at most {{.Max}}), then bisection until (fail − pass) ≤ {{.S.Precision}} × pass, at most {{.S.MaxProbes}} probes; both ends then measured again</td></tr>
<tr><th>Stopped</th><td>{{.S.Stop}}</td></tr>
{{if .S.Confirmation}}<tr><th>Confirmation</th><td>{{.S.Confirmation}}</td></tr>
{{end}}</table>
{{range .S.NonMonotone}}<div class="warn">⚠ {{.}}</div>
{{end}}<div class="scroll">
<table class="runs search">
<tr><th>Level</th><th>Verdict</th><th class="n">Runs passed</th>{{range .S.Objectives}}<th>{{.Text}}</th>{{end}}</tr>
{{range .Rows}}<tr data-level="{{.Level}}"{{if .End}} class="bracket"{{end}}><td class="n">{{.Label}}</td><td>{{if .Passed}}pass{{else}}<span class="flag">fail</span>{{end}}{{if .End}} ◀ {{.End}}{{end}}</td><td class="n">{{.RunsPassed}}</td>
{{range .Cells}}<td>{{range $i, $v := .}}{{if $i}}, {{end}}{{if $v.Miss}}<span class="flag">{{$v.Text}} ✗</span>{{else}}{{$v.Text}}{{end}}{{if $v.Confirm}}<sup title="confirming run">c</sup>{{end}}{{end}}</td>{{end}}</tr>
{{end}}</table>
</div>
<p class="caption">Each cell lists the level's runs in order; ✗: the run missed that objective; <sup>c</sup>: a confirming run. Probes in order: {{.Probes}}.</p>
`))

type searchCell struct {
	Text          string
	Miss, Confirm bool
}

type searchRow struct {
	Level      float64
	Label, End string
	Passed     bool
	RunsPassed string
	Cells      [][]searchCell
}

// searchSection renders the search section of a report with
// metadata.search.
func searchSection(s *report.Search) (template.HTML, error) {
	open := s.Mode == report.ModeOpen
	l := func(v float64) string { return report.Level(open, v) }
	var objs, probes []string
	for _, o := range s.Objectives {
		objs = append(objs, o.Text)
	}
	for _, p := range s.Probes {
		v := "pass"
		if !p.Passed {
			v = "fail"
		}
		probes = append(probes, p.Phase+" "+l(p.Level)+" "+v)
	}
	data := struct {
		S                                       *report.Search
		Verdict, Objectives, Start, Max, Probes string
		Rows                                    []searchRow
	}{S: s, Verdict: campaign.Verdict(s), Objectives: strings.Join(objs, ", "), Start: l(s.Start), Max: l(s.Max), Probes: strings.Join(probes, " → ")}
	for _, lv := range s.Levels {
		row := searchRow{Level: lv.Level, Label: l(lv.Level), Passed: lv.Passed, Cells: make([][]searchCell, len(s.Objectives))}
		switch lv.Level {
		case s.Pass:
			row.End = "highest passing"
		case s.Fail:
			row.End = "lowest failing"
		}
		passed := 0
		for _, r := range lv.Runs {
			if r.Passed {
				passed++
			}
			for i, o := range s.Objectives {
				if i < len(r.Checks) {
					row.Cells[i] = append(row.Cells[i], searchCell{Text: campaign.ObjectiveValue(o, r.Checks[i]), Miss: !r.Checks[i].Passed, Confirm: r.Confirm})
				}
			}
		}
		row.RunsPassed = report.Num(float64(passed)) + "/" + report.Num(float64(len(lv.Runs)))
		data.Rows = append(data.Rows, row)
	}
	var b bytes.Buffer
	if err := searchTemplate.Execute(&b, data); err != nil {
		return "", err
	}
	return template.HTML(b.String()), nil //nolint:gosec // rendered by html/template above
}
