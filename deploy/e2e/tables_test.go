package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// checkJoinedTables runs the queries of every dashboard table that joins
// several (Grafana's merge joins the rows whose common columns are equal)
// against Prometheus and checks that they give one row per identifying
// label set: the first query defines the rows, each once; every other
// query's label sets are among them, each once, so no row shows twice or
// half empty beside its twin. A later query may lack a row where the
// exporter does not measure that value (a MIG process's SM utilisation):
// that cell stays empty, and is logged. The first query may carry more
// (descriptive) labels than the others. Tables must have rows here.
func checkJoinedTables(ctx context.Context, t *testing.T, api promClient, dir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s: %v", dir, err)
	}
	tables := 0
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			Panels []struct {
				Type    string `json:"type"`
				Title   string `json:"title"`
				Targets []struct {
					RefID string `json:"refId"`
					Expr  string `json:"expr"`
				} `json:"targets"`
			} `json:"panels"`
		}
		if err := json.Unmarshal(raw, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range d.Panels {
			if p.Type != "table" || len(p.Targets) < 2 {
				continue
			}
			tables++
			where := filepath.Base(f) + " " + p.Title
			var results [][]map[string]string
			for _, tg := range p.Targets {
				res, err := api.query(ctx, substitute(tg.Expr))
				if err != nil {
					t.Fatalf("%s target %s: %v", where, tg.RefID, err)
				}
				var rows []map[string]string
				for _, s := range res {
					rows = append(rows, s.Metric)
				}
				results = append(results, rows)
			}
			if slices.ContainsFunc(results, func(rows []map[string]string) bool { return len(rows) == 0 }) {
				t.Errorf("%s: a query returns no rows: %v", where, results)
				continue
			}
			// The join key: the labels of the last query's rows (the first
			// may add descriptive ones).
			var key []string
			for l := range results[len(results)-1][0] {
				key = append(key, l)
			}
			sort.Strings(key)
			ids := func(rows []map[string]string) []string {
				var out []string
				for _, r := range rows {
					var id []string
					for _, k := range key {
						id = append(id, k+"="+r[k])
					}
					out = append(out, strings.Join(id, ","))
				}
				sort.Strings(out)
				return out
			}
			want := ids(results[0])
			if len(slices.Compact(slices.Clone(want))) != len(want) {
				t.Errorf("%s: target A has several rows with the same %v: %v", where, key, want)
			}
			for i, rows := range results[1:] {
				ref := p.Targets[i+1].RefID
				got := ids(rows)
				if len(slices.Compact(slices.Clone(got))) != len(got) {
					t.Errorf("%s: target %s has several rows with the same %v: %v", where, ref, key, got)
				}
				for _, id := range got {
					if !slices.Contains(want, id) {
						t.Errorf("%s: target %s has a row %s that target A lacks: it would show as a half-empty row of its own", where, ref, id)
					}
				}
				for _, id := range want {
					if !slices.Contains(got, id) {
						t.Logf("%s: row %s has no Value #%s", where, id, ref)
					}
				}
			}
			t.Logf("%s: %d rows joined on %v", where, len(want), key)
		}
	}
	if tables < 4 {
		t.Errorf("%d joined tables in the dashboards, want at least 4", tables)
	}
}

// dataProbe is the expression whose data shows that a dashboard query
// works: the query itself, or, for a query that keeps only its non-zero
// series (`expr > 0`, so that series at 0 stay out of the legend), expr:
// the e2e fleet need not have every kind of error for the panel to be
// right.
func dataProbe(expr string) string {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return expr
	}
	if b, ok := e.(*parser.BinaryExpr); ok && b.Op == parser.GTR && !b.ReturnBool {
		if n, ok := b.RHS.(*parser.NumberLiteral); ok && n.Val == 0 {
			return b.LHS.String()
		}
	}
	return expr
}

func TestDataProbe(t *testing.T) {
	for in, want := range map[string]string{
		`sum by (a) (rate(x[1m])) > 0`:     `sum by (a) (rate(x[1m]))`,
		`x > 0 or y`:                       `x > 0 or y`,
		`x > bool 0`:                       `x > bool 0`,
		`x > 1`:                            `x > 1`,
		`count(x == 0) or on () vector(0)`: `count(x == 0) or on () vector(0)`,
		`not valid (`:                      `not valid (`,
	} {
		if got := dataProbe(in); got != want {
			t.Errorf("dataProbe(%q) = %q, want %q", in, got, want)
		}
	}
}
