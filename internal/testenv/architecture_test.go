package testenv

import (
	"bufio"
	"context"
	"os"
	"sort"
	"strings"
	"testing"
	"time"
)

// The kinds of package docs/architecture.md ("Every package") names.
const (
	kindProgram    = "program"
	kindProduct    = "product"
	kindSimulation = "simulation"
	kindBuild      = "build"
	kindTests      = "tests"
)

// architectureTable reads the "Every package" table of
// docs/architecture.md: package path (relative to the module) → kind.
func architectureTable(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows := map[string]string{}
	in := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Every package"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		if len(cells) < 4 {
			t.Fatalf("%s: malformed row %q", path, line)
		}
		pkg := strings.Trim(strings.TrimSpace(cells[1]), "`")
		if _, dup := rows[pkg]; dup {
			t.Errorf("%s: %s listed twice", path, pkg)
		}
		rows[pkg] = strings.TrimSpace(cells[2])
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rows
}

// goList runs go list over patterns relative to the repository root
// ("./cmd/...") and returns its lines, each with the module prefix dropped
// from its first field (other modules' packages left out).
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	const module = "github.com/gpulens/gpulens/"
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	for i, a := range args {
		if strings.HasPrefix(a, "./") {
			args[i] = "../../" + a[2:] // from this package's folder
		}
	}
	out, stderr, err := Output(ctx, nil, "go", append([]string{"list"}, args...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, module) {
			lines = append(lines, strings.TrimPrefix(l, module))
		}
	}
	return lines
}

// TestArchitectureMapsEveryPackage holds docs/architecture.md's package
// map to the code: every package of the module is listed once, nothing
// else is, and each kind says the truth — programs are the main packages
// of cmd/, simulation is exactly internal/sim/..., product packages are
// linked by a program, build and tests packages are not, and tests
// packages are not linked by the generators either.
func TestArchitectureMapsEveryPackage(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list over the whole module")
	}
	table := architectureTable(t, "../../docs/architecture.md")
	if len(table) < 10 {
		t.Fatalf("docs/architecture.md: only %d rows in \"Every package\"", len(table))
	}
	mains := map[string]bool{}
	all := map[string]bool{}
	for _, l := range goList(t, "-f", "{{.ImportPath}} {{.Name}}", "./...") {
		f := strings.Fields(l)
		all[f[0]] = true
		if f[1] == "main" {
			mains[f[0]] = true
		}
	}
	linked := map[string]bool{}
	for _, p := range goList(t, "-deps", "./cmd/...") {
		linked[p] = true
	}
	generated := map[string]bool{}
	for _, p := range goList(t, "-deps", "./dashboards/gen", "./deploy/gen") {
		generated[p] = true
	}

	var missing []string
	for p := range all {
		if _, ok := table[p]; !ok {
			missing = append(missing, p)
		}
	}
	sort.Strings(missing)
	for _, p := range missing {
		t.Errorf("docs/architecture.md: package %s is not in \"Every package\"", p)
	}
	for p, kind := range table {
		if !all[p] {
			t.Errorf("docs/architecture.md lists %s, which is not a package of the module", p)
			continue
		}
		sim := strings.HasPrefix(p, "internal/sim/")
		var problem string
		switch kind {
		case kindProgram:
			if !mains[p] || !strings.HasPrefix(p, "cmd/") {
				problem = "is not a main package under cmd/"
			}
		case kindProduct:
			switch {
			case sim:
				problem = "lives under internal/sim/, so it is simulation"
			case !linked[p] || mains[p]:
				problem = "is not a library a program links"
			}
		case kindSimulation:
			if !sim {
				problem = "is simulation but lives outside internal/sim/"
			}
		case kindBuild:
			if linked[p] {
				problem = "is linked by a program"
			} else if !generated[p] && !mains[p] {
				problem = "is not linked by a generator (dashboards/gen, deploy/gen)"
			}
		case kindTests:
			if linked[p] || generated[p] {
				problem = "is linked by a program or a generator"
			}
		default:
			problem = "has an unknown kind (program, product, simulation, build, tests)"
		}
		if problem == "" && sim && kind != kindSimulation {
			problem = "lives under internal/sim/ but is not marked simulation"
		}
		if problem != "" {
			t.Errorf("docs/architecture.md: %s (%s) %s", p, kind, problem)
		}
	}
}
