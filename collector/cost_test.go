package collector

import (
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// costEnv samples a simulated scenario with the mig and cost collectors, the
// cost collector priced by src.
func costEnv(t *testing.T, scenario string, src func(fleet *gpusim.Fleet) PriceSource) (*Sampler, *gpusim.Fleet, prometheus.Gatherer) {
	t.Helper()
	sc, err := gpusim.Load(scenario)
	if err != nil {
		t.Fatal(err)
	}
	fleet, lib, clock := startFleet(t, sc)
	s, err := NewSampler(lib, []NamedCollector{
		{Name: "mig", Collector: newMIGCollector()},
		{Name: CostCollectorName, Collector: NewCostCollector(src(fleet))},
	}, false, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now, Simulated: true})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	cycleAll(s)
	return s, fleet, reg
}

func fleetPrices(fleet *gpusim.Fleet) PriceSource {
	return PriceFunc(func(d Device) (float64, bool) { return fleet.PriceUSDPerHour(d.UUID) })
}

// mixed-fleet: every GPU at its scenario price, each MIG instance at the
// GPU's price times its slices over 7 (the header's table).
func TestCostCollectorMixedFleet(t *testing.T) {
	t.Parallel()
	s, _, reg := costEnv(t, "mixed-fleet", fleetPrices)
	got := series(t, reg)
	uuid := func(gpu int) string { return *s.workers[gpu].uuid.Load() }
	for gpu, want := range []float64{3.5, 3.5, 3.5, 2.5, 1.4, 1.4, 0.6} {
		key := fmt.Sprintf("gpulens_gpu_price_usd_per_hour{gpu=%d,uuid=%s}", gpu, uuid(gpu))
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", key, v, ok, want)
		}
	}
	for _, tc := range []struct {
		gpu  int
		gi   string
		want float64
	}{
		{2, "1", 1.5}, {2, "2", 1.0}, {2, "3", 0.5}, {2, "4", 0.5}, // 3.5 × 3/7, 2/7, 1/7, 1/7
		{4, "1", 0.8}, {4, "2", 0.6}, // 1.4 × 4/7, 3/7
	} {
		v := one(t, got, "gpulens_mig_price_usd_per_hour", "uuid="+uuid(tc.gpu), "gpu_instance_id="+tc.gi+",")
		if math.Abs(v-tc.want) > 1e-12 {
			t.Errorf("GPU %d instance %s: %v, want %v", tc.gpu, tc.gi, v, tc.want)
		}
	}
	if n := len(find(got, "gpulens_mig_price_usd_per_hour")); n != 6 {
		t.Errorf("%d MIG prices, want 6", n)
	}
	if v := got[`gpulens_scrape_collector_success{collector=cost}`]; v != 1 {
		t.Errorf("cost collector success = %v, want 1", v)
	}
}

// A GPU without a price serves no price series, nor do its MIG instances.
func TestCostCollectorUnpriced(t *testing.T) {
	t.Parallel()
	_, _, reg := costEnv(t, "mixed-fleet", func(fleet *gpusim.Fleet) PriceSource {
		return PriceFunc(func(d Device) (float64, bool) {
			if d.Name == "NVIDIA A100-SXM4-80GB" {
				return 0, false
			}
			return 2, true
		})
	})
	got := series(t, reg)
	if n := len(find(got, "gpulens_gpu_price_usd_per_hour")); n != 5 {
		t.Errorf("%d GPU prices, want 5 (the A100s unpriced)", n)
	}
	if n := len(find(got, "gpulens_mig_price_usd_per_hour")); n != 4 {
		t.Errorf("%d MIG prices, want the H100's 4", n)
	}
}

// migShare: the slices of the profile over the GPU's; the memory share where
// the profile or the GPU's slices are unknown; nothing without either.
func TestMIGShare(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	tests := []struct {
		name       string
		maxDevices int
		maxRet     nvml.Return
		memRet     nvml.Return
		profile    string
		memTotal   uint64
		memOK      bool
		want       float64
		ok         bool
	}{
		{"slices", 7, nvml.SUCCESS, nvml.SUCCESS, "3g.40gb", 40 * gib, true, 3.0 / 7, true},
		{"compute instance of a GPU instance", 7, nvml.SUCCESS, nvml.SUCCESS, "1c.3g.40gb", 40 * gib, true, 1.0 / 7, true},
		{"media extensions", 7, nvml.SUCCESS, nvml.SUCCESS, "1g.10gb+me", 10 * gib, true, 1.0 / 7, true},
		{"A30: 4 slices", 4, nvml.SUCCESS, nvml.SUCCESS, "2g.12gb", 12 * gib, true, 0.5, true},
		{"unknown profile: memory share", 7, nvml.SUCCESS, nvml.SUCCESS, "", 20 * gib, true, 0.25, true},
		{"slice count unknown: memory share", 0, nvml.ERROR_NOT_SUPPORTED, nvml.SUCCESS, "3g.40gb", 40 * gib, true, 0.5, true},
		{"more slices than the GPU: memory share", 2, nvml.SUCCESS, nvml.SUCCESS, "3g.40gb", 40 * gib, true, 0.5, true},
		{"memory v1 fallback", 0, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, "", 40 * gib, true, 0.5, true},
		{"nothing known", 0, nvml.ERROR_NOT_SUPPORTED, nvml.SUCCESS, "", 0, false, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := &mock.Device{
				GetMaxMigDeviceCountFunc: func() (int, nvml.Return) { return tc.maxDevices, tc.maxRet },
				GetMemoryInfo_v2Func: func() (nvml.Memory_v2, nvml.Return) {
					return nvml.Memory_v2{Total: 80 * gib}, tc.memRet
				},
				GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 80 * gib}, nvml.SUCCESS },
			}
			r := &Reader{Device: d, current: &atomic.Pointer[string]{}}
			s := &costSampler{price: 3.5, priced: true}
			in := &migInstance{migIdentity: &migIdentity{profile: tc.profile}, memTotal: tc.memTotal, memOK: tc.memOK}
			for range 2 { // the second call answers from what the first read
				got, ok := s.migShare(r, in)
				if ok != tc.ok || math.Abs(got-tc.want) > 1e-12 {
					t.Errorf("migShare = %v, %v; want %v, %v", got, ok, tc.want, tc.ok)
				}
			}
			if r.failures != 0 {
				t.Errorf("%d failed NVML calls", r.failures)
			}
		})
	}
}

func TestProfileSlices(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		profile string
		want    uint64
		ok      bool
	}{
		{"1g.10gb", 1, true}, {"7g.80gb", 7, true}, {"2c.4g.40gb", 2, true}, {"4g.39gb", 4, true},
		{"", 0, false}, {"0g.5gb", 0, false}, {"g.10gb", 0, false}, {"MIG 1g.10gb", 0, false},
	} {
		if got, ok := profileSlices(tc.profile); got != tc.want || ok != tc.ok {
			t.Errorf("profileSlices(%q) = %d, %v; want %d, %v", tc.profile, got, ok, tc.want, tc.ok)
		}
	}
}
