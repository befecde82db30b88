// Package dashboards builds gpulens's Grafana dashboards as code with the
// Grafana Foundation SDK. `go run ./dashboards/gen -out dashboards` writes
// them as JSON; the tests fail when the committed JSON differs, when a query
// does not parse or names a metric that no gpulens component serves, and
// when a panel breaks the lint rules (ids, datasource, units, descriptions,
// thresholds, hard-coded label values).
package dashboards

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/variants"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// DatasourceVar is the name of the data-source variable every query uses.
const DatasourceVar = "datasource"

// Board is one generated dashboard.
type Board struct {
	// File is the JSON file name in the dashboards folder.
	File  string
	Build func() (dashboard.Dashboard, error)
}

// All lists every dashboard.
func All() []Board {
	return []Board{
		{File: "gpulens-fleet.json", Build: fleet},
		{File: "gpulens-gpu.json", Build: gpuDetail},
		{File: "gpulens-sharing.json", Build: sharing},
		{File: "gpulens-inference.json", Build: inference},
		{File: "gpulens-cost.json", Build: cost},
	}
}

// Render builds b and encodes it as indented JSON with a final newline.
func Render(b Board) ([]byte, error) {
	d, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("building %s: %w", b.File, err)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(d); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", b.File, err)
	}
	return buf.Bytes(), nil
}

func dsRef() common.DataSourceRef {
	return common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${" + DatasourceVar + "}")}
}

// Label selectors built from the dashboard variables.
const (
	selNode = `cluster=~"$cluster",instance=~"$instance"`
	selGPU  = selNode + `,gpu=~"$gpu"`
	selLoad = `target=~"$target",model=~"$model"`
)

// board wraps the SDK builder: it numbers panels and adds rows.
type board struct {
	b  *dashboard.DashboardBuilder
	id uint32
}

func newBoard(uid, title, description string, vars ...cog.Builder[dashboard.VariableModel]) *board {
	b := dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"gpulens", "gpu"}).
		Editable().
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Refresh("30s").
		Time("now-3h", "now").
		Timezone("browser").
		WithVariable(dashboard.NewDatasourceVariableBuilder(DatasourceVar).Label("Data source").Type("prometheus"))
	for _, v := range vars {
		b.WithVariable(v)
	}
	return &board{b: b}
}

func (bd *board) nextID() uint32 {
	bd.id++
	return bd.id
}

func (bd *board) row(title string) {
	bd.b.WithRow(dashboard.NewRowBuilder(title).Id(bd.nextID()))
}

// queryVar is a multi-value label_values variable with an All option that
// also matches series without the label.
func queryVar(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(dsRef()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalCaseInsensitiveAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*").
		Current(dashboard.VariableOption{Selected: cog.ToPtr(true), Text: dashboard.StringOrArrayOfString{String: cog.ToPtr("All")}, Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")}})
}

// queryVarOne is a multi-value label_values variable without an All
// option: Grafana starts it on the first value, so a dashboard about one
// node or GPU opens on one instead of all of them.
func queryVarOne(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(dsRef()).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalCaseInsensitiveAsc).
		Multi(true).
		IncludeAll(false)
}

// Dashboard variables: new builders each time, so no dashboard shares state.
func varCluster() *dashboard.QueryVariableBuilder {
	return queryVar("cluster", "Cluster", "label_values(gpulens_gpu_info, cluster)")
}

func varInstance() *dashboard.QueryVariableBuilder {
	return queryVar("instance", "Node", `label_values(gpulens_gpu_info{cluster=~"$cluster"}, instance)`)
}

func varGPU() *dashboard.QueryVariableBuilder {
	return queryVar("gpu", "GPU", `label_values(gpulens_gpu_info{cluster=~"$cluster",instance=~"$instance"}, gpu)`)
}

// varInstanceOne and varGPUOne open on the first node and its first GPU
// (GPU detail: one GPU's lines are readable, 32 are not).
func varInstanceOne() *dashboard.QueryVariableBuilder {
	return queryVarOne("instance", "Node", `label_values(gpulens_gpu_info{cluster=~"$cluster"}, instance)`)
}

func varGPUOne() *dashboard.QueryVariableBuilder {
	return queryVarOne("gpu", "GPU", `label_values(gpulens_gpu_info{cluster=~"$cluster",instance=~"$instance"}, gpu)`)
}

func varNamespace() *dashboard.QueryVariableBuilder {
	return queryVar("namespace", "Namespace", `label_values(gpulens_process_info{cluster=~"$cluster"}, namespace)`)
}

func varTarget() *dashboard.QueryVariableBuilder {
	return queryVar("target", "Target", "label_values(gpulens_loadgen_run_info, target)")
}

func varModel() *dashboard.QueryVariableBuilder {
	return queryVar("model", "Model", `label_values(gpulens_loadgen_run_info{target=~"$target"}, model)`)
}

// q is one query of a panel.
type q struct {
	expr, legend string
	instant      bool // table panels: one instant value per series
}

func targets(qs []q) []cog.Builder[variants.Dataquery] {
	out := make([]cog.Builder[variants.Dataquery], 0, len(qs))
	for i, x := range qs {
		t := prometheus.NewDataqueryBuilder().
			Datasource(dsRef()).
			RefId(string(rune('A' + i))).
			Expr(x.expr)
		if x.legend != "" {
			t.LegendFormat(x.legend)
		}
		if x.instant {
			t.Instant().Format(prometheus.PromQueryFormatTable)
		} else {
			t.Range()
		}
		out = append(out, t)
	}
	return out
}

// steps builds thresholds from a base colour and (value, colour) pairs:
// steps("green", 0.8, "orange", 0.95, "red").
func steps(base string, pairs ...any) *dashboard.ThresholdsConfigBuilder {
	s := []dashboard.Threshold{{Color: base}}
	for i := 0; i+1 < len(pairs); i += 2 {
		var v float64
		switch x := pairs[i].(type) {
		case int:
			v = float64(x)
		case float64:
			v = x
		default:
			panic(fmt.Sprintf("threshold value %v is not a number", pairs[i]))
		}
		s = append(s, dashboard.Threshold{Value: cog.ToPtr(v), Color: pairs[i+1].(string)})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(s)
}

// panel is the common part of a panel definition.
type panel struct {
	title, desc, unit string
	th                *dashboard.ThresholdsConfigBuilder
	w, h              uint32
	min, max          *float64
	// decimals fixes the decimals shown (nil: Grafana's choice, which
	// writes a cost per request of 8.44e-05 in exponent notation).
	decimals *float64
	qs       []q
	// units overrides the unit of a query's values, by RefId: a table
	// column ("Value #B") or, in a time series, a right-hand axis.
	units map[string]string
}

func (p panel) size() (uint32, uint32) {
	w, h := p.w, p.h
	if w == 0 {
		w = 12
	}
	if h == 0 {
		h = 8
	}
	return w, h
}

func (p panel) thresholds() *dashboard.ThresholdsConfigBuilder {
	if p.th == nil {
		return steps("green")
	}
	return p.th
}

func (bd *board) ts(p panel, opts ...func(*timeseries.PanelBuilder)) {
	w, h := p.size()
	b := timeseries.NewPanelBuilder().
		Id(bd.nextID()).
		Title(p.title).
		Description(p.desc).
		Datasource(dsRef()).
		Unit(p.unit).
		Thresholds(p.thresholds()).
		Span(w).Height(h).
		Targets(targets(p.qs)).
		Legend(common.NewVizLegendOptionsBuilder().DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom).ShowLegend(true)).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending)).
		FillOpacity(10).
		LineWidth(1)
	if p.min != nil {
		b.Min(*p.min)
	}
	if p.max != nil {
		b.Max(*p.max)
	}
	if p.decimals != nil {
		b.Decimals(*p.decimals)
	}
	for _, ref := range sortedKeys(p.units) {
		b.OverrideByQuery(ref, []dashboard.DynamicConfigValue{
			{Id: "unit", Value: p.units[ref]},
			{Id: "custom.axisPlacement", Value: "right"},
		})
	}
	for _, o := range opts {
		o(b)
	}
	bd.b.WithPanel(b)
}

func (bd *board) stat(p panel) {
	w, h := p.size()
	if p.w == 0 {
		w = 4
	}
	if p.h == 0 {
		h = 4
	}
	b := stat.NewPanelBuilder().
		Id(bd.nextID()).
		Title(p.title).
		Description(p.desc).
		Datasource(dsRef()).
		Unit(p.unit).
		Thresholds(p.thresholds()).
		Span(w).Height(h).
		Targets(targets(p.qs)).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeArea).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}).Values(false))
	if p.decimals != nil {
		b.Decimals(*p.decimals)
	}
	bd.b.WithPanel(b)
}

// table shows instant queries as one row per series; hide lists columns
// to drop. Several queries are joined into one row per identifying label
// set: each query aggregates `by` the identifying labels (the first query
// may add descriptive ones, e.g. an info metric's profile), so every query
// returns the same label columns and no __name__, and Grafana's merge, which
// joins the rows whose common columns are all equal, joins exactly on those
// labels (Lint checks the queries; TestTableShapes the rows).
func (bd *board) table(p panel, hide ...string) {
	w, h := p.size()
	for i := range p.qs {
		p.qs[i].instant = true
	}
	excl := map[string]any{"Time": true, "__name__": true, "job": true}
	for _, c := range hide {
		excl[c] = true
	}
	b := table.NewPanelBuilder().
		Id(bd.nextID()).
		Title(p.title).
		Description(p.desc).
		Datasource(dsRef()).
		Unit(p.unit).
		Thresholds(p.thresholds()).
		Span(w).Height(h).
		Targets(targets(p.qs)).
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{"excludeByName": excl}})
	if p.decimals != nil {
		b.Decimals(*p.decimals)
	}
	for _, ref := range sortedKeys(p.units) {
		b.OverrideByName("Value #"+ref, []dashboard.DynamicConfigValue{{Id: "unit", Value: p.units[ref]}})
	}
	bd.b.WithPanel(b)
}

// by aggregates expr by labels (max: each identifying label set has one
// series), the form a query of a joined table takes.
func by(labels []string, expr string) string {
	return "max by (" + strings.Join(labels, ", ") + ") (" + expr + ")"
}

// orZero makes an empty result 0: a health panel reads 0, not "No data",
// when nothing is wrong. `on ()` adds the 0 only when expr has no series.
func orZero(expr string) string { return expr + " or on () vector(0)" }

func (bd *board) build() (dashboard.Dashboard, error) { return bd.b.Build() }

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func f(v float64) *float64 { return &v }

// legend formats.
const (
	lgGPU = "{{instance}} GPU {{gpu}}"
	lgLG  = "{{model}} @ {{target}}"
)

// stacked stacks a time series panel's series.
func stacked(b *timeseries.PanelBuilder) {
	b.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}
