package dashboards

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// fleetBoards are the dashboards whose default view covers the whole fleet
// (every variable All): make fleet-bench times their panels.
var fleetBoards = []string{"gpulens-fleet.json", "gpulens-cost.json", "gpulens-sharing.json"}

// perProcess reports whether a metric has one series per GPU process.
func perProcess(name string) bool {
	return strings.HasPrefix(name, "gpulens_process_") || strings.HasPrefix(name, "process:")
}

// boundedOrAggregated reports whether the aggregation path from the root
// to a selector takes the per-process series down to a bounded number: a
// topk, bottomk or limitk, or an aggregation that drops the pid label.
func boundedOrAggregated(path []parser.Node) bool {
	for _, n := range path {
		a, ok := n.(*parser.AggregateExpr)
		if !ok {
			continue
		}
		switch a.Op {
		case parser.TOPK, parser.BOTTOMK, parser.LIMITK:
			return true
		}
		if a.Without == slices.Contains(a.Grouping, "pid") {
			// by (...) without pid, or without (..., pid, ...)
			return true
		}
	}
	return false
}

// On a fleet of thousands of GPUs a panel that draws every process (tens
// of thousands of series) is slow to query and useless to read: the
// default view of the fleet-wide dashboards aggregates processes away or
// shows the top ones (docs/scaling.md#measured).
func TestFleetViewsDoNotPullEveryProcess(t *testing.T) {
	checked := 0
	for _, p := range allPanels(t) {
		if !slices.Contains(fleetBoards, filepath.Base(p.file)) {
			continue
		}
		for _, tg := range p.Targets {
			expr, err := parser.NewParser(parser.Options{}).ParseExpr(vars{}.substitute(tg.Expr))
			if err != nil {
				t.Fatalf("%s %q: %v", p.file, p.Title, err)
			}
			parser.Inspect(expr, func(n parser.Node, path []parser.Node) error {
				vs, ok := n.(*parser.VectorSelector)
				if !ok || !perProcess(vs.Name) {
					return nil
				}
				checked++
				if !boundedOrAggregated(path) {
					t.Errorf("%s %q (%s): reads every process of the fleet (%s); aggregate pid away or show a topk", filepath.Base(p.file), p.Title, tg.RefID, vs.Name)
				}
				return nil
			})
		}
	}
	if checked < 3 {
		t.Errorf("only %d per-process selectors found in %v; the walk is broken", checked, fleetBoards)
	}
}

func TestBoundedOrAggregated(t *testing.T) {
	for expr, want := range map[string]bool{
		`gpulens_process_info`: false,
		`sum by (namespace) (gpulens_process_memory_used_bytes)`:  true,
		`max by (cluster, instance, pid) (gpulens_process_info)`:  false,
		`sum by (instance) (max by (pid) (gpulens_process_info))`: true,
		`topk(10, process:gpulens_use_cost:usd_per_hour)`:         true,
		`sum without (pid) (gpulens_process_info)`:                true,
		`sum without (gpu) (gpulens_process_info)`:                false,
		`sort_desc(gpulens_process_info)`:                         false,
	} {
		e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
		if err != nil {
			t.Fatal(err)
		}
		got := false
		parser.Inspect(e, func(n parser.Node, path []parser.Node) error {
			if _, ok := n.(*parser.VectorSelector); ok {
				got = boundedOrAggregated(path)
			}
			return nil
		})
		if got != want {
			t.Errorf("%s: bounded %v, want %v", expr, got, want)
		}
	}
}
