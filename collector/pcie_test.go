package collector

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"
)

const pcieID = "gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000"

func pcieKeys() (tx, rx string) {
	return "gpulens_gpu_pcie_throughput_bytes_per_second{direction=tx," + pcieID + "}",
		"gpulens_gpu_pcie_throughput_bytes_per_second{direction=rx," + pcieID + "}"
}

// gpmMock makes a mock GPU support GPM: GpmMetricsGet answers every metric
// with the value of its id in values (NOT_SUPPORTED if absent) and records
// the ids of each request.
type gpmMock struct {
	mu       sync.Mutex
	values   map[nvml.GpmMetricId]float64
	requests [][]nvml.GpmMetricId
}

func (g *gpmMock) install(lib *mock.Interface, d *mock.Device) {
	d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
		return nvml.GpmSupport{Version: 1, IsSupportedDevice: 1}, nvml.SUCCESS
	}
	d.GpmSampleGetFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	lib.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) { return &benchSample{}, nvml.SUCCESS }
	lib.GpmSampleFreeFunc = func(nvml.GpmSample) nvml.Return { return nvml.SUCCESS }
	lib.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		g.mu.Lock()
		defer g.mu.Unlock()
		var ids []nvml.GpmMetricId
		for i := range m.NumMetrics {
			id := nvml.GpmMetricId(m.Metrics[i].MetricId)
			ids = append(ids, id)
			if v, ok := g.values[id]; ok {
				m.Metrics[i].Value, m.Metrics[i].NvmlReturn = v, uint32(nvml.SUCCESS)
			} else {
				m.Metrics[i].Value, m.Metrics[i].NvmlReturn = 0, uint32(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		g.requests = append(g.requests, ids)
		return nvml.SUCCESS
	}
}

func throughputCalls(d *mock.Device) int { return len(d.GetPcieThroughputCalls()) }

// TestPCIeFromGPM: where GPM is supported, PCIe throughput is GPM's mean
// over the interval (MiB/s × 2^20) and nvmlDeviceGetPcieThroughput, which
// samples for 20 ms per direction, is called only in the first cycle,
// before GPM has two samples.
func TestPCIeFromGPM(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dev := newMockDevice(0)
	lib := newMockLib(dev)
	g := &gpmMock{values: map[nvml.GpmMetricId]float64{
		nvml.GPM_METRIC_SM_UTIL: 40, nvml.GPM_METRIC_PCIE_TX_PER_SEC: 100, nvml.GPM_METRIC_PCIE_RX_PER_SEC: 250.5,
	}}
	g.install(lib, dev)
	s, reg := newTestSampler(t, lib, clock.Now, false)
	tx, rx := pcieKeys()

	cycleAll(s)
	got := series(t, reg)
	if got[tx] != 1024000 || got[rx] != 2048000 || throughputCalls(dev) != 2 {
		t.Fatalf("first cycle: tx %v rx %v with %d GetPcieThroughput calls; want NVML's 1024000 and 2048000 from 2 calls", got[tx], got[rx], throughputCalls(dev))
	}
	for i := range 5 {
		clock.Advance(time.Second)
		g.values[nvml.GPM_METRIC_PCIE_TX_PER_SEC] = float64(100 + i)
		cycleAll(s)
		got = series(t, reg)
		if want := float64(100+i) * 1048576; got[tx] != want || got[rx] != 250.5*1048576 {
			t.Fatalf("cycle %d: tx %v rx %v, want %v and %v from GPM", i+2, got[tx], got[rx], want, 250.5*1048576)
		}
	}
	if n := throughputCalls(dev); n != 2 {
		t.Errorf("%d GetPcieThroughput calls over 6 cycles, want only the first cycle's 2", n)
	}
	if v := got["gpulens_gpu_sm_activity_ratio{"+pcieID+"}"]; v != 0.4 {
		t.Errorf("SM activity %v, want 0.4: GPM's ratios still divide by 100", v)
	}
	if got["gpulens_gpu_pcie_replay_errors_total{"+pcieID+"}"] != 2 {
		t.Errorf("replay counter missing")
	}
	// One GPM request per cycle after the first, for the GPU, with the PCIe ids.
	want := []nvml.GpmMetricId{nvml.GPM_METRIC_SM_UTIL, nvml.GPM_METRIC_SM_OCCUPANCY, nvml.GPM_METRIC_ANY_TENSOR_UTIL,
		nvml.GPM_METRIC_DRAM_BW_UTIL, nvml.GPM_METRIC_GRAPHICS_UTIL, nvml.GPM_METRIC_PCIE_TX_PER_SEC, nvml.GPM_METRIC_PCIE_RX_PER_SEC}
	if len(g.requests) != 5 || !slices.Equal(g.requests[0], want) {
		t.Errorf("GPM requests %v, want 5 of %v", g.requests, want)
	}
}

// TestPCIeFromNVMLEveryTenSeconds: without GPM PCIe rates (GPM absent, the
// gpm collector off, or GPM without the PCIe metrics),
// nvmlDeviceGetPcieThroughput is read at most every 10 s and the last
// reading is exported in between; a failed reading is retried next cycle.
func TestPCIeFromNVMLEveryTenSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(lib *mock.Interface, d *mock.Device) []NamedCollector
	}{
		{"no GPM", func(*mock.Interface, *mock.Device) []NamedCollector { return allCollectors() }},
		{"gpm collector off", func(lib *mock.Interface, d *mock.Device) []NamedCollector {
			(&gpmMock{values: map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_PCIE_TX_PER_SEC: 1, nvml.GPM_METRIC_PCIE_RX_PER_SEC: 1}}).install(lib, d)
			return slices.DeleteFunc(allCollectors(), func(c NamedCollector) bool { return c.Name == "gpm" })
		}},
		{"GPM without PCIe metrics", func(lib *mock.Interface, d *mock.Device) []NamedCollector {
			(&gpmMock{values: map[nvml.GpmMetricId]float64{nvml.GPM_METRIC_SM_UTIL: 40}}).install(lib, d)
			return allCollectors()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			dev := newMockDevice(0)
			lib := newMockLib(dev)
			cs := tc.setup(lib, dev)
			var kb uint32 = 1000
			fail := false
			dev.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
				if fail {
					return 0, nvml.ERROR_UNKNOWN
				}
				if c == nvml.PCIE_UTIL_TX_BYTES {
					return kb, nvml.SUCCESS
				}
				return 2 * kb, nvml.SUCCESS
			}
			s, err := NewSampler(lib, cs, false, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			reg := prometheus.NewPedanticRegistry()
			reg.MustRegister(s)
			tx, rx := pcieKeys()
			// Sim seconds 0..25: readings at 0, 10 and 20 s.
			for sec := range 26 {
				if sec > 0 {
					clock.Advance(time.Second)
				}
				kb = uint32(1000 + sec)
				cycleAll(s)
				got := series(t, reg)
				read := sec / 10 * 10
				if want := float64(1000+read) * 1024; got[tx] != want || got[rx] != 2*want {
					t.Fatalf("second %d: tx %v rx %v, want the reading of second %d: %v and %v", sec, got[tx], got[rx], read, want, 2*want)
				}
			}
			if n := throughputCalls(dev); n != 6 {
				t.Errorf("%d GetPcieThroughput calls in 26 s, want 6 (2 directions × 3 readings)", n)
			}
			// A failed reading is not hidden behind the last one, and is
			// retried every cycle until a reading succeeds.
			calls := throughputCalls(dev)
			fail = true
			clock.Advance(4 * time.Second) // 29 s: no reading due
			cycleAll(s)
			if got := series(t, reg); got[tx] != 1020*1024 || throughputCalls(dev) != calls {
				t.Fatalf("29 s: tx %v after %d calls, want the 20 s reading and no call", got[tx], throughputCalls(dev)-calls)
			}
			for range 3 { // 30, 31, 32 s
				clock.Advance(time.Second)
				cycleAll(s)
				if _, ok := series(t, reg)[tx]; ok {
					t.Fatalf("PCIe throughput exported while NVML fails")
				}
			}
			if n := throughputCalls(dev) - calls; n != 6 {
				t.Errorf("%d calls in 3 failing cycles, want 6", n)
			}
			if v := series(t, reg)["gpulens_nvml_errors_total{call=GetPcieThroughput,error=unknown}"]; v != 6 {
				t.Errorf("GetPcieThroughput errors %v, want 6", v)
			}
			fail = false
			clock.Advance(time.Second)
			kb = 3000
			cycleAll(s)
			if got := series(t, reg); got[tx] != 3000*1024 {
				t.Errorf("after recovery tx %v, want a fresh reading %v", got[tx], 3000*1024)
			}
		})
	}
}

// TestPCIeSimulatedGPMAndNVMLAgree: on the simulated fleet, an H100 (GPM)
// and an A100 (no GPM) with the same constant PCIe traffic export the same
// bytes per second, from GPM and from nvmlDeviceGetPcieThroughput.
func TestPCIeSimulatedGPMAndNVMLAgree(t *testing.T) {
	t.Parallel()
	env := newSimEnv(t, "pcie", []byte(`name: pcie
description: the same PCIe traffic on a GPU with GPM and one without
devices:
  - count: 1
    model: h100-sxm5-80gb
    pcie_rx: 1000
    pcie_tx: 250
  - count: 1
    model: a100-sxm4-80gb
    pcie_rx: 1000
    pcie_tx: 250
`))
	var got map[string]float64
	for sec := 1; sec <= 3; sec++ {
		got = env.at(time.Duration(sec) * time.Second)
	}
	for _, gpu := range []string{"gpu=0,uuid=" + env.uuid(0), "gpu=1,uuid=" + env.uuid(1)} {
		if v := got["gpulens_gpu_pcie_throughput_bytes_per_second{direction=tx,"+gpu+"}"]; v != 250*1048576 {
			t.Errorf("%s: tx %v, want %v", gpu, v, 250*1048576)
		}
		if v := got["gpulens_gpu_pcie_throughput_bytes_per_second{direction=rx,"+gpu+"}"]; v != 1000*1048576 {
			t.Errorf("%s: rx %v, want %v", gpu, v, 1000*1048576)
		}
	}
	if got["gpulens_gpm_supported{gpu=0,uuid="+env.uuid(0)+"}"] != 1 || got["gpulens_gpm_supported{gpu=1,uuid="+env.uuid(1)+"}"] != 0 {
		t.Errorf("GPM support: H100 %v, A100 %v; want 1 and 0", got["gpulens_gpm_supported{gpu=0,uuid="+env.uuid(0)+"}"], got["gpulens_gpm_supported{gpu=1,uuid="+env.uuid(1)+"}"])
	}
}
