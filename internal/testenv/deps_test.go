package testenv

import (
	"os/exec"
	"strings"
	"testing"
)

// TestProductDoesNotLinkTheHarness checks that no program, nor the
// generators of the dashboards and the deploy files, links this package or
// a gpulens package importing "testing": test code stays in tests.
// (Third-party packages may import "testing"; prometheus/common's
// expfmt does through go-abnf.)
func TestProductDoesNotLinkTheHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs go list over the whole product")
	}
	const module = "github.com/gpulens/gpulens"
	cmd := exec.Command("go", "list", "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`,
		"./cmd/...", "./dashboards/gen", "./deploy/gen")
	cmd.Dir = "../.."
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	products := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		if !strings.HasPrefix(pkg, module) {
			continue
		}
		products++
		if pkg == module+"/internal/testenv" {
			t.Errorf("a product package links %s", pkg)
		}
		for _, imp := range imports {
			if imp == "testing" {
				t.Errorf("%s imports testing", pkg)
			}
		}
	}
	if products < 10 {
		t.Fatalf("go list found only %d gpulens packages: the pattern no longer matches the product", products)
	}
}
