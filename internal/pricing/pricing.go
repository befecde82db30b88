// Package pricing reads a GPU price file (USD per GPU-hour by GPU model
// name or glob pattern, with overrides for some nodes or node labels) and
// prices the GPUs of one node from it. The format and the matching order are
// documented in docs/cost.md#price-file.
//
// Matching, for a GPU of model name M on a node:
//
//  1. the overrides, in file order, that apply to the node (its name matches
//     the override's node pattern, and each of the override's labels equals
//     the node's label of that name); in each, M's exact entry, else the most
//     specific pattern matching M;
//  2. the top-level models table, likewise;
//  3. the node's fallback price (the exporter's --cost.gpu-hourly-usd),
//     when given.
//
// The first price found wins. The most specific pattern is the one with the
// most literal characters (outside *, ? and [...]); then the one with the most
// single-character wildcards (? and [...]); then the first in the file.
package pricing

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"regexp"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/internal/yamlerr"
)

// MaxPrice bounds a price: more per GPU-hour is a monthly or yearly price
// typed by mistake.
const MaxPrice = 1000.0

// Currency is the only currency a price file may name.
const Currency = "USD"

// Table is a parsed price file.
type Table struct {
	// Source names the file in messages.
	Source    string
	models    models
	overrides []override
}

// override is one entry of the overrides list.
type override struct {
	path   string // "overrides[2]" for Source
	node   string // glob; "" matches every node
	labels map[string]string
	models models
}

// entry is one model name or pattern and its price.
type entry struct {
	pattern string
	glob    bool
	price   float64
	line    int
	order   int
	literal int // characters outside wildcards
	single  int // ? and [...] wildcards
}

// models is a models table: exact names, and patterns from the most to the
// least specific.
type models struct {
	exact    map[string]entry
	patterns []entry
}

// Node is what the price file's overrides can select on.
type Node struct {
	Name   string
	Labels map[string]string
}

// Price is a GPU's price and where it came from.
type Price struct {
	USDPerHour float64
	// From names the entry: `prices.yaml:7 models["NVIDIA H100*"]`, or
	// FromFallback for the node's fallback price.
	From string
}

// FromFallback is Price.From of a fallback price.
const FromFallback = "fallback"

// lookup returns the entry pricing model: its exact entry, else the most
// specific pattern.
func (m models) lookup(model string) (entry, bool) {
	if e, ok := m.exact[model]; ok {
		return e, true
	}
	for _, e := range m.patterns {
		if ok, _ := path.Match(e.pattern, model); ok {
			return e, true
		}
	}
	return entry{}, false
}

func (o override) applies(n Node) bool {
	if o.node != "" {
		if ok, _ := path.Match(o.node, n.Name); !ok {
			return false
		}
	}
	for k, v := range o.labels {
		if got, ok := n.Labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Lookup prices a GPU of the model on the node from the table alone (steps
// 1 and 2 of the package comment). A nil table prices nothing.
func (t *Table) Lookup(model string, n Node) (Price, bool) {
	if t == nil {
		return Price{}, false
	}
	for _, o := range t.overrides {
		if !o.applies(n) {
			continue
		}
		if e, ok := o.models.lookup(model); ok {
			return Price{USDPerHour: e.price, From: fmt.Sprintf("%s:%d %s.models[%q]", t.Source, e.line, o.path, e.pattern)}, true
		}
	}
	if e, ok := t.models.lookup(model); ok {
		return Price{USDPerHour: e.price, From: fmt.Sprintf("%s:%d models[%q]", t.Source, e.line, e.pattern)}, true
	}
	return Price{}, false
}

// Resolver prices the GPUs of one node: from a table (may be nil), then a
// fallback price.
type Resolver struct {
	table       *Table
	node        Node
	fallback    float64
	hasFallback bool
}

// NewResolver returns a resolver for the node. fallback, when not nil, prices
// every GPU the table does not; it must be a valid price (CheckPrice).
func NewResolver(t *Table, n Node, fallback *float64) (*Resolver, error) {
	r := &Resolver{table: t, node: n}
	if fallback != nil {
		if err := CheckPrice(*fallback); err != nil {
			return nil, fmt.Errorf("fallback price: %w", err)
		}
		r.fallback, r.hasFallback = *fallback, true
	}
	if t == nil && !r.hasFallback {
		return nil, errors.New("no price table and no fallback price")
	}
	return r, nil
}

// Price returns the price of a GPU of the model on the resolver's node.
func (r *Resolver) Price(model string) (Price, bool) {
	if p, ok := r.table.Lookup(model, r.node); ok {
		return p, true
	}
	if r.hasFallback {
		return Price{USDPerHour: r.fallback, From: FromFallback}, true
	}
	return Price{}, false
}

// CheckPrice rejects a price that is not a finite number from 0 to MaxPrice.
func CheckPrice(p float64) error {
	switch {
	case math.IsNaN(p) || math.IsInf(p, 0):
		return fmt.Errorf("price %v is not a finite number", p)
	case p < 0:
		return fmt.Errorf("price %v must not be negative", p)
	case p > MaxPrice:
		return fmt.Errorf("price %v is more than %g USD per GPU-hour (is it a monthly price?)", p, MaxPrice)
	}
	return nil
}

// ---- parsing ----

// Error is one problem in a price file, located by line and field path
// (models["NVIDIA H100*"], overrides[1].node; empty for the whole file).
type Error = yamlerr.Error

// maxErrors bounds the problems reported for one file.
const maxErrors = 20

type parser struct {
	source string
	errs   []error
}

func (p *parser) add(n *yaml.Node, path, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		return
	}
	line := 0
	if n != nil {
		line = n.Line
	}
	p.errs = append(p.errs, &Error{Source: p.source, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Load reads and parses the price file at name.
func Load(name string) (*Table, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading price file: %w", err)
	}
	return Parse(data, name)
}

// Parse reads a price file. source names it in messages
// ("prices.yaml:7: models[\"NVIDIA H100*\"]: price -1 must not be negative").
// Unknown fields, duplicate entries, bad patterns and prices that are not
// numbers from 0 to MaxPrice are errors.
func Parse(data []byte, source string) (*Table, error) {
	p := &parser{source: source}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		line, msg := yamlerr.SplitLine(err.Error())
		return nil, &Error{Source: source, Line: line, Msg: "invalid YAML: " + msg}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{Source: source, Msg: "empty price file: expected a mapping with a models table"}
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{Source: source, Line: root.Line, Msg: "a price file is a mapping (currency, models, overrides)"}
	}
	t := &Table{Source: source}
	var modelsNode, overridesNode *yaml.Node
	p.fields(root, "", []string{"currency", "models", "overrides"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "currency":
			if v.Kind != yaml.ScalarNode || v.Value != Currency {
				p.add(v, "currency", "currency %q is not supported: prices are in %s", v.Value, Currency)
			}
		case "models":
			modelsNode = v
			t.models = p.models(v, "models")
		case "overrides":
			overridesNode = v
			t.overrides = p.overrides(v)
		}
	})
	if modelsNode == nil && overridesNode == nil && len(p.errs) == 0 {
		p.add(root, "", "no prices: give a models table (GPU model name or pattern: USD per GPU-hour)")
	}
	if len(p.errs) > 0 {
		return nil, errors.Join(p.errs...)
	}
	return t, nil
}

var (
	labelNameRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// fields walks a mapping, reporting unknown and repeated keys, and calls f
// for each known one.
func (p *parser) fields(n *yaml.Node, base string, known []string, f func(key string, k, v *yaml.Node)) {
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		fp := joinPath(base, k.Value)
		if k.Kind != yaml.ScalarNode {
			p.add(k, base, "a field name must be a plain string")
			continue
		}
		if !contains(known, k.Value) {
			p.add(k, fp, "unknown field %q (known fields: %s)", k.Value, strings.Join(known, ", "))
			continue
		}
		if line, dup := seen[k.Value]; dup {
			p.add(k, fp, "field %q given twice (first at line %d)", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		f(k.Value, k, v)
	}
}

func joinPath(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// models parses a models table.
func (p *parser) models(n *yaml.Node, base string) models {
	out := models{exact: map[string]entry{}}
	if n.Kind != yaml.MappingNode {
		p.add(n, base, "models is a mapping of GPU model names or patterns to USD per GPU-hour")
		return out
	}
	if len(n.Content) == 0 {
		p.add(n, base, "empty models table")
	}
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ep := fmt.Sprintf("%s[%q]", base, k.Value)
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			p.add(k, base, "a model name or pattern must be a non-empty string")
			continue
		}
		if line, dup := first[k.Value]; dup {
			p.add(k, ep, "duplicate model or pattern %q (first at line %d)", k.Value, line)
			continue
		}
		first[k.Value] = k.Line
		price, ok := p.price(v, ep)
		if !ok {
			continue
		}
		e := entry{pattern: k.Value, price: price, line: k.Line, order: i / 2}
		if strings.ContainsAny(k.Value, `*?[\`) {
			if _, err := path.Match(k.Value, ""); err != nil {
				p.add(k, ep, "bad pattern %q: %v (use *, ? and [...] as in shell globs)", k.Value, err)
				continue
			}
			e.glob = true
			e.literal, e.single = specificity(k.Value)
			out.patterns = append(out.patterns, e)
		} else {
			out.exact[k.Value] = e
		}
	}
	sort.SliceStable(out.patterns, func(i, j int) bool {
		a, b := out.patterns[i], out.patterns[j]
		if a.literal != b.literal {
			return a.literal > b.literal
		}
		if a.single != b.single {
			return a.single > b.single
		}
		return a.order < b.order
	})
	return out
}

// specificity counts a valid pattern's literal characters and its
// single-character wildcards (? and [...]).
func specificity(pattern string) (literal, single int) {
	for i := 0; i < len(pattern); i++ {
		switch pattern[i] {
		case '*':
		case '?':
			single++
		case '[':
			single++
			j := i + 1
			if j < len(pattern) && pattern[j] == '^' {
				j++
			}
			if j < len(pattern) && pattern[j] == ']' {
				j++ // a leading ] is part of the class
			}
			for j < len(pattern) && pattern[j] != ']' {
				if pattern[j] == '\\' {
					j++
				}
				j++
			}
			i = j
		case '\\':
			i++
			literal++
		default:
			literal++
		}
	}
	return literal, single
}

// price parses one price scalar.
func (p *parser) price(v *yaml.Node, at string) (float64, bool) {
	if v.Kind != yaml.ScalarNode || (v.Tag != "!!float" && v.Tag != "!!int") {
		p.add(v, at, "price %q is not a number (USD per GPU-hour, e.g. 2.50)", v.Value)
		return 0, false
	}
	var f float64
	if err := v.Decode(&f); err != nil {
		p.add(v, at, "price %q is not a number (USD per GPU-hour, e.g. 2.50)", v.Value)
		return 0, false
	}
	if err := CheckPrice(f); err != nil {
		p.add(v, at, "%v", err)
		return 0, false
	}
	return f, true
}

// overrides parses the overrides list.
func (p *parser) overrides(n *yaml.Node) []override {
	if n.Kind != yaml.SequenceNode {
		p.add(n, "overrides", "overrides is a list of {node, labels, models}")
		return nil
	}
	var out []override
	for i, item := range n.Content {
		op := fmt.Sprintf("overrides[%d]", i)
		if item.Kind != yaml.MappingNode {
			p.add(item, op, "an override is a mapping {node, labels, models}")
			continue
		}
		o := override{path: op}
		var hasModels, hasSelector bool
		p.fields(item, op, []string{"node", "labels", "models"}, func(key string, k, v *yaml.Node) {
			switch key {
			case "node":
				hasSelector = true
				if v.Kind != yaml.ScalarNode || v.Value == "" {
					p.add(v, op+".node", "node is a node name or glob pattern")
					return
				}
				if _, err := path.Match(v.Value, ""); err != nil {
					p.add(v, op+".node", "bad pattern %q: %v", v.Value, err)
					return
				}
				o.node = v.Value
			case "labels":
				hasSelector = true
				o.labels = p.labels(v, op+".labels")
			case "models":
				hasModels = true
				o.models = p.models(v, op+".models")
			}
		})
		if !hasSelector {
			p.add(item, op, "an override needs a node or labels to select the nodes it applies to")
		}
		if !hasModels {
			p.add(item, op, "an override needs a models table")
		}
		out = append(out, o)
	}
	return out
}

// labels parses an override's label selector.
func (p *parser) labels(n *yaml.Node, base string) map[string]string {
	out := map[string]string{}
	if n.Kind != yaml.MappingNode || len(n.Content) == 0 {
		p.add(n, base, "labels is a non-empty mapping of label names to values")
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		lp := joinPath(base, k.Value)
		if k.Kind != yaml.ScalarNode || !labelNameRE.MatchString(k.Value) {
			p.add(k, lp, "label name %q must match %s", k.Value, labelNameRE)
			continue
		}
		if _, dup := out[k.Value]; dup {
			p.add(k, lp, "label %q given twice", k.Value)
			continue
		}
		if v.Kind != yaml.ScalarNode {
			p.add(v, lp, "label value must be a string")
			continue
		}
		out[k.Value] = v.Value
	}
	return out
}

// ParseLabels parses "name=value" node labels (the exporter's --cost.label),
// rejecting invalid names and repeated ones.
func ParseLabels(pairs []string) (map[string]string, error) {
	out := map[string]string{}
	for _, s := range pairs {
		k, v, ok := strings.Cut(s, "=")
		if !ok || !labelNameRE.MatchString(k) {
			return nil, fmt.Errorf("node label %q: want name=value with a name matching %s", s, labelNameRE)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("node label %q given twice", k)
		}
		out[k] = v
	}
	return out, nil
}
