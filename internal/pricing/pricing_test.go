package pricing

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const good = `# prices
currency: USD
models:
  NVIDIA H100 80GB HBM3: 3.50
  NVIDIA H100*: 3.00
  NVIDIA A100*: 1.50
  NVIDIA A100-SXM4-??GB: 1.40
  NVIDIA A100-SXM4-[48]0GB: 1.30
  "*": 0.90
overrides:
  - node: cloud-b-*
    models:
      NVIDIA H100*: 2.50
  - labels: {provider: cloud-c, tier: spot}
    models:
      NVIDIA H100 80GB HBM3: 1.10
  - node: cloud-b-7
    models:
      NVIDIA L4: 0.40
`

func mustParse(t *testing.T, src string) *Table {
	t.Helper()
	tb, err := Parse([]byte(src), "prices.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// The matching order of the package comment: overrides in file order, then
// the models table; in each, the exact name, then the most specific pattern.
func TestLookupOrder(t *testing.T) {
	tb := mustParse(t, good)
	plain := Node{Name: "cloud-a-1"}
	tests := []struct {
		name  string
		model string
		node  Node
		want  float64
		from  string
	}{
		{"exact name beats every pattern", "NVIDIA H100 80GB HBM3", plain, 3.50, `prices.yaml:4 models["NVIDIA H100 80GB HBM3"]`},
		{"pattern", "NVIDIA H100 PCIe", plain, 3.00, `prices.yaml:5 models["NVIDIA H100*"]`},
		// NVIDIA A100-SXM4-[48]0GB has 20 literal characters and one class;
		// NVIDIA A100-SXM4-??GB 19 and two ?; NVIDIA A100* 11.
		{"most literal characters", "NVIDIA A100-SXM4-80GB", plain, 1.30, `prices.yaml:8 models["NVIDIA A100-SXM4-[48]0GB"]`},
		{"next most specific", "NVIDIA A100-SXM4-20GB", plain, 1.40, `prices.yaml:7 models["NVIDIA A100-SXM4-??GB"]`},
		{"least specific A100", "NVIDIA A100 80GB PCIe", plain, 1.50, `prices.yaml:6 models["NVIDIA A100*"]`},
		{"catch-all", "NVIDIA L4", plain, 0.90, `prices.yaml:9 models["*"]`},
		{"node override pattern beats the base table's exact name", "NVIDIA H100 80GB HBM3", Node{Name: "cloud-b-3"}, 2.50, `prices.yaml:13 overrides[0].models["NVIDIA H100*"]`},
		{"override without the model falls through", "NVIDIA A100-SXM4-80GB", Node{Name: "cloud-b-3"}, 1.30, `prices.yaml:8 models["NVIDIA A100-SXM4-[48]0GB"]`},
		{"labels must all match", "NVIDIA H100 80GB HBM3", Node{Name: "x", Labels: map[string]string{"provider": "cloud-c"}}, 3.50, `prices.yaml:4 models["NVIDIA H100 80GB HBM3"]`},
		{"label override", "NVIDIA H100 80GB HBM3", Node{Name: "x", Labels: map[string]string{"provider": "cloud-c", "tier": "spot", "zone": "z"}}, 1.10, `prices.yaml:16 overrides[1].models["NVIDIA H100 80GB HBM3"]`},
		{"first applicable override in file order", "NVIDIA L4", Node{Name: "cloud-b-7"}, 0.40, `prices.yaml:19 overrides[2].models["NVIDIA L4"]`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, ok := tb.Lookup(tc.model, tc.node)
			if !ok || p.USDPerHour != tc.want || p.From != tc.from {
				t.Errorf("Lookup(%q, %+v) = %+v, %v; want %v from %s", tc.model, tc.node, p, ok, tc.want, tc.from)
			}
		})
	}
}

// The fallback price (the exporter's flag) comes after the file; without a
// match and a fallback a GPU has no price.
func TestResolverFallback(t *testing.T) {
	tb := mustParse(t, "models:\n  NVIDIA H100 80GB HBM3: 3.5\n")
	two := 2.0
	tests := []struct {
		name     string
		table    *Table
		fallback *float64
		model    string
		want     float64
		ok       bool
	}{
		{"file first", tb, &two, "NVIDIA H100 80GB HBM3", 3.5, true},
		{"fallback next", tb, &two, "NVIDIA A30", 2, true},
		{"no match, no fallback", tb, nil, "NVIDIA A30", 0, false},
		{"fallback only", nil, &two, "NVIDIA A30", 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewResolver(tc.table, Node{Name: "n"}, tc.fallback)
			if err != nil {
				t.Fatal(err)
			}
			p, ok := r.Price(tc.model)
			if ok != tc.ok || p.USDPerHour != tc.want {
				t.Errorf("Price(%q) = %+v, %v; want %v, %v", tc.model, p, ok, tc.want, tc.ok)
			}
		})
	}
	neg := -1.0
	if _, err := NewResolver(nil, Node{}, &neg); err == nil || !strings.Contains(err.Error(), "must not be negative") {
		t.Errorf("negative fallback: %v", err)
	}
	if _, err := NewResolver(nil, Node{}, nil); err == nil {
		t.Error("no table and no fallback: no error")
	}
}

// Every error names the file, the line and the field.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string
	}{
		{"unknown field", "models:\n  A: 1\ndefault: 2\n", []string{`prices.yaml:3: default: unknown field "default" (known fields: currency, models, overrides)`}},
		{"unknown override field", "overrides:\n  - node: a\n    price: 2\n    models: {A: 1}\n", []string{`prices.yaml:3: overrides[0].price: unknown field "price"`}},
		{"negative price", "models:\n  A: 1\n  NVIDIA H100*: -2.5\n", []string{`prices.yaml:3: models["NVIDIA H100*"]: price -2.5 must not be negative`}},
		{"price not a number", "models:\n  A: \"2.5\"\n", []string{`prices.yaml:2: models["A"]: price "2.5" is not a number`}},
		{"price NaN", "models:\n  A: .nan\n", []string{`prices.yaml:2: models["A"]: price NaN is not a finite number`}},
		{"monthly price", "models:\n  A: 2000\n", []string{`prices.yaml:2: models["A"]: price 2000 is more than 1000 USD per GPU-hour`}},
		{"duplicate model", "models:\n  NVIDIA L4: 0.6\n  B: 1\n  NVIDIA L4: 0.7\n", []string{`prices.yaml:4: models["NVIDIA L4"]: duplicate model or pattern "NVIDIA L4" (first at line 2)`}},
		{"duplicate pattern in an override", "overrides:\n  - node: n\n    models:\n      A*: 1\n      A*: 2\n", []string{`prices.yaml:5: overrides[0].models["A*"]: duplicate model or pattern "A*" (first at line 4)`}},
		{"bad pattern", "models:\n  NVIDIA [A100: 1\n", []string{`prices.yaml:2: models["NVIDIA [A100"]: bad pattern "NVIDIA [A100": syntax error in pattern`}},
		{"bad node pattern", "overrides:\n  - node: \"n[\"\n    models: {A: 1}\n", []string{`prices.yaml:2: overrides[0].node: bad pattern "n["`}},
		{"other currency", "currency: EUR\nmodels: {A: 1}\n", []string{`prices.yaml:1: currency: currency "EUR" is not supported: prices are in USD`}},
		{"override without selector", "overrides:\n  - models: {A: 1}\n", []string{`prices.yaml:2: overrides[0]: an override needs a node or labels`}},
		{"override without models", "overrides:\n  - node: a\n", []string{`prices.yaml:2: overrides[0]: an override needs a models table`}},
		{"bad label name", "overrides:\n  - labels: {bad-name: x}\n    models: {A: 1}\n", []string{`prices.yaml:2: overrides[0].labels.bad-name: label name "bad-name" must match`}},
		{"field twice", "models: {A: 1}\nmodels: {B: 2}\n", []string{`prices.yaml:2: models: field "models" given twice (first at line 1)`}},
		{"models not a mapping", "models: [A]\n", []string{`prices.yaml:1: models: models is a mapping`}},
		{"no prices", "currency: USD\n", []string{`prices.yaml:1: no prices: give a models table`}},
		{"empty", "", []string{`prices.yaml: empty price file`}},
		{"not a mapping", "- a\n", []string{`prices.yaml:1: a price file is a mapping`}},
		{"invalid YAML", "models:\n  A: 1\n   B: 2\n", []string{`prices.yaml:3: invalid YAML: mapping values are not allowed in this context`}},
		{"several problems at once", "models:\n  A: -1\n  B: x\n", []string{`prices.yaml:2: models["A"]: price -1 must not be negative`, `prices.yaml:3: models["B"]: price "x" is not a number`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.src), "prices.yaml")
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(f, []byte("models:\n  A: 1.25\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tb, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if p, ok := tb.Lookup("A", Node{}); !ok || p.USDPerHour != 1.25 || p.From != f+`:2 models["A"]` {
		t.Errorf("Lookup = %+v, %v", p, ok)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	// The shipped example parses.
	if _, err := Load("testdata/prices.yaml"); err != nil {
		t.Errorf("testdata/prices.yaml: %v", err)
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels([]string{"provider=cloud-b", "tier="})
	if err != nil || len(got) != 2 || got["provider"] != "cloud-b" || got["tier"] != "" {
		t.Errorf("ParseLabels = %v, %v", got, err)
	}
	for _, bad := range [][]string{{"provider"}, {"1x=a"}, {"a=1", "a=2"}} {
		if _, err := ParseLabels(bad); err == nil {
			t.Errorf("ParseLabels(%q): no error", bad)
		}
	}
}

func TestSpecificity(t *testing.T) {
	for _, tc := range []struct {
		p              string
		literal, class int
	}{
		{"NVIDIA H100*", 11, 0}, {"A?[bc]*", 1, 2}, {`a\*b`, 3, 0}, {"[]a]x", 1, 1}, {"*", 0, 0},
	} {
		if l, c := specificity(tc.p); l != tc.literal || c != tc.class {
			t.Errorf("specificity(%q) = %d, %d; want %d, %d", tc.p, l, c, tc.literal, tc.class)
		}
	}
}
