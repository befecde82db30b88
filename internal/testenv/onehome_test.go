package testenv

import (
	"context"
	"fmt"
	"go/ast"
	"go/token"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// oneHome is a rule the product writes once: the folder (from the module
// root) that holds it, and a finder of code that writes it again.
type oneHome struct {
	rule, home string
	find       func(f *ast.File) []ast.Node
	// allowed are files outside home that may write it, with why.
	allowed map[string]string
	// tests: test files are scanned too (a rule that lives in tests: their
	// tools, such as a query client or a rule-file rewriter).
	tests bool
}

// oneHomes lists the rules that had a second spelling in the product
// code and were given one home; a finder recognises the second spelling
// by its shape. Test files are not scanned: they may spell a rule out to
// check the home against it.
var oneHomes = []oneHome{
	{"NVML return codes: names, labels, what a reader does with each", "internal/nvmlret", nvmlReturnSpellings, nil, false},
	{"reading the text exposition format and a sample's value", "internal/promtext", expositionReading, map[string]string{
		"alerts/promcheck/promcheck.go": "the lint of metric names: legacy name validation on purpose, with a protobuf fallback; it reads names, never values",
	}, false},
	{"CUDA's version encoding (1000 × major + 10 × minor) and its text", "internal/cudaver", cudaVersionArithmetic, nil, false},
	{"a number written for people (digits, trailing zeros)", "internal/humanfmt", trailingZeroTrim, nil, false},
	{"the PIDs on a device (NVML's compute, MPS and graphics lists merged)", "internal/nvmlret", processListReading, map[string]string{
		"collector/process_reading.go": "the process metrics: each list apart, its type a label, each call's outcome counted",
		"internal/verify/nvml.go":      "the tenant's processes: each list apart, each call's outcome in the report, the MPS clients marked",
	}, false},
	// Tests and tools: one Prometheus API client (client_golang's) and one
	// rule-file rewriter.
	{"a query of Prometheus's HTTP API", clientGolangV1, prometheusAPIPaths, thisGuard, true},
	{"a Prometheus rule file rewritten", "internal/promrules", ruleFileRewriting, nil, true},
}

// thisGuard is the file of this test, whose finders and fixtures spell
// what they look for.
var thisGuard = map[string]string{"internal/testenv/onehome_test.go": "this guard: its finders and its test's fixtures"}

// clientGolangV1 is the home of Prometheus's HTTP API client: client_golang's
// (outside the module, so no file here is in it).
const clientGolangV1 = "github.com/prometheus/client_golang/api/prometheus/v1"

// TestEachRuleHasOneHome scans the module's Go files (tests left out) for
// a rule of oneHomes written outside its home.
func TestEachRuleHasOneHome(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found, err := scanHomes(root, oneHomes)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		t.Error(f)
	}
	if len(found) > 0 {
		t.Log("use the rule's home (or move the rule there); see oneHomes in internal/testenv/onehome_test.go")
	}
}

// scanHomes returns "path:line: RULE written outside HOME" for every
// finding of homes in the non-test Go files under root (testdata, hidden
// folders and nested modules skipped, as the go command does).
func scanHomes(root string, homes []oneHome) ([]string, error) {
	var found []string
	anyTests := slices.ContainsFunc(homes, func(h oneHome) bool { return h.tests })
	err := parseGoFiles(root, func(rel string) bool { return anyTests || !strings.HasSuffix(rel, "_test.go") },
		func(fset *token.FileSet, rel string, f *ast.File) {
			for _, h := range homes {
				if rel == h.home || strings.HasPrefix(rel, h.home+"/") || h.allowed[rel] != "" || (!h.tests && strings.HasSuffix(rel, "_test.go")) {
					continue
				}
				for _, n := range h.find(f) {
					found = append(found, fmt.Sprintf("%s:%d: %s written outside %s", rel, fset.Position(n.Pos()).Line, h.rule, h.home))
				}
			}
		})
	return found, err
}

// isSel reports whether e is pkg.name.
func isSel(e ast.Expr, pkg, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := s.X.(*ast.Ident)
	return ok && x.Name == pkg && s.Sel.Name == name
}

var nvmlConstName = regexp.MustCompile(`^"ERROR_[A-Z_]+"$`)

// nvmlReturnSpellings finds a table of NVML return codes: a map between
// nvml.Return and strings, or a return code's constant name in a string.
func nvmlReturnSpellings(f *ast.File) []ast.Node {
	nvml := importName(f, "github.com/NVIDIA/go-nvml/pkg/nvml")
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.MapType:
			if nvml != "" && (isSel(n.Key, nvml, "Return") || isSel(n.Value, nvml, "Return")) {
				out = append(out, n)
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && nvmlConstName.MatchString(n.Value) {
				out = append(out, n)
			}
		}
		return true
	})
	return out
}

// expositionReading finds a text exposition parsed or a sample's value
// read by hand: expfmt's text parser, or a sample's untyped value (the
// third case of every hand-written value switch).
func expositionReading(f *ast.File) []ast.Node {
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok {
			if s, ok := c.Fun.(*ast.SelectorExpr); ok {
				switch s.Sel.Name {
				case "TextToMetricFamilies", "GetUntyped":
					out = append(out, c)
				}
			}
		}
		return true
	})
	return out
}

// cudaVersionArithmetic finds CUDA's version encoding worked out by hand:
// the minor version as v % 1000 / 10, or a version as major*1000 + minor*10.
func cudaVersionArithmetic(f *ast.File) []ast.Node {
	isLit := func(e ast.Expr, v string) bool {
		l, ok := ast.Unparen(e).(*ast.BasicLit)
		return ok && l.Value == v
	}
	isOp := func(e ast.Expr, op token.Token, lit string) bool {
		b, ok := ast.Unparen(e).(*ast.BinaryExpr)
		return ok && b.Op == op && isLit(b.Y, lit)
	}
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if b, ok := n.(*ast.BinaryExpr); ok {
			if (b.Op == token.QUO && isLit(b.Y, "10") && isOp(b.X, token.REM, "1000")) ||
				(b.Op == token.ADD && isOp(b.X, token.MUL, "1000") && isOp(b.Y, token.MUL, "10")) {
				out = append(out, b)
			}
		}
		return true
	})
	return out
}

// trailingZeroTrim finds a number's trailing zeros cut by hand, the core
// of every hand-written number formatter: strings.TrimRight(s, "0").
func trailingZeroTrim(f *ast.File) []ast.Node {
	strs := importName(f, "strings")
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if c, ok := n.(*ast.CallExpr); ok && strs != "" && isSel(c.Fun, strs, "TrimRight") && len(c.Args) == 2 {
			if l, ok := c.Args[1].(*ast.BasicLit); ok && l.Value == `"0"` {
				out = append(out, c)
			}
		}
		return true
	})
	return out
}

// processListReading finds NVML's MPS process list read (the list only a
// reader of all three lists reads): a reference to
// GetMPSComputeRunningProcesses, called or taken as a value.
func processListReading(f *ast.File) []ast.Node {
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok && s.Sel.Name == "GetMPSComputeRunningProcesses" {
			out = append(out, s)
		}
		return true
	})
	return out
}

// prometheusAPIPaths finds a hand-written client of Prometheus's HTTP API:
// a path of it ("/api/v1/query", "/api/v1/rules", …) in a string, but for
// a fake server's (a case of a switch, a Handle or HandleFunc pattern).
func prometheusAPIPaths(f *ast.File) []ast.Node {
	served := map[ast.Node]bool{}
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CaseClause:
			for _, e := range n.List {
				served[e] = true
			}
		case *ast.CallExpr:
			if s, ok := n.Fun.(*ast.SelectorExpr); ok && (s.Sel.Name == "Handle" || s.Sel.Name == "HandleFunc") && len(n.Args) > 0 {
				served[n.Args[0]] = true
			}
		case *ast.BasicLit:
			if n.Kind == token.STRING && !served[n] && strings.Contains(n.Value, "/api/v1/") {
				out = append(out, n)
			}
		}
		return true
	})
	return out
}

// yamlPackages are the YAML libraries a rule file is read with.
var yamlPackages = []string{"go.yaml.in/yaml/v3", "go.yaml.in/yaml/v2", "gopkg.in/yaml.v3", "gopkg.in/yaml.v2", "sigs.k8s.io/yaml"}

// ruleFileRewriting finds a rule file's fields handled by hand, in a file
// that reads YAML: the key of an alert's for: or keep_firing_for: in a
// string, or a group's interval looked up, compared or switched on.
func ruleFileRewriting(f *ast.File) []ast.Node {
	if !slices.ContainsFunc(yamlPackages, func(p string) bool { return importPath(f, p) }) {
		return nil
	}
	isKey := func(e ast.Expr, keys ...string) bool {
		l, ok := ast.Unparen(e).(*ast.BasicLit)
		return ok && l.Kind == token.STRING && slices.Contains(keys, l.Value)
	}
	var out []ast.Node
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BasicLit:
			if isKey(n, `"for"`, `"keep_firing_for"`) {
				out = append(out, n)
			}
		case *ast.IndexExpr:
			if isKey(n.Index, `"interval"`) {
				out = append(out, n)
			}
		case *ast.BinaryExpr:
			if (n.Op == token.EQL || n.Op == token.NEQ) && (isKey(n.X, `"interval"`) || isKey(n.Y, `"interval"`)) {
				out = append(out, n)
			}
		case *ast.CaseClause:
			for _, e := range n.List {
				if isKey(e, `"interval"`) {
					out = append(out, e)
				}
			}
		}
		return true
	})
	return out
}

// importPath reports whether f imports path (under any name).
func importPath(f *ast.File, path string) bool {
	return slices.ContainsFunc(f.Imports, func(imp *ast.ImportSpec) bool {
		p, _ := strconv.Unquote(imp.Path.Value)
		return p == path
	})
}

// Each finder catches the spelling its home replaced, in a file outside
// the home, and not in the home or in a test file.
func TestScanHomes(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n",
		"a/a.go": `package a

import nv "github.com/NVIDIA/go-nvml/pkg/nvml"

var names = map[nv.Return]string{nv.ERROR_UNKNOWN: "unknown"}

func f() string { return "ERROR_GPU_IS_LOST" }

func value(m *dto.Metric) float64 {
	if m.GetUntyped() != nil {
		return m.GetUntyped().GetValue()
	}
	return new(expfmt.TextParser).TextToMetricFamilies(nil)
}

func cuda(v int) (string, int) { return fmt.Sprintf("%d.%d", v/1000, (v%1000)/10), 12*1000 + 4*10 }
`,
		"c/c.go": `package c

import str "strings"

func trim(s string) string { return str.TrimRight(str.TrimRight(s, "0"), ".") }
`,
		"f/f.go": `package f

func pids(d nvml.Device) { _, _ = d.GetMPSComputeRunningProcesses() }

func (d *dev) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) { return nil, 0 }
`,
		"alerts/promcheck/promcheck.go": `package promcheck; var x = p.TextToMetricFamilies(nil)`,
		"d/client_test.go": `package d

func query(base string) string { return base + "/api/v1/query?query=up" }

func serve(mux *http.ServeMux, path string) {
	mux.HandleFunc("/api/v1/rules", nil)
	switch path {
	case "/api/v1/query":
	}
}
`,
		"e/rules_test.go": `package e

import "go.yaml.in/yaml/v3"

func shorten(m map[string]any, key string) {
	if key == "for" || key == "keep_firing_for" {
		m["interval"] = "1s"
	}
	switch key {
	case "interval":
	}
	_ = yaml.Marshal
}
`,
		"e/other.go": `package e

func log(m map[string]any) { m["interval"] = "1s"; _ = "for" }
`,
		"internal/promrules/p.go": "package promrules\n\nimport \"go.yaml.in/yaml/v3\"\n\nvar k = \"for\"\n",
		"a/a_test.go":             `package a; var x = map[nvml.Return]string{}; const y = "ERROR_UNKNOWN"`,
		"internal/nvmlret/n.go":   `package nvmlret; const y = "ERROR_UNKNOWN"`,
		"tools/go.mod":            "module tools\n",
		"tools/t.go":              `package t; const y = "ERROR_UNKNOWN"`,
		"b/testdata/x.go":         `package x; const y = "ERROR_UNKNOWN"`,
	}
	writeTree(t, root, files)
	found, err := scanHomes(root, oneHomes)
	if err != nil {
		t.Fatal(err)
	}
	const nv = "NVML return codes: names, labels, what a reader does with each written outside internal/nvmlret"
	const tx = "reading the text exposition format and a sample's value written outside internal/promtext"
	const cv = "CUDA's version encoding (1000 × major + 10 × minor) and its text written outside internal/cudaver"
	const hf = "a number written for people (digits, trailing zeros) written outside internal/humanfmt"
	const pl = "the PIDs on a device (NVML's compute, MPS and graphics lists merged) written outside internal/nvmlret"
	const pq = "a query of Prometheus's HTTP API written outside " + clientGolangV1
	const rr = "a Prometheus rule file rewritten written outside internal/promrules"
	want := []string{
		"a/a.go:5: " + nv,
		"a/a.go:7: " + nv,
		"a/a.go:10: " + tx,
		"a/a.go:11: " + tx,
		"a/a.go:13: " + tx,
		"a/a.go:16: " + cv,
		"a/a.go:16: " + cv,
		"c/c.go:5: " + hf,
		"d/client_test.go:3: " + pq,
		"e/rules_test.go:6: " + rr,
		"e/rules_test.go:6: " + rr,
		"e/rules_test.go:7: " + rr,
		"e/rules_test.go:10: " + rr,
		"f/f.go:3: " + pl,
	}
	if !slices.Equal(found, want) {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
	}
}
