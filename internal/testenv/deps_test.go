package testenv

import (
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
	lines := goList(t, "-deps", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./cmd/...", "./dashboards/gen", "./deploy/gen")
	products := 0
	for _, line := range lines {
		fields := strings.Fields(line)
		pkg, imports := fields[0], fields[1:]
		products++
		if pkg == "internal/testenv" {
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
