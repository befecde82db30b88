package testenv

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sleepInLoopAllowed lists the functions of _test.go files (path from the
// module root, then the top-level function, "Type.Method" for a method)
// whose time.Sleep inside a loop is not a wait for a condition, with how
// many such calls the function has and why. Anything else that sleeps in a
// loop is a hand-written poll: use Poll or Eventually, with a deadline.
var sleepInLoopAllowed = map[string]allowance{
	// The idle interval between sampler cycles is what is measured.
	"collector/bench_test.go:BenchmarkSamplerCPU": {1, "the measured idle interval"},
	// Received bytes must sit in the socket a known time before the read.
	"internal/rxstamp/rxstamp_linux_test.go:TestArrivalIsBeforeALateRead": {1, "the bytes' known time in the queue"},
	// Fake servers pacing their answers: the gaps are the input under test.
	"loadgen/client/client_test.go:sseServerSignals":     {1, "the fake server's gap between pieces"},
	"loadgen/client/h1_test.go:newRawServer":             {1, "the raw server's pacing between pieces"},
	"loadgen/runner/runner_test.go:fakeServer.ServeHTTP": {1, "the fake server's inter-token latency"},
}

// execAllowed lists the functions of _test.go files outside internal/testenv
// that may call exec.Command or exec.CommandContext themselves, with how
// many calls and why. Every other test gets its programs from testenv (Binary, Run, RunEnv,
// Output): built or found once, skipped under -short where they need a
// tool, run in their own process group, stopped when the test ends.
var execAllowed = map[string]allowance{}

// allowance is how many calls of a kind a function may make, and why.
type allowance struct {
	calls int
	why   string
}

// TestTestsWaitAndExecThroughTestenv scans every _test.go file of the
// module: no time.Sleep inside a loop (a hand-written poll), and no
// exec.Command outside internal/testenv, but for the allow-lists above.
// An allow-list entry that no longer matches anything fails too, so the
// lists shrink with the code.
func TestTestsWaitAndExecThroughTestenv(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	root, err := moduleRoot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found, err := scanTests(root)
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]map[string]allowance{sleepInLoop: sleepInLoopAllowed, execCall: execAllowed}
	byFunc := map[string][]finding{} // kind and function
	for _, f := range found {
		byFunc[f.kind+" in "+f.fn] = append(byFunc[f.kind+" in "+f.fn], f)
	}
	for _, key := range slices.Sorted(maps.Keys(byFunc)) {
		fs := byFunc[key]
		if a, ok := allowed[fs[0].kind][fs[0].fn]; ok && len(fs) == a.calls {
			continue
		} else if ok {
			t.Errorf("%s: %d calls, the allow-list grants %d (%s)", key, len(fs), a.calls, a.why)
		}
		for _, f := range fs {
			t.Errorf("%s: %s in %s", f.pos, f.kind, f.fn)
		}
	}
	for kind, allow := range allowed {
		for fn := range allow {
			if byFunc[kind+" in "+fn] == nil {
				t.Errorf("allow-list entry %q has no %s any more: remove it", fn, kind)
			}
		}
	}
	if t.Failed() {
		t.Log("wait with testenv.Poll/Eventually (a deadline and what was seen), start programs with testenv " +
			"(Binary, Run, RunEnv, Output); a justified exception goes into an allow-list in " + filepath.Base(thisFile) + " with why")
	}
}

const thisFile = "internal/testenv/guard_test.go"

// The guard finds each kind of violation, in a loop of a function literal
// too, under an aliased import, and names the file, line and function; a
// sleep outside a loop, a loop in a function literal that itself sleeps
// outside it, and testenv's own exec calls pass.
func TestScanTests(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{
		"go.mod": "module example.com/m\n",
		"a/a_test.go": `package a

import (
	"os/exec"
	"time"
)

func TestPoll(t *testing.T) {
	for !done() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(time.Second)
	for range 3 {
		go func() {
			time.Sleep(time.Second)
		}()
	}
}

func (s *server) serve() {
	_ = exec.Command("true")
}
`,
		"b/b_test.go": `package b

import (
	run "os/exec"
	"time"
)

func helper() {
	_ = func() {
		for {
			time.Sleep(1)
		}
	}
	_ = run.CommandContext(nil, "true")
}
`,
		"b/b.go": `package b

import "os/exec"

func notATest() { for { _ = exec.Command("x") } }
`,
		"internal/testenv/x_test.go": `package testenv

import "os/exec"

func ok() { _ = exec.Command("x") }
`,
		"testdata/skip_test.go": "package broken {",
	}
	writeTree(t, root, files)
	found, err := scanTests(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, f := range found {
		got = append(got, fmt.Sprintf("%s %s %s", f.pos, f.kind, f.fn))
	}
	want := []string{
		"a/a_test.go:10 time.Sleep in a loop a/a_test.go:TestPoll",
		"a/a_test.go:21 exec.Command a/a_test.go:server.serve",
		"b/b_test.go:11 time.Sleep in a loop b/b_test.go:helper",
		"b/b_test.go:14 exec.Command b/b_test.go:helper",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

const (
	sleepInLoop = "time.Sleep in a loop"
	execCall    = "exec.Command"
)

// finding is one violation: where (path:line from the root), what, and the
// top-level function it is in ("path:Func" or "path:Type.Method").
type finding struct {
	pos, kind, fn string
}

// scanTests parses every _test.go file under root (parseGoFiles).
func scanTests(root string) ([]finding, error) {
	var out []finding
	err := parseGoFiles(root, func(rel string) bool { return strings.HasSuffix(rel, "_test.go") },
		func(fset *token.FileSet, rel string, f *ast.File) { out = append(out, scanFile(fset, rel, f)...) })
	return out, err
}

// parseGoFiles parses every .go file under root that keep accepts (its
// path from root, with slashes) and hands it to use, skipping testdata,
// vendor, hidden and underscore folders and nested modules (a go.mod of
// their own), as the go command does.
func parseGoFiles(root string, keep func(rel string) bool, use func(fset *token.FileSet, rel string, f *ast.File)) error {
	fset := token.NewFileSet()
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || isFile(filepath.Join(path, "go.mod"))) {
				return filepath.SkipDir
			}
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(rel, ".go") || !keep(rel) {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		use(fset, rel, f)
		return nil
	})
}

// writeTree writes files (path from root → content) under root.
func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func scanFile(fset *token.FileSet, rel string, f *ast.File) []finding {
	timeName, execName := importName(f, "time"), importName(f, "os/exec")
	checkExec := !strings.HasPrefix(rel, "internal/testenv/")
	var out []finding
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil {
			continue
		}
		fn := rel + ":" + funcName(fd)
		// loops counts the for and range statements around a node within
		// its innermost function (a function literal starts at zero).
		var walk func(n ast.Node, loops int)
		walk = func(n ast.Node, loops int) {
			if n == nil || reflect.ValueOf(n).IsNil() {
				return
			}
			ast.Inspect(n, func(c ast.Node) bool {
				if c == n {
					return true
				}
				switch c := c.(type) {
				case *ast.FuncLit:
					walk(c.Body, 0)
					return false
				case *ast.ForStmt:
					walk(c.Init, loops)
					walk(c.Cond, loops+1)
					walk(c.Post, loops+1)
					walk(c.Body, loops+1)
					return false
				case *ast.RangeStmt:
					walk(c.X, loops)
					walk(c.Body, loops+1)
					return false
				case *ast.SelectorExpr:
					pkg, ok := c.X.(*ast.Ident)
					if !ok {
						return true
					}
					line := rel + ":" + strconv.Itoa(fset.Position(c.Pos()).Line)
					switch {
					case timeName != "" && pkg.Name == timeName && c.Sel.Name == "Sleep" && loops > 0:
						out = append(out, finding{line, sleepInLoop, fn})
					case checkExec && execName != "" && pkg.Name == execName && (c.Sel.Name == "Command" || c.Sel.Name == "CommandContext"):
						out = append(out, finding{line, execCall, fn})
					}
				}
				return true
			})
		}
		walk(fd.Body, 0)
	}
	return out
}

// importName is the name a file refers to the package path by ("" when it
// does not import it, or imports it blank or with a dot).
func importName(f *ast.File, path string) string {
	for _, imp := range f.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == path {
			if imp.Name != nil {
				if imp.Name.Name == "_" || imp.Name.Name == "." {
					return ""
				}
				return imp.Name.Name
			}
			return filepath.Base(path)
		}
	}
	return ""
}

// funcName is a function's name, "Type.Method" for a method.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if star, ok := typ.(*ast.StarExpr); ok {
		typ = star.X
	}
	if idx, ok := typ.(*ast.IndexExpr); ok {
		typ = idx.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}
