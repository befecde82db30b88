// Package promcheck checks the PromQL of gpulens's dashboards and rule
// files: every expression must parse (after Grafana's variables are
// substituted) and may name only metrics some gpulens component serves, a
// recording rule records, or Prometheus itself writes.
package promcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// PrometheusSeries are series Prometheus writes itself for every target or
// rule, which no exporter serves.
var PrometheusSeries = []string{
	"up", "scrape_duration_seconds", "scrape_samples_scraped",
	"scrape_samples_post_metric_relabeling", "scrape_series_added",
	"ALERTS", "ALERTS_FOR_STATE",
}

// grafanaVars are Grafana's built-in variables with a value that keeps the
// expression valid PromQL; longest names first so $__range_s is not read
// as $__range followed by "_s".
var grafanaVars = []struct{ name, value string }{
	{"$__rate_interval", "5m"},
	{"$__interval_ms", "60000"},
	{"$__interval", "1m"},
	{"$__range_ms", "3600000"},
	{"$__range_s", "3600"},
	{"$__range", "1h"},
}

var (
	braceVar = regexp.MustCompile(`\$\{[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}`)
	plainVar = regexp.MustCompile(`\$[A-Za-z_][A-Za-z0-9_]*`)
)

// Substitute replaces Grafana variables in expr: built-in intervals and
// ranges by durations, dashboard variables ($gpu, ${gpu}) by "x", which is
// valid wherever the dashboards use them (inside label-value strings).
func Substitute(expr string) string {
	for _, v := range grafanaVars {
		expr = strings.ReplaceAll(expr, v.name, v.value)
		expr = strings.ReplaceAll(expr, "${"+v.name[1:]+"}", v.value)
	}
	expr = braceVar.ReplaceAllString(expr, "x")
	return plainVar.ReplaceAllString(expr, "x")
}

// Parse substitutes Grafana variables and parses expr.
func Parse(expr string) (parser.Expr, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(Substitute(expr))
	if err != nil {
		return nil, fmt.Errorf("parsing %q: %w", expr, err)
	}
	return e, nil
}

// MetricNames lists the metric names expr selects, sorted and unique. A
// selector without a fixed name (only a regular expression on __name__) is
// an error: the checker could not tell what it reads.
func MetricNames(expr string) ([]string, error) {
	e, err := Parse(expr)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var errs []error
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("selector %s in %q has no fixed metric name", vs, expr))
			return nil
		}
		seen[name] = true
		return nil
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// Known is a set of metric names that exist.
type Known map[string]bool

// Add adds names.
func (k Known) Add(names ...string) {
	for _, n := range names {
		k[n] = true
	}
}

// AddExposition adds every series name of a scrape, in the text format or
// in the delimited protobuf format (what Prometheus asks for when it
// scrapes native histograms): histograms add _bucket, _sum and _count, and
// their own name when they carry native buckets (the series Prometheus
// stores a native histogram under, which only the protobuf format shows);
// summaries add their name, _sum and _count.
func (k Known) AddExposition(r io.Reader) error {
	body, err := io.ReadAll(r)
	if err != nil {
		return fmt.Errorf("reading scrape: %w", err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		var perr error
		if fams, perr = decodeProtobuf(body); perr != nil {
			return fmt.Errorf("parsing scrape: as text: %w; as protobuf: %w", err, perr)
		}
	}
	for name, fam := range fams {
		switch fam.GetType() {
		case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			k.Add(name+"_bucket", name+"_sum", name+"_count")
			for _, m := range fam.GetMetric() {
				if h := m.GetHistogram(); h != nil && (h.Schema != nil || h.ZeroThreshold != nil) {
					k.Add(name)
					break
				}
			}
		case dto.MetricType_SUMMARY:
			k.Add(name, name+"_sum", name+"_count")
		default:
			k.Add(name)
		}
	}
	return nil
}

// decodeProtobuf decodes a delimited protobuf exposition.
func decodeProtobuf(body []byte) (map[string]*dto.MetricFamily, error) {
	dec := expfmt.NewDecoder(bytes.NewReader(body), expfmt.NewFormat(expfmt.TypeProtoDelim))
	fams := map[string]*dto.MetricFamily{}
	for {
		var mf dto.MetricFamily
		if err := dec.Decode(&mf); err != nil {
			if errors.Is(err, io.EOF) && len(fams) > 0 {
				return fams, nil
			}
			if errors.Is(err, io.EOF) {
				return nil, errors.New("no metric families")
			}
			return nil, err
		}
		fams[mf.GetName()] = &mf
	}
}

// AddRuleFiles adds the names the recording rules of files record.
func (k Known) AddRuleFiles(files ...string) error {
	for _, f := range files {
		groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			return errors.Join(errs...)
		}
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Record != "" {
					k.Add(r.Record)
				}
			}
		}
	}
	return nil
}

// Check reports a parse error or every metric of expr that is not known,
// with the closest known name as a hint.
func (k Known) Check(expr string) error {
	names, err := MetricNames(expr)
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		if k[n] {
			continue
		}
		if s := k.closest(n); s != "" {
			errs = append(errs, fmt.Errorf("unknown metric %s (did you mean %s?)", n, s))
		} else {
			errs = append(errs, fmt.Errorf("unknown metric %s", n))
		}
	}
	return errors.Join(errs...)
}

// closest returns the known name with the smallest edit distance to n, if
// it is at most a third of n's length.
func (k Known) closest(n string) string {
	best, bestD := "", len(n)/3+1
	keys := make([]string, 0, len(k))
	for c := range k {
		keys = append(keys, c)
	}
	sort.Strings(keys)
	for _, c := range keys {
		if d := levenshtein(n, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var labelValues = regexp.MustCompile(`^\s*label_values\(\s*(.+)\s*,\s*[A-Za-z_][A-Za-z0-9_]*\s*\)\s*$`)

// VariableQuery returns the PromQL selector of a Grafana Prometheus
// variable query: label_values(expr, label) gives expr; metrics(...) and
// label_names() select nothing.
func VariableQuery(query string) (string, bool) {
	m := labelValues.FindStringSubmatch(query)
	if m == nil {
		return "", false
	}
	return m[1], true
}
