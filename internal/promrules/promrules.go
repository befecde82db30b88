// Package promrules rewrites Prometheus rule files for tests and tools,
// once: a walk over a file's groups and rules that edits the values of
// its durations (a group's interval, an alert's for and keep_firing_for)
// and of its expressions, and leaves everything else as it was (names,
// labels, annotations, order, comments). The end-to-end tests shorten
// the alerts' for:, the scenario tests divide every duration by the
// simulation's speed-up (Scale), the Thanos test sets the groups'
// intervals; each says what to change in an Edit.
package promrules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Field is where a value sits: its group, its rule (the alert's or
// record's name; empty for a group's own field) and its key (interval,
// for, keep_firing_for or expr).
type Field struct {
	Group, Rule, Key string
}

// Edit says what a rewrite changes; a nil function leaves its values as
// they are. Each is called for the fields a file has, in file order.
type Edit struct {
	// Duration returns the new value of a duration: a group's interval,
	// an alerting rule's for or keep_firing_for.
	Duration func(f Field, d model.Duration) (model.Duration, error)
	// Expr returns a rule's new expression.
	Expr func(f Field, expr string) (string, error)
}

// Rewrite returns the rule file src with e's changes. Every error of
// every field is returned, each naming its field.
func Rewrite(src []byte, e Edit) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(src, &doc); err != nil {
		return nil, err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("not a rule file (a mapping with groups)")
	}
	var errs []error
	for _, g := range value(doc.Content[0], "groups").seq() {
		group := value(g, "name").text()
		edit(g, Field{Group: group}, e, &errs, "interval")
		for _, r := range value(g, "rules").seq() {
			name := value(r, "alert").text()
			keys := []string{"expr", "for", "keep_firing_for"}
			if name == "" {
				name, keys = value(r, "record").text(), []string{"expr"}
			}
			edit(r, Field{Group: group, Rule: name}, e, &errs, keys...)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return yaml.Marshal(&doc)
}

// edit applies e to the keys of the mapping m.
func edit(m *yaml.Node, at Field, e Edit, errs *[]error, keys ...string) {
	for _, key := range keys {
		v := value(m, key)
		if v == nil {
			continue
		}
		f := at
		f.Key = key
		if key == "expr" {
			if e.Expr == nil {
				continue
			}
			out, err := e.Expr(f, v.Value)
			if err != nil {
				*errs = append(*errs, fmt.Errorf("%s: %w", f, err))
				continue
			}
			v.Value, v.Style = out, 0
			continue
		}
		if e.Duration == nil {
			continue
		}
		d, err := model.ParseDuration(v.Value)
		if err == nil {
			d, err = e.Duration(f, d)
		}
		if err != nil {
			*errs = append(*errs, fmt.Errorf("%s: %s: %w", f, v.Value, err))
			continue
		}
		v.Value = d.String()
	}
}

func (f Field) String() string {
	if f.Rule == "" {
		return fmt.Sprintf("group %s: %s", f.Group, f.Key)
	}
	return fmt.Sprintf("group %s, rule %s: %s", f.Group, f.Rule, f.Key)
}

type node yaml.Node

// value is the value of key in the mapping n (nil: none).
func value(n *yaml.Node, key string) *node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return (*node)(n.Content[i+1])
		}
	}
	return nil
}

func (n *node) seq() []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func (n *node) text() string {
	if n == nil {
		return ""
	}
	return n.Value
}

// CopyFiles writes each rule file of files into dir under its own base
// name, rewritten by e.
func CopyFiles(files []string, dir string, e Edit) error {
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		out, err := Rewrite(src, e)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), out, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// SetFor sets every alert's for: to d and adds each alert it changes to
// *changed.
func SetFor(d model.Duration, changed *[]string) Edit {
	return Edit{Duration: func(f Field, old model.Duration) (model.Duration, error) {
		if f.Key != "for" {
			return old, nil
		}
		*changed = append(*changed, f.Rule)
		return d, nil
	}}
}

// SetIntervals sets the interval of every group that has one to d.
func SetIntervals(d model.Duration) Edit {
	return Edit{Duration: func(f Field, old model.Duration) (model.Duration, error) {
		if f.Key == "interval" && f.Rule == "" {
			return d, nil
		}
		return old, nil
	}}
}

// Scale divides every duration of a rule file by k: the groups'
// intervals, the alerts' for and keep_firing_for, and the durations of
// every expression (ScaleExpr), for a simulation k times faster than
// real time.
func Scale(k int) Edit {
	return Edit{
		Duration: func(_ Field, d model.Duration) (model.Duration, error) { return scaleDuration(d, k) },
		Expr:     func(_ Field, expr string) (string, error) { return ScaleExpr(expr, k) },
	}
}

// scaleDuration divides d by k exactly (to the millisecond, Prometheus's
// resolution).
func scaleDuration(d model.Duration, k int) (model.Duration, error) {
	unit := time.Duration(k) * time.Millisecond
	if time.Duration(d)%unit != 0 {
		return 0, fmt.Errorf("%s is not a whole number of milliseconds once divided by %d", d, k)
	}
	return model.Duration(time.Duration(d) / time.Duration(k)), nil
}

// ScaleExpr divides the durations of a PromQL expression by k: ranges,
// offsets, subquery steps, predict_linear's horizon and a number compared
// with an expression of time() or timestamp(). Any other use of those two
// functions is an error: the unit of the result would be unknown.
func ScaleExpr(expr string, k int) (string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return "", err
	}
	var errs []error
	sc := func(d time.Duration) time.Duration {
		s, err := scaleDuration(model.Duration(d), k)
		if err != nil {
			errs = append(errs, err)
		}
		return time.Duration(s)
	}
	scaledNumbers := map[*parser.NumberLiteral]bool{}
	scaleNumber := func(n parser.Expr, why string) {
		for {
			p, ok := n.(*parser.ParenExpr)
			if !ok {
				break
			}
			n = p.Expr
		}
		lit, ok := n.(*parser.NumberLiteral)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s is not a number", why, n))
			return
		}
		if !scaledNumbers[lit] {
			lit.Val /= float64(k)
			scaledNumbers[lit] = true
		}
	}
	timeCalls := map[*parser.Call]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch x := n.(type) {
		case *parser.MatrixSelector:
			x.Range, x.RangeExpr = sc(x.Range), nil
		case *parser.SubqueryExpr:
			x.Range, x.RangeExpr = sc(x.Range), nil
			x.Step, x.StepExpr = sc(x.Step), nil
			x.OriginalOffset, x.OriginalOffsetExpr = sc(x.OriginalOffset), nil
		case *parser.VectorSelector:
			x.OriginalOffset, x.OriginalOffsetExpr = sc(x.OriginalOffset), nil
		case *parser.Call:
			switch x.Func.Name {
			case "predict_linear":
				scaleNumber(x.Args[1], "predict_linear's horizon")
			case "time", "timestamp":
				timeCalls[x] = true
			}
		}
		return nil
	})
	// Then the numbers compared with time(), now that every call is known.
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if x, ok := n.(*parser.BinaryExpr); ok && x.Op.IsComparisonOperator() {
			if calls := callsIn(x.LHS, timeCalls); len(calls) > 0 {
				scaleNumber(x.RHS, "compared with time()")
				forget(timeCalls, calls)
			} else if calls := callsIn(x.RHS, timeCalls); len(calls) > 0 {
				scaleNumber(x.LHS, "compared with time()")
				forget(timeCalls, calls)
			}
		}
		return nil
	})
	if len(timeCalls) > 0 && !timeOnlyRecorded(e) {
		errs = append(errs, fmt.Errorf("%s: time() or timestamp() outside a comparison with a number", expr))
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("%s: %w", expr, err)
	}
	return e.String(), nil
}

// timeOnlyRecorded accepts `time() - x` as a whole expression: a recording
// rule of an age in seconds, which no shipped alert compares.
func timeOnlyRecorded(e parser.Expr) bool {
	b, ok := e.(*parser.BinaryExpr)
	if !ok || b.Op != parser.SUB {
		return false
	}
	c, ok := b.LHS.(*parser.Call)
	return ok && c.Func.Name == "time"
}

func callsIn(e parser.Expr, calls map[*parser.Call]bool) []*parser.Call {
	var out []*parser.Call
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if c, ok := n.(*parser.Call); ok && calls[c] {
			out = append(out, c)
		}
		return nil
	})
	return out
}

func forget(m map[*parser.Call]bool, calls []*parser.Call) {
	for _, c := range calls {
		delete(m, c)
	}
}
