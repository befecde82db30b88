package gpusim

import (
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// A device group's price_usd_per_hour prices each of its GPUs, found by UUID.
func TestPrices(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `devices:
  - {count: 2, model: h100-sxm5-80gb, price_usd_per_hour: 3.5}
  - {count: 1, model: a30-pcie-24gb}
  - {count: 1, model: a30-pcie-24gb, price_usd_per_hour: 0}
`)
	if !sc.HasPrices() {
		t.Error("HasPrices = false")
	}
	fleet, _, _ := newTestFleet(t, sc, 1)
	want := []struct {
		price float64
		ok    bool
	}{{3.5, true}, {3.5, true}, {0, false}, {0, true}}
	for i, w := range want {
		uuid, r := fleet.devices[i].GetUUID()
		if r != nvml.SUCCESS {
			t.Fatal(r)
		}
		if p, ok := fleet.PriceUSDPerHour(uuid); p != w.price || ok != w.ok {
			t.Errorf("GPU %d: PriceUSDPerHour = %v, %v; want %v, %v", i, p, ok, w.price, w.ok)
		}
	}
	if _, ok := fleet.PriceUSDPerHour("GPU-not-there"); ok {
		t.Error("an unknown UUID has a price")
	}
	if mustParse(t, "devices:\n  - {model: a30-pcie-24gb}\n").HasPrices() {
		t.Error("a scenario without prices: HasPrices = true")
	}
}

func TestPriceErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yml, want string }{
		{"devices:\n  - model: a30-pcie-24gb\n    price_usd_per_hour: -1\n", "s.yaml:3: devices[0].price_usd_per_hour: price -1 USD per GPU-hour must be between 0 and 1000"},
		{"devices:\n  - model: a30-pcie-24gb\n    price_usd_per_hour: 1500\n", "s.yaml:3: devices[0].price_usd_per_hour: price 1500 USD per GPU-hour must be between 0 and 1000"},
		{"devices:\n  - model: a30-pcie-24gb\n    price_usd_per_hour: cheap\n", "s.yaml:3: devices[0].price_usd_per_hour: cannot unmarshal !!str `cheap` into float64"},
		{"devices:\n  - model: a30-pcie-24gb\n    price_per_hour: 1\n", `s.yaml:3: devices[0].price_per_hour: unknown field "price_per_hour"`},
	} {
		_, err := Parse([]byte(tc.yml), "s.yaml")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want %q", tc.yml, err, tc.want)
		}
	}
}

// mixed-fleet's prices and layout are the ones its header (and the worked
// example of docs/cost.md) computes with.
func TestMixedFleetPrices(t *testing.T) {
	t.Parallel()
	fleet, _, _ := newTestFleet(t, mustLoad(t, "mixed-fleet"), 1)
	want := []struct {
		name  string
		price float64
		mig   []string
		node  string
	}{
		{"NVIDIA H100 80GB HBM3", 3.5, nil, "provider-a"},
		{"NVIDIA H100 80GB HBM3", 3.5, nil, "provider-a"},
		{"NVIDIA H100 80GB HBM3", 3.5, []string{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, "provider-a"},
		{"NVIDIA H100 80GB HBM3", 2.5, nil, "provider-b"},
		{"NVIDIA A100-SXM4-80GB", 1.4, []string{"4g.39gb", "3g.39gb"}, "provider-b"},
		{"NVIDIA A100-SXM4-80GB", 1.4, nil, "provider-b"},
		{"NVIDIA A30-PCIE-24GB", 0.6, nil, "provider-b"},
	}
	if len(fleet.devices) != len(want) {
		t.Fatalf("%d GPUs, want %d", len(fleet.devices), len(want))
	}
	total := 0.0
	for i, w := range want {
		d := fleet.devices[i]
		name, _ := d.GetName()
		uuid, _ := d.GetUUID()
		p, ok := fleet.PriceUSDPerHour(uuid)
		var mig []string
		for _, m := range d.spec.mig {
			mig = append(mig, m.name)
		}
		if name != w.name || !ok || p != w.price || strings.Join(mig, ",") != strings.Join(w.mig, ",") || d.spec.node != w.node {
			t.Errorf("GPU %d: %s %v %v %v on %s; want %s %v %v on %s", i, name, p, ok, mig, d.spec.node, w.name, w.price, w.mig, w.node)
		}
		if len(d.spec.mig) > 0 && d.migSlices != 7 {
			t.Errorf("GPU %d: %d MIG slices, want 7", i, d.migSlices)
		}
		total += p
	}
	if total < 16.4-1e-9 || total > 16.4+1e-9 {
		t.Errorf("fleet spend %v per hour, want 16.40", total)
	}
}
