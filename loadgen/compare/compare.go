// Package compare sets reports of the same workload side by side — two
// hosts, GPUs or server versions — level by level: throughput, TTFT and
// ITL percentiles, goodput, peak VRAM, tokens per joule and cost per 1,000
// samples, each with its mean and 95 % confidence interval across the
// repeats, and a verdict on whether the difference is larger than the
// noise (Welch's t-test at the 5 % level) and which report is better. It
// warns when the configurations differ (settings hash, dataset, model
// revision, model, workload settings). See docs/loadgen.md, "Compare".
package compare

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
)

// Input is one report; Name (its file) names it in the result.
type Input = report.Named

// Directions: which way a metric is better (report.Figure.Better).
const (
	Lower  = report.Lower
	Higher = report.Higher
)

// Verdicts on a difference.
const (
	// VerdictDifferent: the difference is larger than the noise (Welch's
	// t-test rejects equal means at the 5 % level, or both sides have no
	// spread at all and differ); Metric.Better names the better report.
	VerdictDifferent = "larger_than_noise"
	// VerdictNoise: the difference is within the noise of the repeats.
	VerdictNoise = "within_noise"
	// VerdictNoRepeats: a side has a single run at this level, so its
	// noise is unknown and no verdict can be given.
	VerdictNoRepeats = "no_repeats"
	// VerdictEqual: both sides have the same mean and no spread.
	VerdictEqual = "equal"
)

// Metric describes a compared quantity: a figure of the report
// (report.Figure).
type Metric struct {
	// Key names the metric as the report does ("ttft_seconds.p99", a key
	// of Summary.Stats) or, for the GPU side, "gpu.<field>".
	Key   string `json:"key"`
	Title string `json:"title"`
	// Unit is "seconds", "requests/s", "tokens/s", "bytes", "tokens/J" or
	// "USD".
	Unit string `json:"unit"`
	// Better is Lower or Higher.
	Better string `json:"better"`
	fig    report.Figure
}

// get reads the metric in a run, when it was measured there.
func (m Metric) get(r *report.Run) (float64, bool) { return m.fig.Measured(r) }

// Metrics are the compared metrics, in display order: figures of
// report.SummaryFigures, report.ReasoningFigures (compared when a report
// reasoned) and report.GPUFigures, named by key.
var Metrics = metrics(
	"request_throughput_per_second", "output_tokens_per_second", "goodput_per_second",
	"ttft_seconds.p50", "ttft_seconds.p99", "itl_seconds.p50", "itl_seconds.p99",
	"reasoning.answer_ttft_seconds.p50", "reasoning.answer_ttft_seconds.p99", "reasoning.answer_itl_seconds.p50",
	report.StatGPUPeakMemoryUsedBytes, report.StatGPUOutputTokensPerJoule,
	"cost.per_1k_requests_usd",
)

// metrics returns the figures of keys, each of which must be a figure
// with a direction.
func metrics(keys ...string) []Metric {
	var out []Metric
	for _, k := range keys {
		f := report.MustFigure(k)
		if f.Better == "" {
			panic("compare: figure " + k + " has no direction")
		}
		out = append(out, Metric{Key: f.Key, Title: f.Title, Unit: f.Unit, Better: f.Better, fig: f})
	}
	return out
}

// Result is a comparison of reports: every report after the first
// compared with the first (the baseline).
type Result struct {
	Reports []ReportInfo `json:"reports"`
	// Warnings say where the configurations differ, so that a difference
	// may not be the hosts'.
	Warnings []string `json:"warnings,omitempty"`
	// Notes are what could not be compared and why.
	Notes []string `json:"notes,omitempty"`
	Pairs []Pair   `json:"comparisons"`
	// Searches compare reports of gpulens-loadgen search by their
	// brackets (search.go); levels the searches both probed are also in
	// Pairs.
	Searches []SearchPair `json:"searches,omitempty"`
}

// ReportInfo is what a report says about where and how it ran.
type ReportInfo struct {
	Name          string            `json:"name"`
	Model         string            `json:"model,omitempty"`
	ServerModel   string            `json:"server_model,omitempty"`
	GPU           string            `json:"gpu,omitempty"`
	ServerVersion string            `json:"server_version,omitempty"`
	ModelRevision string            `json:"model_revision,omitempty"`
	SettingsHash  string            `json:"settings_hash,omitempty"`
	DatasetSHA256 string            `json:"dataset_sha256,omitempty"`
	Host          string            `json:"host,omitempty"`
	Labels        map[string]string `json:"labels,omitempty"`
	Mode          string            `json:"mode"`
	Levels        []float64         `json:"levels"`
	// Repeats is the largest number of runs at one level.
	Repeats      int     `json:"repeats"`
	GPUHourlyUSD float64 `json:"gpu_hourly_usd,omitempty"`
	GPUs         int     `json:"gpus,omitempty"`
	// Tokens are the prompt and output lengths of each level (its
	// aggregate, or its single run): asked for against the server's
	// counts, when the report asked for lengths.
	Tokens []report.TokenRow `json:"tokens,omitempty"`
}

// Pair compares report B with the baseline A.
type Pair struct {
	A      string  `json:"a"`
	B      string  `json:"b"`
	Levels []Level `json:"levels"`
	// OnlyInA and OnlyInB are levels one report has and the other not.
	OnlyInA []float64 `json:"only_in_a,omitempty"`
	OnlyInB []float64 `json:"only_in_b,omitempty"`
}

// Level is one level (concurrency or rate) present in both reports.
type Level struct {
	Level   float64      `json:"level"`
	Label   string       `json:"label"`
	Metrics []Comparison `json:"metrics"`
}

// Comparison is one metric at one level.
type Comparison struct {
	Metric
	// A and B are the metric across each report's repeats: mean, sample
	// standard deviation and Student-t 95 % confidence interval.
	A report.Stat `json:"a"`
	B report.Stat `json:"b"`
	// Difference is B's mean − A's; RelativeDifference that over A's mean
	// (0 when A's mean is 0).
	Difference         float64 `json:"difference"`
	RelativeDifference float64 `json:"relative_difference"`
	// Welch is the test, when both sides have repeats and some spread.
	Welch   *Welch `json:"welch,omitempty"`
	Verdict string `json:"verdict"`
	// Winner names the better report when Verdict is VerdictDifferent.
	Winner string `json:"winner,omitempty"`
}

// Welch is Welch's unequal-variances t-test of the two means.
type Welch struct {
	// T is (mean B − mean A) / sqrt(sd_A²/n_A + sd_B²/n_B).
	T float64 `json:"t"`
	// DF is the Welch–Satterthwaite degrees of freedom.
	DF float64 `json:"df"`
	// Critical is the two-sided 5 % Student t critical value at floor(DF)
	// degrees of freedom (rounding down is conservative): the difference
	// is larger than the noise when |T| > Critical.
	Critical float64 `json:"critical"`
}

// WelchTest tests whether two means differ at the 5 % level. ok is false
// when a side has fewer than two values or neither has any spread (no
// test is possible).
func WelchTest(a, b report.Stat) (w Welch, significant, ok bool) {
	if a.N < 2 || b.N < 2 {
		return w, false, false
	}
	va, vb := a.Stddev*a.Stddev/float64(a.N), b.Stddev*b.Stddev/float64(b.N)
	se2 := va + vb
	if !(se2 > 0) {
		return w, false, false
	}
	w.T = (b.Mean - a.Mean) / math.Sqrt(se2)
	w.DF = se2 * se2 / (va*va/float64(a.N-1) + vb*vb/float64(b.N-1))
	w.Critical = stats.TCritical95(int(math.Floor(w.DF)))
	return w, math.Abs(w.T) > w.Critical, true
}

// Judge compares a metric's two sides: the difference, the test and the
// verdict; better names A and B for Winner.
func Judge(m Metric, a, b report.Stat, nameA, nameB string) Comparison {
	c := Comparison{Metric: m, A: a, B: b, Difference: b.Mean - a.Mean}
	if a.Mean != 0 {
		c.RelativeDifference = c.Difference / math.Abs(a.Mean)
	}
	switch w, sig, ok := WelchTest(a, b); {
	case a.N < 2 || b.N < 2:
		c.Verdict = VerdictNoRepeats
	case ok:
		c.Welch = &w
		c.Verdict = VerdictNoise
		if sig {
			c.Verdict = VerdictDifferent
		}
	case a.Mean == b.Mean:
		c.Verdict = VerdictEqual
	default: // no spread on either side, different means
		c.Verdict = VerdictDifferent
	}
	if c.Verdict == VerdictDifferent {
		if (c.Difference < 0) == (m.Better == Lower) {
			c.Winner = nameB
		} else {
			c.Winner = nameA
		}
	}
	return c
}

// side is one report, its runs grouped by level.
type side struct {
	in     Input
	mode   string
	levels map[float64]*levelRuns
	order  []float64
}

type levelRuns struct {
	reps []report.Run
	agg  *report.Run
}

func newSide(in Input) (*side, error) {
	if in.Doc == nil || len(in.Doc.Runs) == 0 {
		return nil, fmt.Errorf("report %s has no runs: nothing to compare", in.Name)
	}
	s := &side{in: in, levels: map[float64]*levelRuns{}}
	for i := range in.Doc.Runs {
		r := &in.Doc.Runs[i]
		if s.mode == "" {
			s.mode = r.Settings.Mode
		} else if r.Settings.Mode != s.mode {
			return nil, fmt.Errorf("report %s mixes %s-loop and %s-loop runs", in.Name, s.mode, r.Settings.Mode)
		}
		l, ok := s.levels[r.Level]
		if !ok {
			l = &levelRuns{}
			s.levels[r.Level] = l
			s.order = append(s.order, r.Level)
		}
		if r.Aggregate {
			l.agg = r
		} else {
			l.reps = append(l.reps, *r)
		}
	}
	sort.Float64s(s.order)
	return s, nil
}

// stat is metric m at one level across the repeats: the mean, standard
// deviation and Student-t 95 % interval of the repeat runs that measured
// it (what loadgen/stats.Aggregate puts in the aggregate's Summary.Stats,
// but without the runs that did not measure it, e.g. the latency of a run
// in which nothing completed); for a report that kept only the aggregate
// run, its Summary.Stats, or its value alone.
func (l *levelRuns) stat(m Metric) (report.Stat, bool) {
	var vals []float64
	for i := range l.reps {
		if v, ok := m.get(&l.reps[i]); ok {
			vals = append(vals, v)
		}
	}
	if len(vals) > 0 {
		return stats.Interval(vals), true
	}
	if len(l.reps) > 0 || l.agg == nil {
		return report.Stat{}, false
	}
	v, ok := m.get(l.agg)
	if !ok {
		return report.Stat{}, false
	}
	if st, has := l.agg.Summary.Stats[m.Key]; has && st.N > 0 {
		return st, true
	}
	return report.Stat{N: 1, Mean: v, CI95Low: v, CI95High: v}, true
}

// Compare compares every input after the first with the first. At least
// two inputs are needed, each with runs, and each pair must share a level.
func Compare(inputs []Input) (*Result, error) {
	if len(inputs) < 2 {
		return nil, fmt.Errorf("compare needs at least two reports, got %d", len(inputs))
	}
	sides := make([]*side, len(inputs))
	res := &Result{}
	for i, in := range inputs {
		s, err := newSide(in)
		if err != nil {
			return nil, err
		}
		sides[i] = s
		res.Reports = append(res.Reports, info(s))
	}
	base := sides[0]
	goodput := false
	for _, s := range sides {
		for _, r := range s.in.Doc.Runs {
			slo := r.Settings.SLO
			goodput = goodput || slo.TTFTSeconds > 0 || slo.TPOTSeconds > 0 || slo.E2ESeconds > 0
		}
	}
	if !goodput {
		res.Notes = append(res.Notes, "no report sets an SLO: goodput equals throughput and is not compared")
	}
	// The answer's own latencies, when a report's model reasoned.
	reasoning := false
	for _, s := range sides {
		for _, r := range s.in.Doc.Runs {
			reasoning = reasoning || r.Summary.Reasoning != nil
		}
	}
	// A report whose server counted other lengths than it asked for
	// measured another workload than its settings say.
	for _, ri := range res.Reports {
		for i := range ri.Tokens {
			t := &ri.Tokens[i]
			s := report.Summary{InputTokensRequested: t.InputRequested, InputTokens: t.Input, OutputTokensRequested: t.OutputRequested, OutputTokens: t.Output}
			for _, msg := range report.TokenDeviations(&s) {
				res.Warnings = append(res.Warnings, ri.Name+" "+t.Run+": "+msg)
			}
		}
	}
	for _, other := range sides[1:] {
		res.Warnings = append(res.Warnings, configWarnings(base, other, &res.Notes)...)
		sp, err := compareSearches(base.in, other.in, &res.Warnings)
		if err != nil {
			return nil, err
		}
		if sp != nil {
			res.Searches = append(res.Searches, *sp)
			if !sharesLevel(base, other) {
				res.Notes = append(res.Notes, fmt.Sprintf("%s and %s probed no level in common: compared by their brackets only", base.in.Name, other.in.Name))
				continue
			}
		}
		p, err := comparePair(base, other, goodput, reasoning, &res.Notes)
		if err != nil {
			return nil, err
		}
		res.Pairs = append(res.Pairs, p)
	}
	return res, nil
}

func comparePair(a, b *side, goodput, reasoning bool, notes *[]string) (Pair, error) {
	p := Pair{A: a.in.Name, B: b.in.Name}
	if a.mode != b.mode {
		return p, fmt.Errorf("%s is %s-loop and %s %s-loop: their levels (%s, %s) are not comparable",
			a.in.Name, a.mode, b.in.Name, b.mode, levelList(a), levelList(b))
	}
	for _, l := range a.order {
		if _, ok := b.levels[l]; !ok {
			p.OnlyInA = append(p.OnlyInA, l)
		}
	}
	missing := map[string][]string{} // metric title → reports without it
	for _, lv := range b.order {
		la, ok := a.levels[lv]
		if !ok {
			p.OnlyInB = append(p.OnlyInB, lv)
			continue
		}
		lb := b.levels[lv]
		level := Level{Level: lv, Label: report.Level(a.mode == report.ModeOpen, lv)}
		for _, m := range Metrics {
			if m.Key == "goodput_per_second" && !goodput || strings.HasPrefix(m.Key, "reasoning.") && !reasoning {
				continue
			}
			sa, okA := la.stat(m)
			sb, okB := lb.stat(m)
			if !okA || !okB {
				for _, x := range []struct {
					ok   bool
					name string
				}{{okA, a.in.Name}, {okB, b.in.Name}} {
					if !x.ok && !slices.Contains(missing[m.Title], x.name) {
						missing[m.Title] = append(missing[m.Title], x.name)
					}
				}
				continue
			}
			level.Metrics = append(level.Metrics, Judge(m, sa, sb, a.in.Name, b.in.Name))
		}
		p.Levels = append(p.Levels, level)
	}
	if len(p.Levels) == 0 {
		return p, fmt.Errorf("%s and %s share no level (%s; %s): nothing to compare", a.in.Name, b.in.Name, levelList(a), levelList(b))
	}
	for _, m := range Metrics {
		if names := missing[m.Title]; len(names) > 0 {
			why := ""
			switch {
			case strings.HasPrefix(m.Key, "gpu."):
				why = " (measured per level when the load generator reads a gpulens exporter)"
			case strings.HasPrefix(m.Key, "cost."):
				why = " (no GPU price in its settings, or no completed request)"
			case strings.HasPrefix(m.Key, "reasoning."):
				why = " (its model streamed no reasoning and the server counted none)"
			}
			*notes = append(*notes, fmt.Sprintf("%s vs %s: %s not compared at some or all levels: missing in %s%s",
				a.in.Name, b.in.Name, m.Title, strings.Join(names, ", "), why))
		}
	}
	return p, nil
}

func levelList(s *side) string {
	var ls []string
	for _, l := range s.order {
		ls = append(ls, report.Level(s.mode == report.ModeOpen, l))
	}
	return s.in.Name + ": " + strings.Join(ls, ", ")
}

func info(s *side) ReportInfo {
	m := s.in.Doc.Metadata
	ri := ReportInfo{Name: s.in.Name, Model: m.Model, ServerModel: m.ServerModel, DatasetSHA256: m.DatasetSHA256, Mode: s.mode, Levels: s.order}
	for _, l := range s.levels {
		ri.Repeats = max(ri.Repeats, len(l.reps))
	}
	if ri.Repeats == 0 {
		ri.Repeats = 1
	}
	if r := firstRun(s.in.Doc); r != nil {
		ri.GPUHourlyUSD, ri.GPUs = r.Settings.Cost.GPUHourlyUSD, r.Settings.Cost.GPUs
	}
	if g := m.GPU; g != nil {
		count := map[string]int{}
		var names []string
		for _, d := range g.GPUs {
			if count[d.Name] == 0 {
				names = append(names, d.Name)
			}
			count[d.Name]++
		}
		for i, n := range names {
			if count[n] > 1 {
				names[i] = strconv.Itoa(count[n]) + "× " + n
			}
		}
		ri.GPU = strings.Join(names, ", ")
	}
	if mf := m.Manifest; mf != nil {
		ri.ServerVersion, ri.ModelRevision, ri.SettingsHash, ri.Labels = mf.ServerVersion, mf.ModelRevision, mf.SettingsHash, mf.Labels
		ri.Host = mf.Host.Hostname
		if mf.Host.CPUs > 0 {
			ri.Host = strings.TrimPrefix(fmt.Sprintf("%s %s/%s, %d CPUs", ri.Host, mf.Host.OS, mf.Host.Arch, mf.Host.CPUs), " ")
		}
	}
	if report.HasTokenRequests(s.in.Doc) {
		for _, lv := range s.order {
			l := s.levels[lv]
			r := l.agg
			if r == nil && len(l.reps) > 0 {
				r = &l.reps[0]
			}
			if r != nil {
				ri.Tokens = append(ri.Tokens, report.Tokens(r))
			}
		}
	}
	return ri
}

func firstRun(d *report.Document) *report.Run {
	for i := range d.Runs {
		if !d.Runs[i].Aggregate {
			return &d.Runs[i]
		}
	}
	if len(d.Runs) > 0 {
		return &d.Runs[0]
	}
	return nil
}

// configWarnings says where b's configuration differs from a's; notes get
// what cannot be checked.
func configWarnings(a, b *side, notes *[]string) []string {
	var w []string
	ma, mb := a.in.Doc.Metadata, b.in.Doc.Metadata
	na, nb := a.in.Name, b.in.Name
	switch {
	case ma.Manifest != nil && mb.Manifest != nil:
		if ha, hb := ma.Manifest.SettingsHash, mb.Manifest.SettingsHash; ha != "" && hb != "" && ha != hb {
			w = append(w, fmt.Sprintf("%s and %s were not run with the same configuration: settings hash %s vs %s", na, nb, short(ha), short(hb)))
		}
	default:
		var without []string
		for _, x := range []struct {
			name string
			m    *report.Manifest
		}{{na, ma.Manifest}, {nb, mb.Manifest}} {
			if x.m == nil {
				without = append(without, x.name)
			}
		}
		*notes = append(*notes, fmt.Sprintf("%s: no manifest (a report written before manifests): its configuration is checked from its settings only, with no settings hash, server version or model revision",
			strings.Join(without, ", ")))
	}
	if ma.DatasetSHA256 != mb.DatasetSHA256 {
		w = append(w, fmt.Sprintf("the datasets differ: %s %s, %s %s", na, dataset(ma), nb, dataset(mb)))
	}
	var ra, rb string
	if ma.Manifest != nil {
		ra = ma.Manifest.ModelRevision
	}
	if mb.Manifest != nil {
		rb = mb.Manifest.ModelRevision
	}
	if ra != "" && rb != "" && ra != rb {
		w = append(w, fmt.Sprintf("the model revisions differ: %s %s, %s %s", na, ra, nb, rb))
	}
	if ma.Model != mb.Model {
		w = append(w, fmt.Sprintf("the models requested differ: %s %q, %s %q", na, ma.Model, nb, mb.Model))
	}
	if ma.ServerModel != "" && mb.ServerModel != "" && ma.ServerModel != mb.ServerModel {
		w = append(w, fmt.Sprintf("the servers reported different models: %s %q, %s %q", na, ma.ServerModel, nb, mb.ServerModel))
	}
	if d := settingsDiff(firstRun(a.in.Doc), firstRun(b.in.Doc)); len(d) > 0 {
		w = append(w, fmt.Sprintf("the workload settings differ: %s", strings.Join(d, "; ")))
	}
	return w
}

func dataset(m report.Metadata) string {
	if m.DatasetSHA256 == "" {
		return "synthetic prompts"
	}
	name := m.Dataset
	if name == "" {
		name = "dataset"
	}
	return name + " (sha256 " + short(m.DatasetSHA256) + ")"
}

func short(h string) string {
	if len(h) > 12 {
		return h[:12]
	}
	return h
}

// settingsIgnored are the settings that may differ between the reports of
// one workload: the level (compared level by level), the price (hosts
// differ in price), the shard, and what is checked elsewhere (model,
// dataset by hash).
var settingsIgnored = map[string]bool{"concurrency": true, "rate_per_second": true, "cost": true, "shard": true, "model": true, "dataset": true}

// settingsDiff lists the workload settings (by JSON name) whose values
// differ between a and b's first runs.
func settingsDiff(a, b *report.Run) []string {
	if a == nil || b == nil {
		return nil
	}
	fa, fb := flatSettings(a.Settings), flatSettings(b.Settings)
	keys := map[string]bool{}
	for k := range fa {
		keys[k] = true
	}
	for k := range fb {
		keys[k] = true
	}
	var out []string
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if fa[k] != fb[k] {
			out = append(out, fmt.Sprintf("%s %s vs %s", k, orNone(fa[k]), orNone(fb[k])))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}

// flatSettings is the settings' JSON as dotted keys ("slo.ttft_seconds"),
// without the ignored ones.
func flatSettings(s report.Settings) map[string]string {
	b, _ := json.Marshal(s)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	out := map[string]string{}
	var walk func(prefix string, v map[string]any)
	walk = func(prefix string, v map[string]any) {
		for k, x := range v {
			if prefix == "" && settingsIgnored[k] {
				continue
			}
			switch y := x.(type) {
			case map[string]any:
				walk(prefix+k+".", y)
			case nil:
			default:
				jb, _ := json.Marshal(y)
				out[prefix+k] = string(jb)
			}
		}
	}
	walk("", m)
	return out
}
