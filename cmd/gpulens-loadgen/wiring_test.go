package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// commandImports are the load generator's packages the command may
// import: the campaign it calls, and what it writes (report, render,
// compare) and how it names its flags (option). The rest are the
// campaign's to assemble.
var commandImports = []string{"campaign", "compare", "option", "render", "report"}

// TestCommandWiresNotAssembles: the command fills campaign.Settings from
// its flags and calls the campaign; it assembles none of the campaign's
// configuration itself (no campaign.Options, Plan or SearchConfig literal
// with fields)
// and imports no load generator package beyond commandImports.
func TestCommandWiresNotAssembles(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if pkg, ok := strings.CutPrefix(p, "github.com/gpulens/gpulens/loadgen/"); ok && !slices.Contains(commandImports, pkg) {
				t.Errorf("%s imports loadgen/%s: the campaign assembles from its settings (loadgen/campaign, settings.go)", fset.Position(imp.Pos()), pkg)
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if c, ok := n.(*ast.CompositeLit); ok && len(c.Elts) > 0 { // a zero value assembles nothing
				if s, ok := c.Type.(*ast.SelectorExpr); ok {
					if x, ok := s.X.(*ast.Ident); ok && x.Name == "campaign" && slices.Contains([]string{"Options", "Plan", "SearchConfig"}, s.Sel.Name) {
						t.Errorf("%s: a campaign.%s assembled by the command; fill campaign.Settings and let the campaign build it", fset.Position(c.Pos()), s.Sel.Name)
					}
				}
			}
			return true
		})
	}
	if checked < 10 {
		t.Fatalf("checked only %d files", checked)
	}
}
