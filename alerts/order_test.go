package alerts

import (
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// ruleRef is where a rule sits: its file, group and position in the group.
type ruleRef struct {
	file, group string
	index       int
	name        string // the record or alert name
}

func (r ruleRef) String() string {
	return fmt.Sprintf("%s: group %s, rule %d (%s)", r.file, r.group, r.index+1, r.name)
}

// orderViolations lists every rule of groups (by file) that reads a
// recorded series in an order-dependent way (see doc.go, "Rule order"):
//   - a series recorded in another group: groups run independently, so
//     the reader sees this evaluation's value or the previous one by luck
//     (Prometheus runs groups concurrently, promtool in random order);
//   - a series recorded later in its own group, or by the rule itself,
//     read as an instant vector: it reads the previous evaluation's value
//     through the lookback, one evaluation late. Reading it through a range
//     selector (last_over_time(x[1d])) states that the past is wanted and
//     is allowed: rules of a group run in order, so the range never holds
//     this evaluation's sample.
//
// A record name recorded in two groups is a violation of its own.
func orderViolations(files map[string]*rulefmt.RuleGroups) []string {
	recorded := map[string][]ruleRef{}
	for file, rgs := range files {
		for _, g := range rgs.Groups {
			for i, r := range g.Rules {
				if r.Record != "" {
					recorded[r.Record] = append(recorded[r.Record], ruleRef{file, g.Name, i, r.Record})
				}
			}
		}
	}
	var out []string
	for name, refs := range recorded {
		for _, ref := range refs[1:] {
			if ref.file != refs[0].file || ref.group != refs[0].group {
				out = append(out, fmt.Sprintf("%s is recorded in two groups: %s and %s", name, refs[0], ref))
			}
		}
	}
	for file, rgs := range files {
		for _, g := range rgs.Groups {
			for i, r := range g.Rules {
				me := ruleRef{file, g.Name, i, r.Record + r.Alert}
				expr, err := parser.NewParser(parser.Options{}).ParseExpr(r.Expr)
				if err != nil {
					out = append(out, fmt.Sprintf("%s: %v", me, err))
					continue
				}
				parser.Inspect(expr, func(node parser.Node, path []parser.Node) error {
					vs, ok := node.(*parser.VectorSelector)
					if !ok {
						return nil
					}
					name := vs.Name
					for _, m := range vs.LabelMatchers {
						if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
							name = m.Value
						}
					}
					refs := recorded[name]
					if len(refs) == 0 {
						return nil
					}
					def := refs[0]
					ranged := len(path) > 0
					if ranged {
						_, ranged = path[len(path)-1].(*parser.MatrixSelector)
					}
					switch {
					case def.file != file || def.group != g.Name:
						out = append(out, fmt.Sprintf("%s reads %s, recorded in another group (%s)", me, name, def))
					case def.index >= i && !ranged:
						out = append(out, fmt.Sprintf("%s reads %s, recorded at or after it in its group (rule %d), as an instant vector: one evaluation late", me, name, def.index+1))
					}
					return nil
				})
			}
		}
	}
	sort.Strings(out)
	return out
}

func parseRuleFiles(t *testing.T, names []string) map[string]*rulefmt.RuleGroups {
	t.Helper()
	files := map[string]*rulefmt.RuleGroups{}
	for _, f := range names {
		rgs, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
		if len(errs) > 0 {
			t.Fatal(errors.Join(errs...))
		}
		files[f] = rgs
	}
	return files
}

// TestRulesReadOnlyEarlierRecordsOfTheirGroup: no rule's result depends on
// the order Prometheus (or promtool) happens to run groups in.
func TestRulesReadOnlyEarlierRecordsOfTheirGroup(t *testing.T) {
	if len(ruleFiles) == 0 {
		t.Fatal("no rule files")
	}
	for _, v := range orderViolations(parseRuleFiles(t, ruleFiles)) {
		t.Error(v)
	}
}

// TestOrderViolationsCatches: the check above fails on each
// order-dependent pattern and passes the allowed ones.
func TestOrderViolationsCatches(t *testing.T) {
	group := func(name string, rules ...rulefmt.Rule) rulefmt.RuleGroup {
		return rulefmt.RuleGroup{Name: name, Rules: rules}
	}
	rec := func(name, expr string) rulefmt.Rule { return rulefmt.Rule{Record: name, Expr: expr} }
	alert := func(name, expr string) rulefmt.Rule { return rulefmt.Rule{Alert: name, Expr: expr} }
	for _, tc := range []struct {
		name  string
		files map[string][]rulefmt.RuleGroup
		want  []string // substrings, one per violation
	}{
		{
			name: "alert after its record in one group",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g", rec("job:x:rate5m", "rate(x[5m])"), alert("XHigh", "job:x:rate5m > 1")),
			}},
		},
		{
			name: "alert in another group",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g", rec("job:x:rate5m", "rate(x[5m])")),
				group("h", alert("XHigh", "job:x:rate5m > 1")),
			}},
			want: []string{"XHigh) reads job:x:rate5m, recorded in another group"},
		},
		{
			name: "record in another file, read through __name__",
			files: map[string][]rulefmt.RuleGroup{
				"a.yml": {group("g", rec("job:x:rate5m", "rate(x[5m])"))},
				"b.yml": {group("g", rec("job:y:sum", `sum({__name__="job:x:rate5m"})`))},
			},
			want: []string{"reads job:x:rate5m, recorded in another group"},
		},
		{
			name: "instant read of a later record",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g", alert("XHigh", "job:x:rate5m > 1"), rec("job:x:rate5m", "rate(x[5m])")),
			}},
			want: []string{"as an instant vector: one evaluation late"},
		},
		{
			name: "range read of a later record and of itself",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g",
					rec("job:total:sum", "last_over_time(job:total:sum[1d]) and on () last_over_time(job:day:number[1d]) == day_of_month()"),
					rec("job:day:number", "day_of_month()")),
			}},
		},
		{
			name: "instant read of itself",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g", rec("job:total:sum", "job:total:sum + 1")),
			}},
			want: []string{"as an instant vector: one evaluation late"},
		},
		{
			name: "range read of a record of another group",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g", rec("job:x:rate5m", "rate(x[5m])")),
				group("h", rec("job:x:avg1d", "avg_over_time(job:x:rate5m[1d])")),
			}},
			want: []string{"reads job:x:rate5m, recorded in another group"},
		},
		{
			name: "one name recorded in two groups",
			files: map[string][]rulefmt.RuleGroup{"a.yml": {
				group("g", rec("job:price:usd", "vector(1)")),
				group("h", rec("job:price:usd", "vector(2)")),
			}},
			want: []string{"job:price:usd is recorded in two groups"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := map[string]*rulefmt.RuleGroups{}
			for f, gs := range tc.files {
				files[f] = &rulefmt.RuleGroups{Groups: gs}
			}
			got := orderViolations(files)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d violations, want %d: %q", len(got), len(tc.want), got)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("violation %q does not say %q", got[i], w)
				}
			}
		})
	}
}
