package dashboards

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpulens/gpulens/alerts/promcheck"
)

// Lint checks one dashboard's JSON and returns every problem found, each
// naming the panel: the JSON must decode strictly into the SDK's dashboard
// type; panel ids are unique; a ${datasource} variable exists and every
// panel and target uses it; every panel has a title, a description, a unit,
// thresholds and at least one non-empty query; range vectors use
// $__rate_interval or $__range; label matchers never hard-code a value of
// cluster, instance, node, gpu, uuid, namespace, pod, container, target or
// model; every $variable a query uses is defined; a table with several
// queries joins them on explicit labels (checkTableJoin).
func Lint(raw []byte) []string {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }

	var typed dashboard.Dashboard
	if err := typed.UnmarshalJSONStrict(raw); realError(err) {
		add("strict decode: %v", err)
	} else if err := typed.Validate(); realError(err) {
		add("validate: %v", err)
	}

	var d lintDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return append(probs, fmt.Sprintf("decode: %v", err))
	}
	vars := map[string]bool{}
	hasDS := false
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Name == DatasourceVar && v.Type == "datasource" && v.Query == "prometheus" {
			hasDS = true
		}
		if v.Type == "query" {
			if !usesDatasourceVar(v.Datasource) {
				add("variable %s: datasource is not ${%s}", v.Name, DatasourceVar)
			}
			probs = append(probs, checkExpr(fmt.Sprintf("variable %s", v.Name), v.Query, nil)...)
		}
	}
	if !hasDS {
		add("no prometheus datasource variable named %q", DatasourceVar)
	}
	if d.Title == "" || d.UID == "" {
		add("dashboard needs a title and a uid")
	}

	ids := map[int]string{}
	for _, p := range d.Panels {
		where := fmt.Sprintf("panel %d %q", p.ID, p.Title)
		if prev, dup := ids[p.ID]; dup {
			add("%s: id %d already used by %q", where, p.ID, prev)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			if len(p.Panels) > 0 {
				add("%s: collapsed rows hide panels from the lint; keep rows open", where)
			}
			continue
		}
		if p.Title == "" {
			add("%s: no title", where)
		}
		if strings.TrimSpace(p.Description) == "" {
			add("%s: no description", where)
		}
		if !usesDatasourceVar(p.Datasource) {
			add("%s: panel datasource is not ${%s}", where, DatasourceVar)
		}
		if p.FieldConfig.Defaults.Unit == "" {
			add("%s: no unit", where)
		}
		if p.FieldConfig.Defaults.Thresholds == nil || len(p.FieldConfig.Defaults.Thresholds.Steps) == 0 {
			add("%s: no thresholds", where)
		}
		if len(p.Targets) == 0 {
			add("%s: no queries", where)
		}
		for _, t := range p.Targets {
			tw := fmt.Sprintf("%s target %s", where, t.RefID)
			if !usesDatasourceVar(t.Datasource) {
				add("%s: datasource is not ${%s}", tw, DatasourceVar)
			}
			if strings.TrimSpace(t.Expr) == "" {
				add("%s: empty expression", tw)
				continue
			}
			probs = append(probs, checkExpr(tw, t.Expr, vars)...)
		}
		if p.Type == "table" && len(p.Targets) > 1 {
			probs = append(probs, checkTableJoin(where, p)...)
		}
	}
	return probs
}

// checkTableJoin checks a table that shows several queries side by side.
// Grafana's merge transformation joins the rows of its queries whose common
// columns are all equal: with bare selectors that includes __name__, which
// differs between queries, and each label only some series carry, so a
// process would show as several half-empty rows. Each query must therefore
// be an aggregation `by` an explicit label list (no __name__, no stray
// labels), the lists the same for every query but the first, which may add
// descriptive labels (e.g. an info metric's profile): the rows then join
// on exactly those labels. TestTableShapes checks the rows on data.
func checkTableJoin(where string, p lintPanel) []string {
	var probs []string
	merged := false
	for _, tr := range p.Transformations {
		merged = merged || tr.ID == "merge"
	}
	if !merged {
		probs = append(probs, fmt.Sprintf("%s: a table of %d queries needs the merge transformation to join them", where, len(p.Targets)))
	}
	var key []string
	for i, t := range p.Targets {
		labels, err := joinLabels(t.Expr)
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s target %s: %v", where, t.RefID, err))
			return probs
		}
		switch {
		case i == 0:
			key = labels
		case i == 1:
			for _, l := range labels {
				if !slices.Contains(key, l) {
					probs = append(probs, fmt.Sprintf("%s target %s: joins on %v, which target %s's labels %v do not all include", where, t.RefID, labels, p.Targets[0].RefID, key))
					return probs
				}
			}
			key = labels
		case !slices.Equal(labels, key):
			probs = append(probs, fmt.Sprintf("%s target %s: joins on %v, target %s on %v: every query after the first must aggregate by the same labels", where, t.RefID, labels, p.Targets[1].RefID, key))
		}
	}
	return probs
}

// joinLabels returns the sorted `by` labels of an aggregation expression.
func joinLabels(expr string) ([]string, error) {
	e, err := promcheck.Parse(expr)
	if err != nil {
		return nil, err
	}
	for {
		pe, ok := e.(*parser.ParenExpr)
		if !ok {
			break
		}
		e = pe.Expr
	}
	agg, ok := e.(*parser.AggregateExpr)
	if !ok || agg.Without || len(agg.Grouping) == 0 || agg.Param != nil {
		return nil, fmt.Errorf("%q is not an aggregation by the labels to join the table's rows on, e.g. max by (cluster, instance, gpu, pid) (...)", expr)
	}
	labels := slices.Clone(agg.Grouping)
	slices.Sort(labels)
	return labels, nil
}

// realError reports whether err is an error: in v0.0.22 the SDK's strict
// decoding and validation return an empty cog.BuildErrors on success.
func realError(err error) bool {
	if err == nil {
		return false
	}
	var be cog.BuildErrors
	return !errors.As(err, &be) || len(be) > 0
}

var (
	rangeRe    = regexp.MustCompile(`\[([^\]]*)\]`)
	matcherRe  = regexp.MustCompile(`\b(cluster|instance|node|gpu|uuid|mig_uuid|namespace|pod|container|target|model)\s*(=~|!~|=|!=)\s*"([^"]*)"`)
	varUseRe   = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)`)
	allowedRng = map[string]bool{"$__rate_interval": true, "$__range": true}
)

// checkExpr applies the expression rules; vars nil skips the variable check.
func checkExpr(where, expr string, vars map[string]bool) []string {
	var probs []string
	for _, m := range rangeRe.FindAllStringSubmatch(expr, -1) {
		r := m[1]
		if i := strings.Index(r, ":"); i >= 0 { // subquery [range:step]
			r = r[:i]
		}
		if !allowedRng[r] {
			probs = append(probs, fmt.Sprintf("%s: range [%s] in %q: use [$__rate_interval] (or [$__range] for totals over the time range); put fixed windows in a recording rule", where, m[1], expr))
		}
	}
	for _, m := range matcherRe.FindAllStringSubmatch(expr, -1) {
		if !strings.Contains(m[3], "$") {
			probs = append(probs, fmt.Sprintf("%s: hard-coded %s%s%q in %q: use a dashboard variable", where, m[1], m[2], m[3], expr))
		}
	}
	if vars != nil {
		for _, m := range varUseRe.FindAllStringSubmatch(expr, -1) {
			if !strings.HasPrefix(m[1], "__") && !vars[m[1]] {
				probs = append(probs, fmt.Sprintf("%s: variable $%s is not defined", where, m[1]))
			}
		}
	}
	return probs
}

func usesDatasourceVar(ds *lintDatasource) bool {
	return ds != nil && ds.Type == "prometheus" && (ds.UID == "${"+DatasourceVar+"}" || ds.UID == "$"+DatasourceVar)
}

// The subset of the dashboard JSON the lint reads.
type (
	lintDashboard struct {
		UID        string      `json:"uid"`
		Title      string      `json:"title"`
		Panels     []lintPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				Type       string          `json:"type"`
				Query      string          `json:"query"`
				Datasource *lintDatasource `json:"datasource"`
			} `json:"list"`
		} `json:"templating"`
	}
	lintPanel struct {
		ID          int             `json:"id"`
		Type        string          `json:"type"`
		Title       string          `json:"title"`
		Description string          `json:"description"`
		Datasource  *lintDatasource `json:"datasource"`
		Targets     []struct {
			RefID      string          `json:"refId"`
			Expr       string          `json:"expr"`
			Datasource *lintDatasource `json:"datasource"`
		} `json:"targets"`
		FieldConfig struct {
			Defaults struct {
				Unit       string `json:"unit"`
				Thresholds *struct {
					Steps []json.RawMessage `json:"steps"`
				} `json:"thresholds"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Transformations []struct {
			ID string `json:"id"`
		} `json:"transformations"`
		Panels []json.RawMessage `json:"panels"`
	}
	lintDatasource struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
)

// Expressions returns every PromQL expression of a dashboard's JSON, keyed
// by where it is ("panel 3 \"Title\" target A", "variable gpu"), sorted by
// key: panel targets and the selectors of label_values variables.
func Expressions(raw []byte, labelValuesSelector func(string) (string, bool)) (map[string]string, []string, error) {
	var d lintDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, nil, fmt.Errorf("decoding dashboard: %w", err)
	}
	out := map[string]string{}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		sel, ok := labelValuesSelector(v.Query)
		if !ok {
			return nil, nil, fmt.Errorf("variable %s: query %q is not label_values(selector, label)", v.Name, v.Query)
		}
		out["variable "+v.Name] = sel
	}
	for _, p := range d.Panels {
		for _, t := range p.Targets {
			out[fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, t.RefID)] = t.Expr
		}
	}
	keys := make([]string, 0, len(out))
	for k := range out {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return out, keys, nil
}
