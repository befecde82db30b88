package render

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gpulens/gpulens/loadgen/report"
)

//go:embed page.html.tmpl
var pageTemplate string

var page = template.Must(template.New("page").Funcs(template.FuncMap{
	"f1":   func(v float64) string { return strconv.FormatFloat(v, 'f', 1, 64) },
	"secs": report.SecondsTick,
	// tokens: a length asked for and the server's count (p50).
	"tokens": fmtTokens,
	"usd":    report.USDTick,
	"num":    report.Num,
	"pct":    report.Percent,
	// search: the capacity search's section (search.go).
	"search": searchSection,
	"bytes": func(v float64) string {
		return report.Bytes(v)
	},
	"time": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format(time.RFC3339)
	},
}).Parse(pageTemplate))

// Chart names, the data-chart attribute of each chart element.
const (
	ChartTTFT             = "latency-ttft"
	ChartITL              = "latency-itl"
	ChartTPOT             = "latency-tpot"
	ChartE2E              = "latency-e2e"
	ChartTTFTVsLevel      = "ttft-vs-level"
	ChartThroughputVsLvl  = "output-tokens-per-second-vs-level"
	ChartCostVsLevel      = "cost-per-request-vs-level"
	ChartErrorsByClass    = "errors-by-class"
	ChartGoodputVsLevel   = "goodput-vs-level"
	ChartScheduleLagLevel = "schedule-lag-vs-level"
)

// Charts lists the charts every page has, in page order.
var Charts = []string{ChartTTFT, ChartITL, ChartTPOT, ChartE2E, ChartTTFTVsLevel, ChartThroughputVsLvl,
	ChartGoodputVsLevel, ChartCostVsLevel, ChartScheduleLagLevel, ChartErrorsByClass}

type kv struct{ K, V string }

type view struct {
	Title    string
	Doc      *report.Document
	Meta     []kv
	Settings []kv
	Runs     []runRow
	// Reasoning holds the runs that reasoned (reasoning.go).
	Reasoning []reasoningRow
	// Prompts: the prefix cache and images of the runs that have them
	// (prompts.go).
	Prompts  []promptRow
	Charts   []chart
	Warnings []string
	// Aggregates: some rows are the means of a level's repeats.
	Aggregates bool
	Generated  string
}

type runRow struct {
	report.Run
	Label string
	Error int
}

// WriteFile renders doc into an HTML file at path (report.Write: a
// regular file atomically, a device, FIFO or symlink in place). A document
// without runs is refused: there is nothing to render.
func WriteFile(path string, doc *report.Document) error {
	if len(doc.Runs) == 0 {
		return ErrNoRuns
	}
	if err := report.Write(path, func(w io.Writer) error { return Render(w, doc) }); err != nil {
		return fmt.Errorf("writing HTML report %s: %w", path, err)
	}
	return nil
}

// ErrNoRuns: the document has no runs to render.
var ErrNoRuns = errors.New("the report has no runs to render")

// Render writes the HTML page for doc.
func Render(w io.Writer, doc *report.Document) error {
	v := build(doc)
	if err := page.Execute(w, v); err != nil {
		return fmt.Errorf("rendering HTML report: %w", err)
	}
	return nil
}

func build(doc *report.Document) view {
	m := doc.Metadata
	v := view{Doc: doc, Title: "gpulens load report"}
	if m.Model != "" {
		v.Title += ": " + m.Model
	}
	add := func(k, val string) {
		if val != "" {
			v.Meta = append(v.Meta, kv{k, val})
		}
	}
	add("Tool", m.Tool)
	add("Version", m.Version)
	add("Revision", m.Revision)
	add("Go version", m.GoVersion)
	add("Command", m.Command)
	add("Run ID", m.RunID)
	if !m.Started.IsZero() {
		add("Started", m.Started.UTC().Format(time.RFC3339))
	}
	if !m.Finished.IsZero() {
		add("Finished", m.Finished.UTC().Format(time.RFC3339))
	}
	add("Target", m.Target)
	add("Endpoint", m.Endpoint)
	add("Model (requested)", m.Model)
	add("Model (server)", m.ServerModel)
	add("Scenario", m.Scenario)
	add("Dataset", m.Dataset)
	add("Dataset SHA-256", m.DatasetSHA256)
	add("Seed", strconv.FormatInt(m.Seed, 10))
	add("Prompt nonce", m.PromptNonce)
	if m.Interrupted {
		add("Interrupted", "yes: results cover what was measured before the stop")
	}
	for _, s := range m.Shards {
		add("Shard", s)
	}
	if g := m.GPU; g != nil {
		add("GPU exporter", g.ExporterURL)
		for _, gpu := range g.GPUs {
			add("GPU "+gpu.GPU, fmt.Sprintf("%s (UUID %s, driver %s, CUDA %s)", gpu.Name, gpu.UUID, gpu.DriverVersion, gpu.CUDADriverVersion))
		}
		for _, mi := range g.MIG {
			add("MIG instance on GPU "+mi.GPU, mi.Profile)
		}
		if g.Samples > 0 {
			add("Peak GPU memory used", report.Bytes(g.PeakMemoryUsedBytes))
			add("Mean GPU utilisation", report.Percent(g.MeanUtilizationRatio))
			add("GPU samples", strconv.Itoa(g.Samples))
		}
		add("GPU exporter error", g.Error)
	}
	if c := m.TokenCalibration; c != nil {
		if c.Error != "" {
			add("Token calibration", c.Method+" failed: "+c.Error)
		} else if c.Calibrated == report.CalibratedDatasetReplies {
			add("Token calibration", fmt.Sprintf("output lengths: the dataset's replies in the server's tokens (%s: %d counted, %.3f tokens per word for the others; not measured)", c.Method, len(c.Probes), c.TokensPerWord))
		} else {
			add("Token calibration", fmt.Sprintf("%s: %.3f tokens per word + %.1f tokens per request (%d probes, not measured)", c.Method, c.TokensPerWord, c.OverheadTokens, len(c.Probes)))
		}
	}
	v.Meta = append(v.Meta, manifestRows(m.Manifest)...) // server, host, labels, settings hash (manifest.go)
	v.Warnings = append([]string(nil), m.Warnings...)
	for _, r := range doc.Runs {
		if g := r.GPU; g != nil && g.Warning != "" && !r.Aggregate {
			v.Warnings = append(v.Warnings, r.Name+": energy: "+g.Warning)
		}
		v.Aggregates = v.Aggregates || r.Aggregate
		for _, msg := range report.TokenDeviations(&r.Summary) {
			v.Warnings = append(v.Warnings, r.Name+": "+msg)
		}
	}
	if len(doc.Runs) > 0 {
		v.Settings = settingsRows(doc.Runs[0].Settings)
		if pts := levels(doc.Runs); len(pts) > 1 {
			// The level varies per run: list the levels instead of the
			// first run's concurrency or rate.
			var ls []string
			for _, p := range pts {
				ls = append(ls, p.label)
			}
			var kept []kv
			for _, row := range v.Settings {
				if row.K != "Concurrency" && row.K != "Rate (req/s)" {
					kept = append(kept, row)
				}
			}
			v.Settings = append([]kv{{"Levels (" + levelName(doc.Runs) + ")", strings.Join(ls, ", ")}}, kept...)
		}
	}
	labels := runLabels(doc.Runs)
	for i, r := range doc.Runs {
		n := 0
		for _, c := range r.Summary.Errors {
			n += c
		}
		v.Runs = append(v.Runs, runRow{Run: r, Label: labels[i], Error: n})
	}
	v.Reasoning = reasoningRows(doc.Runs, labels)
	v.Prompts = promptRows(doc.Runs)
	v.Charts = charts(doc, labels)
	return v
}

func settingsRows(s report.Settings) []kv {
	var out []kv
	add := func(k, val string) {
		if val != "" && val != "0" {
			out = append(out, kv{k, val})
		}
	}
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	add("Mode", s.Mode)
	add("Concurrency", strconv.Itoa(s.Concurrency))
	add("Rate (req/s)", f(s.Rate))
	add("Arrival", s.Arrival)
	add("Burstiness", f(s.Burstiness))
	add("Max concurrency", strconv.Itoa(s.MaxConcurrency))
	add("Duration (s)", f(s.DurationSeconds))
	add("Requests", strconv.Itoa(s.Requests))
	add("Warm-up (s)", f(s.WarmupSeconds))
	add("Ramp-up (s)", f(s.RampUpSeconds))
	add("Timeout (s)", f(s.TimeoutSeconds))
	add("Grace period (s)", f(s.GracePeriodSeconds))
	add("Endpoint", s.Endpoint)
	add("Model", s.Model)
	add("Input tokens", s.InputTokens)
	add("Output tokens", s.OutputTokens)
	add("Dataset", s.Dataset)
	add("max_tokens", strconv.Itoa(s.MaxTokens))
	add("ignore_eos", strconv.FormatBool(s.IgnoreEOS))
	add("Seed", strconv.FormatInt(s.Seed, 10))
	add("Shard", s.Shard)
	add("Prompts", s.Prompts)
	out = append(out, workloadSettingsRows(s)...) // trace, turns (timeline.go)
	out = append(out, requestSettingsRows(s.Request)...)
	out = append(out, promptSettingsRows(s)...) // shared prefixes, images (prompts.go)
	add("SLO TTFT (s)", f(s.SLO.TTFTSeconds))
	add("SLO TPOT (s)", f(s.SLO.TPOTSeconds))
	add("SLO E2E (s)", f(s.SLO.E2ESeconds))
	add("GPU hourly price (USD)", f(s.Cost.GPUHourlyUSD))
	add("GPUs", strconv.Itoa(s.Cost.GPUs))
	add("Overhead hours", f(s.Cost.OverheadHours))
	return out
}

// levelName is "concurrency" or "rate" for the runs' mode.
func levelName(runs []report.Run) string {
	for _, r := range runs {
		if r.Settings.Mode == report.ModeOpen {
			return "rate (requests/s)"
		}
	}
	return "concurrency"
}

func fmtLevel(r report.Run) string { return report.Level(r.Settings.Mode == report.ModeOpen, r.Level) }

// runLabels gives each run a short axis label: its level, plus the repeat
// or "mean" when a level has several runs.
func runLabels(runs []report.Run) []string {
	perLevel := map[float64]int{}
	for _, r := range runs {
		perLevel[r.Level]++
	}
	out := make([]string, len(runs))
	for i, r := range runs {
		switch {
		case r.Level == 0 && len(runs) == 1:
			out[i] = r.Name
			if out[i] == "" {
				out[i] = "run"
			}
		case perLevel[r.Level] == 1:
			out[i] = fmtLevel(r)
		case r.Aggregate:
			out[i] = fmtLevel(r) + " mean"
		default:
			out[i] = fmtLevel(r) + " #" + strconv.Itoa(r.Repeat)
		}
	}
	return out
}

// primary returns the runs the per-run charts show: the aggregates when
// there are repeats, otherwise every run.
// fmtTokens is a length asked for and the server's count (p50): "256 →
// 258", the count alone when nothing was asked, "–" without a count.
func fmtTokens(asked *report.Dist, got report.Dist) string {
	if got.Count == 0 {
		return "–"
	}
	if asked == nil || asked.Count == 0 {
		return fmt.Sprintf("%.0f", got.P50)
	}
	return fmt.Sprintf("%.0f → %.0f", asked.P50, got.P50)
}

func primary(runs []report.Run, labels []string) ([]report.Run, []string) {
	var agg []report.Run
	var aggLabels []string
	for i, r := range runs {
		if r.Aggregate {
			agg = append(agg, r)
			aggLabels = append(aggLabels, labels[i])
		}
	}
	if len(agg) > 0 {
		return agg, aggLabels
	}
	return runs, labels
}

// levelPoint is one level of a sweep: the aggregate run when there is
// one, otherwise the mean of the runs at that level.
type levelPoint struct {
	level float64
	label string
	runs  []report.Run
	agg   *report.Run
}

func levels(runs []report.Run) []levelPoint {
	byLevel := map[float64]*levelPoint{}
	var order []float64
	for i := range runs {
		r := &runs[i]
		p, ok := byLevel[r.Level]
		if !ok {
			p = &levelPoint{level: r.Level, label: fmtLevel(*r)}
			byLevel[r.Level] = p
			order = append(order, r.Level)
		}
		if r.Aggregate {
			p.agg = r
		} else {
			p.runs = append(p.runs, *r)
		}
	}
	sort.Float64s(order)
	out := make([]levelPoint, len(order))
	for i, l := range order {
		out[i] = *byLevel[l]
	}
	return out
}

// value returns the level's mean of a figure (report.Figure) and, from
// the aggregate's statistics, its 95 % confidence interval (NaN when
// unknown).
func (p levelPoint) value(f report.Figure) (mean, lo, hi float64) {
	lo, hi = math.NaN(), math.NaN()
	if p.agg != nil {
		mean, _ = f.Read(p.agg)
		if st, ok := p.agg.Summary.Stats[f.Key]; ok && st.N > 1 {
			mean, lo, hi = st.Mean, st.CI95Low, st.CI95High
		}
		return mean, lo, hi
	}
	for i := range p.runs {
		v, _ := f.Read(&p.runs[i])
		mean += v / float64(len(p.runs))
	}
	return mean, lo, hi
}

// levelSeries is a figure (named by its key) at every level.
func levelSeries(pts []levelPoint, name, key string) series {
	f := report.MustFigure(key)
	s := series{Name: name}
	hasCI := false
	for _, p := range pts {
		m, lo, hi := p.value(f)
		s.Values = append(s.Values, m)
		s.Low = append(s.Low, lo)
		s.High = append(s.High, hi)
		hasCI = hasCI || !math.IsNaN(lo)
	}
	if !hasCI {
		s.Low, s.High = nil, nil
	} else {
		for i := range s.Low {
			if math.IsNaN(s.Low[i]) {
				s.Low[i], s.High[i] = s.Values[i], s.Values[i]
			}
			s.Low[i] = math.Max(s.Low[i], 0)
		}
	}
	return s
}

func charts(doc *report.Document, labels []string) []chart {
	runs, rl := primary(doc.Runs, labels)
	caption := ""
	if len(runs) < len(doc.Runs) {
		caption = "Each level shows the mean of its repeats; the summary table lists every repeat."
	}
	dist := func(name, title string, get func(*report.Summary) report.Dist) chart {
		ss := []series{{Name: "p50"}, {Name: "p90"}, {Name: "p95"}, {Name: "p99"}}
		for i := range runs {
			d := get(&runs[i].Summary)
			for j, v := range []float64{d.P50, d.P90, d.P95, d.P99} {
				ss[j].Values = append(ss[j].Values, v)
			}
		}
		c := barChart(name, title, "seconds", rl, ss, report.SecondsTick)
		c.Caption = caption
		return c
	}
	out := []chart{
		dist(ChartTTFT, "Time to first token (of any kind: reasoning included)", func(s *report.Summary) report.Dist { return s.TTFT }),
		dist(ChartITL, "Inter-token latency", func(s *report.Summary) report.Dist { return s.ITL }),
		dist(ChartTPOT, "Time per output token", func(s *report.Summary) report.Dist { return s.TPOT }),
		dist(ChartE2E, "End-to-end latency", func(s *report.Summary) report.Dist { return s.E2E }),
	}
	pts := levels(doc.Runs)
	var ll []string
	for _, p := range pts {
		ll = append(ll, p.label)
	}
	xl := levelName(doc.Runs)
	out = append(out,
		lineChart(ChartTTFTVsLevel, "TTFT against "+xl, "seconds", xl, ll, []series{
			levelSeries(pts, "p50", "ttft_seconds.p50"),
			levelSeries(pts, "p99", "ttft_seconds.p99"),
		}, report.SecondsTick),
		lineChart(ChartThroughputVsLvl, "Output tokens/s against "+xl, "tokens/s", xl, ll, []series{
			levelSeries(pts, "output tokens/s", "output_tokens_per_second"),
		}, report.Num),
		lineChart(ChartGoodputVsLevel, "Request throughput and goodput against "+xl, "requests/s", xl, ll, []series{
			levelSeries(pts, "requests/s", "request_throughput_per_second"),
			levelSeries(pts, "goodput/s", "goodput_per_second"),
		}, report.Num),
		lineChart(ChartCostVsLevel, "Cost per request against "+xl, "USD", xl, ll, []series{
			levelSeries(pts, "cost per request", "cost.per_request_usd"),
		}, report.USDTick),
		lineChart(ChartScheduleLagLevel, "Schedule lag against "+xl, "seconds", xl, ll, []series{
			levelSeries(pts, "p50", "schedule_lag_seconds.p50"),
			levelSeries(pts, "p99", "schedule_lag_seconds.p99"),
		}, report.SecondsTick),
	)
	// Errors: the known classes in order, then any other class seen.
	classes := append([]string(nil), report.ErrorClasses...)
	known := map[string]bool{}
	for _, c := range classes {
		known[c] = true
	}
	var extra []string
	for _, r := range runs {
		for c := range r.Summary.Errors {
			if !known[c] {
				known[c] = true
				extra = append(extra, c)
			}
		}
	}
	sort.Strings(extra)
	classes = append(classes, extra...)
	var es []series
	for _, c := range classes {
		s := series{Name: c}
		for _, r := range runs {
			s.Values = append(s.Values, float64(r.Summary.Errors[c]))
		}
		es = append(es, s)
	}
	ec := stackedChart(ChartErrorsByClass, "Errors by class", "requests", rl, es, fmtCount)
	if caption != "" {
		ec.Caption = "Errors summed over the repeats of each level."
	}
	out = append(out, ec)
	out = append(out, reasoningCharts(doc, labels)...) // reasoning against answer, when a run reasoned (reasoning.go)
	out = append(out, gpuCharts(doc)...)               // peak VRAM, tokens/J, when an exporter was read (gpucharts.go)
	// The server's metrics over time and the TTFT by turn, when the report
	// has them (timeline.go).
	out = append(out, workloadCharts(doc, labels)...)
	return out
}
