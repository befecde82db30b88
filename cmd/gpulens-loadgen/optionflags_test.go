package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/simserver"
	"github.com/gpulens/gpulens/loadgen/campaign"
	"github.com/gpulens/gpulens/loadgen/option"
	"github.com/gpulens/gpulens/loadgen/report"
)

// optionMaps are the maps that spell the libraries' options as flags:
// each with the option structs whose fields it spells, and the library
// folders or files (from the module root, files as path.Match patterns) whose option.Name values reach
// it (but for those under skip).
var optionMaps = []struct {
	name    string
	flags   map[option.Name]string
	structs []any
	dirs    []string
	skip    []string
}{
	{"loadFlagNames", loadFlagNames, []any{campaign.Settings{}, campaign.Plan{}, campaign.Options{}}, []string{"loadgen"}, []string{"loadgen/report/bill.go", "loadgen/campaign/search*.go"}},
	// search renames its errors with loadFlagNames and searchFlagNames
	// over it (search_cmd.go).
	{"searchFlagNames over loadFlagNames", searchNames(), []any{campaign.SearchSettings{}, campaign.SearchConfig{}, campaign.Settings{}, campaign.Plan{}, campaign.Options{}}, []string{"loadgen/campaign/search*.go"}, nil},
	{"simFlagNames", simFlagNames, []any{simserver.Config{}}, []string{"internal/sim/simserver"}, nil},
	{"gpuTieFlagNames", gpuTieFlagNames, []any{simserver.GPUTie{}}, []string{"internal/sim/simserver"}, nil},
	{"costFlagNames", costFlagNames, []any{report.Terms{}}, []string{"loadgen/report/bill.go"}, nil},
}

// optionAliases are option names that are no field path of an option
// struct, with the field they name.
var optionAliases = map[string]string{
	"PromptNonce": "Workload.Nonce (the report's metadata.prompt_nonce)",
}

// TestOptionFlagNamesComplete: every option a library names in an error
// (option.Name("X") in its code) has its flag in the map of the command
// that renames the library's errors (where two maps share a library, the
// one whose option struct has the field), so that no error says "Levels"
// where the user typed --concurrency. The option structs are read by
// reflection: every option named and every key of a map is one of their
// fields (the field's name, or prefixed by the struct that holds it,
// ServerMetricsURL for ServerMetrics.URL, TraceFormat for
// TraceOptions.Format) or an alias of optionAliases, and every flag a
// map's spelling names exists.
func TestOptionFlagNamesComplete(t *testing.T) {
	t.Parallel()
	named := optionNamesIn(t, "../..", "loadgen", "internal/sim/simserver")
	app, _, _ := newApp()
	appFlags := flagNames(app)
	anyField := map[string]bool{}
	for a := range optionAliases {
		anyField[a] = true
	}
	for _, m := range optionMaps {
		fields := map[string]bool{}
		for _, s := range m.structs {
			fieldNames(reflect.TypeOf(s), "", fields, map[reflect.Type]bool{})
		}
		maps.Copy(anyField, fields)
		shared := false // another map serves one of m's folders
		for _, o := range optionMaps {
			shared = shared || (o.name != m.name && slices.ContainsFunc(o.dirs, func(d string) bool { return slices.Contains(m.dirs, d) }))
		}
		for _, name := range slices.Sorted(maps.Keys(named)) {
			where := named[name]
			in := slices.ContainsFunc(where, func(f string) bool {
				return slices.ContainsFunc(m.dirs, func(d string) bool { return under(f, d) }) &&
					!slices.ContainsFunc(m.skip, func(d string) bool { return under(f, d) })
			})
			if !in || (shared && !fields[name]) {
				continue
			}
			if m.flags[option.Name(name)] == "" {
				t.Errorf("%s names option %s, which %s does not spell as a flag", where[0], name, m.name)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(m.flags)) {
			if !fields[string(k)] && optionAliases[string(k)] == "" {
				t.Errorf("%s spells %s, which is no field of %s", m.name, k, typeNames(m.structs))
			}
			for _, f := range flagRE.FindAllString(m.flags[k], -1) {
				if !appFlags[strings.TrimPrefix(f, "--")] {
					t.Errorf("%s spells %s as %s: no command has that flag", m.name, k, f)
				}
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(named)) {
		if !anyField[name] {
			t.Errorf("%s names option %s, a field of no option struct the commands fill (name it by its field, or add an alias)", named[name][0], name)
		}
	}
}

var flagRE = regexp.MustCompile(`--[a-z0-9][a-z0-9.-]*[a-z0-9]`)

// under tells whether the file f is under the folder d or is the file d
// (a path.Match pattern: loadgen/campaign/search*.go).
func under(f, d string) bool {
	m, _ := path.Match(d, f)
	return m || strings.HasPrefix(f, d+"/")
}

func typeNames(structs []any) string {
	var s []string
	for _, v := range structs {
		s = append(s, reflect.TypeOf(v).String())
	}
	return strings.Join(s, ", ")
}

// fieldNames adds the names of t's fields, and of the fields of every
// struct it holds (by value, pointer, slice or map), to out: each by its
// name and prefixed by the field that holds it (prefix) and by its
// struct's name less Options or Config.
func fieldNames(t reflect.Type, prefix string, out map[string]bool, seen map[reflect.Type]bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || seen[t] {
		return
	}
	seen[t] = true
	typ := strings.TrimSuffix(strings.TrimSuffix(t.Name(), "Options"), "Config")
	for f := range t.Fields() {
		if f.IsExported() {
			out[f.Name], out[prefix+f.Name], out[typ+f.Name] = true, true, true
			fieldNames(f.Type, f.Name, out, seen)
		}
	}
}

// optionNamesIn returns every option.Name("X") of the non-test Go files
// under dirs (relative to root), with the files (from root) naming it.
func optionNamesIn(t *testing.T, root string, dirs ...string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, path)
			ast.Inspect(f, func(n ast.Node) bool {
				c, ok := n.(*ast.CallExpr)
				if !ok || len(c.Args) != 1 {
					return true
				}
				if s, ok := c.Fun.(*ast.SelectorExpr); ok && s.Sel.Name == "Name" {
					if x, ok := s.X.(*ast.Ident); ok && x.Name == "option" {
						if l, ok := c.Args[0].(*ast.BasicLit); ok && l.Kind == token.STRING {
							v, _ := strconv.Unquote(l.Value)
							if !slices.Contains(out[v], filepath.ToSlash(rel)) {
								out[v] = append(out[v], filepath.ToSlash(rel))
							}
						}
					}
				}
				return true
			})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 30 {
		t.Fatalf("found only %d option names under %v: the scan is broken", len(out), dirs)
	}
	return out
}

// flagNames are the long flags of every command of app.
func flagNames(app *kingpin.Application) map[string]bool {
	out := map[string]bool{}
	m := app.Model()
	var walk func(cmds []*kingpin.CmdModel)
	walk = func(cmds []*kingpin.CmdModel) {
		for _, c := range cmds {
			for _, f := range c.Flags {
				out[f.Name] = true
			}
			walk(c.Commands)
		}
	}
	for _, f := range m.Flags {
		out[f.Name] = true
	}
	walk(m.Commands)
	return out
}

// TestFlagDefaultsAreTheLibrarys: run, sweep and search, given no flag
// but the required ones, fill the campaign's settings with the library's
// defaults (campaign.DefaultSettings), so a default is written once.
func TestFlagDefaultsAreTheLibrarys(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"run", "sweep", "search"} {
		app := kingpin.New("t", "")
		f := addLoadFlags(app.Command(name, ""))
		if _, err := app.Parse([]string{name, "--target", "http://127.0.0.1:1/v1", "--model", "m"}); err != nil {
			t.Fatal(err)
		}
		want := campaign.DefaultSettings()
		want.Target, want.Model = "http://127.0.0.1:1/v1", "m"
		if !reflect.DeepEqual(f.set, want) {
			t.Errorf("%s: the flags' defaults\n%+v\nare not the library's\n%+v", name, f.set, want)
		}
	}
}
