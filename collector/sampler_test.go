package collector

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/clockevent"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
	"github.com/gpulens/gpulens/internal/testenv"
)

// fakeClock is a manually advanced clock, safe for concurrent use.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

// startFleet starts the simulated fleet of sc on a fake clock (seed 1,
// sim time zero at the clock's start) and initialises its NVML library,
// shut down when the test ends.
func startFleet(tb testing.TB, sc *gpusim.Scenario) (*gpusim.Fleet, nvml.Interface, *fakeClock) {
	tb.Helper()
	clock := newFakeClock()
	fleet, err := gpusim.New(sc, gpusim.Options{Seed: 1, Start: clock.Now(), Now: clock.Now})
	if err != nil {
		tb.Fatal(err)
	}
	lib := fleet.Interface()
	if ret := lib.Init(); ret != nvml.SUCCESS {
		tb.Fatalf("init: %v", ret)
	}
	tb.Cleanup(func() { lib.Shutdown() })
	return fleet, lib, clock
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// series gathers a registry into "name{k=v,...}" -> value, labels sorted.
func series(t *testing.T, g prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			sort.Strings(ls)
			key := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				out[key] = m.GetCounter().GetValue()
			case dto.MetricType_GAUGE:
				out[key] = m.GetGauge().GetValue()
			case dto.MetricType_HISTOGRAM:
				out[key+"_count"] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// normalized sorts the labels inside each "name{a=b,...}" key.
func normalized(m map[string]float64) map[string]float64 {
	out := make(map[string]float64, len(m))
	for k, v := range m {
		i := strings.IndexByte(k, '{')
		j := strings.LastIndexByte(k, '}')
		ls := strings.Split(k[i+1:j], ",")
		sort.Strings(ls)
		out[k[:i+1]+strings.Join(ls, ",")+k[j:]] = v
	}
	return out
}

func newTestSampler(t *testing.T, lib nvml.Interface, clock func() time.Time, xid bool) (*Sampler, *prometheus.Registry) {
	t.Helper()
	s, err := NewSampler(lib, allCollectors(), xid, Config{Interval: time.Second, DeviceTimeout: 5 * time.Second, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(s); err != nil {
		t.Fatal(err)
	}
	return s, reg
}

// cycleAll runs one synchronous cycle on every GPU.
func cycleAll(s *Sampler) {
	for _, w := range s.workers {
		w.cycle()
	}
	s.publish()
}

func TestDeviceMetricsExactValues(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	s, reg := newTestSampler(t, newMockLib(newMockDevice(0)), clock.Now, false)
	cycleAll(s)
	clock.Advance(2 * time.Second)
	cycleAll(s)
	got := series(t, reg)

	const id = "gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000"
	want := map[string]float64{
		"gpulens_gpu_up{" + id + "}": 1,
		"gpulens_gpu_info{cuda_driver_version=12.4,driver_version=550.54.15,gpu=0,name=NVIDIA H100 80GB HBM3,pci_bus_id=00000000:18:00.0,serial=1652321000000,simulated=false,uuid=GPU-00000000-0000-0000-0000-000000000000,vbios_version=96.00.74.00.01}": 1,
		"gpulens_sampler_last_success_timestamp_seconds{" + id + "}":            1_700_000_002,
		"gpulens_gpu_memory_total_bytes{" + id + "}":                            85520809984,
		"gpulens_gpu_memory_used_bytes{" + id + "}":                             42949672960,
		"gpulens_gpu_memory_free_bytes{" + id + "}":                             42004905984,
		"gpulens_gpu_memory_reserved_bytes{" + id + "}":                         566231040,
		"gpulens_gpu_utilization_ratio{" + id + "}":                             0.5,
		"gpulens_gpu_memory_bandwidth_utilization_ratio{" + id + "}":            0.25,
		"gpulens_gpu_encoder_utilization_ratio{" + id + "}":                     0.03,
		"gpulens_gpu_decoder_utilization_ratio{" + id + "}":                     0.07,
		"gpulens_gpu_busy_seconds_total{" + id + "}":                            1, // 50 % over 2 s
		"gpulens_gpu_power_watts{" + id + "}":                                   350.5,
		"gpulens_gpu_power_limit_watts{" + id + "}":                             700,
		"gpulens_gpu_energy_joules_total{" + id + "}":                           123456.789,
		"gpulens_gpu_temperature_celsius{" + id + "}":                           61,
		"gpulens_gpu_clock_hertz{clock=graphics," + id + "}":                    1755e6,
		"gpulens_gpu_clock_hertz{clock=sm," + id + "}":                          1755e6,
		"gpulens_gpu_clock_hertz{clock=memory," + id + "}":                      2619e6,
		"gpulens_gpu_max_clock_hertz{clock=graphics," + id + "}":                1980e6,
		"gpulens_gpu_max_clock_hertz{clock=sm," + id + "}":                      1980e6,
		"gpulens_gpu_max_clock_hertz{clock=memory," + id + "}":                  2619e6,
		"gpulens_gpu_pcie_throughput_bytes_per_second{direction=tx," + id + "}": 1024000,
		"gpulens_gpu_pcie_throughput_bytes_per_second{direction=rx," + id + "}": 2048000,
		"gpulens_gpu_pcie_replay_errors_total{" + id + "}":                      2,
		"gpulens_gpu_ecc_errors_total{" + id + ",type=corrected}":               5,
		"gpulens_gpu_ecc_errors_total{" + id + ",type=uncorrected}":             0,
		"gpulens_gpu_remapped_rows{" + id + ",type=correctable}":                1,
		"gpulens_gpu_remapped_rows{" + id + ",type=uncorrectable}":              0,
		"gpulens_gpu_remapping_pending{" + id + "}":                             1,
		"gpulens_gpu_remapping_failed{" + id + "}":                              0,
		"gpulens_gpu_persistence_mode{" + id + "}":                              1,
		"gpulens_gpu_compute_mode{" + id + ",mode=default}":                     0,
		"gpulens_gpu_compute_mode{" + id + ",mode=exclusive_thread}":            0,
		"gpulens_gpu_compute_mode{" + id + ",mode=prohibited}":                  0,
		"gpulens_gpu_compute_mode{" + id + ",mode=exclusive_process}":           1,
		"gpulens_gpu_mig_enabled{" + id + "}":                                   0,
		"gpulens_process_folded{" + id + "}":                                    0,
		"gpulens_gpm_supported{" + id + "}":                                     0,
		"gpulens_gpu_active_processes{" + id + "}":                              0,
		"gpulens_gpu_contention_ratio{" + id + "}":                              0,
		"gpulens_gpu_contended_seconds_total{" + id + "}":                       0,
		"gpulens_sampler_duration_seconds{}_count":                              2,
	}
	for _, r := range clockevent.All() {
		v := 0.0
		if r.Name == "sw_power_cap" || r.Name == "sw_thermal_slowdown" {
			v = 1
		}
		want["gpulens_gpu_clock_event_active{"+id+",reason="+r.Name+"}"] = v
	}
	for _, m := range sharingModes {
		want["gpulens_gpu_sharing_mode{"+id+",mode="+m+"}"] = b2f(m == "idle") // no process
	}
	for _, f := range Factories() {
		want["gpulens_scrape_collector_success{collector="+f.Name+"}"] = 1
		want["gpulens_scrape_collector_duration_seconds{collector="+f.Name+"}"] = 0 // the fake clock stands still within a cycle
	}
	want = normalized(want)
	for k, v := range want {
		g, ok := got[k]
		if !ok {
			t.Errorf("missing series %s", k)
			continue
		}
		if g != v {
			t.Errorf("%s = %v, want %v", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected series %s = %v", k, got[k])
		}
	}
}

func TestBusyCounterIntegratesEveryReading(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dev := newMockDevice(0)
	utils := []uint32{0, 100, 100, 50, 0}
	var i int
	dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		u := utils[i]
		return nvml.Utilization{Gpu: u}, nvml.SUCCESS
	}
	s, reg := newTestSampler(t, newMockLib(dev), clock.Now, false)
	// trapezoids over 1 s steps: (0+1)/2 + (1+1)/2 + (1+.5)/2 + (.5+0)/2 = 2.5
	wantAfter := []float64{0, 0.5, 1.5, 2.25, 2.5}
	for i = range utils {
		cycleAll(s)
		got := series(t, reg)["gpulens_gpu_busy_seconds_total{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000}"]
		if got != wantAfter[i] {
			t.Fatalf("after reading %d: busy = %v, want %v", i, got, wantAfter[i])
		}
		clock.Advance(time.Second)
	}
}

func TestEnergyFallsBackToIntegratedPower(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	dev := newMockDevice(0)
	dev.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
	dev.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 200000, nvml.SUCCESS } // 200 W
	s, reg := newTestSampler(t, newMockLib(dev), clock.Now, false)
	for range 4 {
		cycleAll(s)
		clock.Advance(500 * time.Millisecond)
	}
	got := series(t, reg)
	if e := got["gpulens_gpu_energy_joules_total{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000}"]; e != 300 {
		t.Errorf("energy = %v J, want 300 (200 W for 1.5 s)", e)
	}
	if n := got["gpulens_nvml_errors_total{call=GetTotalEnergyConsumption,error=not_supported}"]; n != 0 {
		t.Errorf("ERROR_NOT_SUPPORTED was counted as an error")
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	const uuid1 = "GPU-00000001-0000-0000-0000-000000000000"
	tests := []struct {
		name       string
		break1     func(d *mock.Device)
		up1        float64
		present1   []string // series of GPU 1 that must exist
		absent1    []string // series of GPU 1 that must not exist
		errors     map[string]float64
		collectors map[string]float64 // scrape_collector_success
	}{
		{
			name: "not supported is silent",
			break1: func(d *mock.Device) {
				d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
			},
			up1:        1,
			present1:   []string{"gpulens_gpu_temperature_celsius"},
			absent1:    []string{"gpulens_gpu_power_watts", "gpulens_gpu_fan_speed_ratio"},
			errors:     map[string]float64{},
			collectors: map[string]float64{"power": 1, "memory": 1},
		},
		{
			name: "failing call",
			break1: func(d *mock.Device) {
				d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
			},
			up1:        1,
			present1:   []string{"gpulens_gpu_temperature_celsius", "gpulens_gpu_memory_used_bytes"},
			absent1:    []string{"gpulens_gpu_power_watts"},
			errors:     map[string]float64{"gpulens_nvml_errors_total{call=GetPowerUsage,error=unknown}": 2},
			collectors: map[string]float64{"power": 0, "memory": 1},
		},
		{
			name: "gpu lost",
			break1: func(d *mock.Device) {
				d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, nvml.ERROR_GPU_IS_LOST }
			},
			up1:     0,
			absent1: []string{"gpulens_gpu_memory_used_bytes", "gpulens_gpu_power_watts", "gpulens_gpu_info"},
			// One failed call per cycle: no call is made on a lost GPU after it said so.
			errors:     map[string]float64{"gpulens_nvml_errors_total{call=GetMemoryInfo_v2,error=gpu_is_lost}": 2},
			collectors: map[string]float64{"power": 1, "memory": 1}, // lost GPUs are reported by gpu_up
		},
		{
			name: "every call fails",
			break1: func(d *mock.Device) {
				*d = mock.Device{GetUUIDFunc: d.GetUUIDFunc, GetNameFunc: d.GetNameFunc, GetPciInfoFunc: d.GetPciInfoFunc,
					GetSerialFunc: d.GetSerialFunc, GetVbiosVersionFunc: d.GetVbiosVersionFunc}
				fail := nvml.ERROR_UNKNOWN
				d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) { return nvml.Memory_v2{}, fail }
				d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{}, fail }
				d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 0, 0, fail }
				d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) { return 0, 0, fail }
				d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, fail }
				d.GetEnforcedPowerLimitFunc = func() (uint32, nvml.Return) { return 0, fail }
				d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) { return 0, fail }
				d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, fail }
				d.GetFanSpeedFunc = func() (uint32, nvml.Return) { return 0, fail }
				d.GetClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 0, fail }
				d.GetMaxClockInfoFunc = func(nvml.ClockType) (uint32, nvml.Return) { return 0, fail }
				d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0, fail }
				d.GetPcieThroughputFunc = func(nvml.PcieUtilCounter) (uint32, nvml.Return) { return 0, fail }
				d.GetPcieReplayCounterFunc = func() (int, nvml.Return) { return 0, fail }
				d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, fail }
				d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, fail }
				d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return 0, fail }
				d.GetComputeModeFunc = func() (nvml.ComputeMode, nvml.Return) { return 0, fail }
				d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, fail }
				noProcs := func() ([]nvml.ProcessInfo, nvml.Return) { return nil, fail }
				d.GetComputeRunningProcessesFunc = noProcs
				d.GetGraphicsRunningProcessesFunc = noProcs
				d.GetMPSComputeRunningProcessesFunc = noProcs
				d.GetProcessUtilizationFunc = func(uint64) ([]nvml.ProcessUtilizationSample, nvml.Return) { return nil, fail }
				d.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) { return nvml.GpmSupport{}, fail }
			},
			up1:        0,
			absent1:    []string{"gpulens_gpu_memory_used_bytes", "gpulens_gpu_info"},
			errors:     map[string]float64{"gpulens_nvml_errors_total{call=GetTemperature,error=unknown}": 2},
			collectors: map[string]float64{"power": 1}, // down GPUs do not count against collectors
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			devs := []nvml.Device{newMockDevice(0), newMockDevice(1), newMockDevice(2)}
			tc.break1(devs[1].(*mock.Device))
			s, reg := newTestSampler(t, newMockLib(devs...), clock.Now, false)
			cycleAll(s)
			clock.Advance(time.Second)
			cycleAll(s)
			got := series(t, reg)
			if v := got["gpulens_gpu_up{gpu=1,uuid="+uuid1+"}"]; v != tc.up1 {
				t.Errorf("gpu_up of GPU 1 = %v, want %v", v, tc.up1)
			}
			for _, g := range []int{0, 2} {
				id := fmt.Sprintf("gpu=%d,uuid=GPU-%08d-0000-0000-0000-000000000000", g, g)
				if got["gpulens_gpu_up{"+id+"}"] != 1 {
					t.Errorf("healthy GPU %d not up", g)
				}
				if got["gpulens_gpu_memory_used_bytes{"+id+"}"] != 42949672960 {
					t.Errorf("healthy GPU %d lost its memory series", g)
				}
			}
			has := func(name string) bool {
				for k := range got {
					if strings.HasPrefix(k, name+"{") && strings.Contains(k, "gpu=1,") {
						return true
					}
				}
				return false
			}
			for _, n := range tc.present1 {
				if !has(n) {
					t.Errorf("GPU 1 lacks %s", n)
				}
			}
			for _, n := range tc.absent1 {
				if has(n) {
					t.Errorf("GPU 1 still has %s", n)
				}
			}
			var nErr float64
			for k, v := range got {
				if strings.HasPrefix(k, "gpulens_nvml_errors_total") {
					nErr += v
				}
			}
			var wantErr float64
			for k, v := range tc.errors {
				wantErr += v
				if got[k] != v {
					t.Errorf("%s = %v, want %v", k, got[k], v)
				}
			}
			if tc.name != "every call fails" && nErr != wantErr {
				t.Errorf("total NVML errors = %v, want %v", nErr, wantErr)
			}
			for c, v := range tc.collectors {
				if g := got["gpulens_scrape_collector_success{collector="+c+"}"]; g != v {
					t.Errorf("collector %s success = %v, want %v", c, g, v)
				}
			}
		})
	}
}

// TestHungCallLeavesOtherGPUsFresh runs the real sampler goroutines with one
// GPU whose temperature call blocks until the test ends. The sampler's
// clock is the test's: once GPU 2 hangs the test moves it past the device
// deadline and waits until the sampler has seen it; nothing depends on how
// fast the machine runs the goroutines.
func TestHungCallLeavesOtherGPUsFresh(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	devs := []nvml.Device{newMockDevice(0), newMockDevice(1), newMockDevice(2)}
	var once sync.Once
	hung := make(chan struct{})
	devs[2].(*mock.Device).GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) {
		once.Do(func() { close(hung) })
		<-release
		return 50, nvml.SUCCESS
	}
	t.Cleanup(func() { close(release) })
	interval, deadline := 20*time.Millisecond, 200*time.Millisecond
	clock := newFakeClock()
	s, err := NewSampler(newMockLib(devs...), allCollectors(), false, Config{Interval: interval, DeviceTimeout: deadline, Now: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	<-hung
	var past float64
	// Scrapes never wait for the hung call (it blocks until the test ends):
	// each must come back, and GPUs 0 and 1 must complete cycles on the
	// moved clock, after GPU 2 went past its deadline. The deadline only
	// stops a broken test from hanging.
	gather := func() map[string]float64 {
		type result struct {
			mfs []*dto.MetricFamily
			err error
		}
		ch := make(chan result, 1)
		go func() { mfs, err := reg.Gather(); ch <- result{mfs, err} }()
		select {
		case r := <-ch:
			return series(t, gathered{r.mfs, r.err})
		case <-time.After(time.Minute):
			t.Fatal("a scrape blocked while a GPU hangs")
			return nil
		}
	}
	fresh := func(got map[string]float64) bool {
		for _, g := range []int{0, 1} {
			id := fmt.Sprintf("gpu=%d,uuid=GPU-%08d-0000-0000-0000-000000000000", g, g)
			if got["gpulens_gpu_up{"+id+"}"] != 1 || got["gpulens_sampler_last_success_timestamp_seconds{"+id+"}"] < past {
				return false
			}
		}
		return got["gpulens_nvml_errors_total{call=GetTemperature,error=deadline_exceeded}"] > 0
	}
	// The clock moves past GPU 2's deadline in steps shorter than the
	// deadline, the next only once GPUs 0 and 1 finished a cycle on the
	// moved clock: a cycle of theirs that a step finds in progress began
	// after the step before, so it has run less than the deadline on the
	// clock, however slowly the machine runs it. (One jump of 5 deadlines
	// finding GPU 0 inside GetTemperature counted that call too.)
	wait, stop := context.WithTimeout(t.Context(), time.Minute)
	defer stop()
	for range 7 {
		clock.Advance(deadline * 3 / 4)
		moved := float64(clock.Now().UnixNano()) / 1e9
		testenv.Eventually(wait, t, time.Millisecond, "GPUs 0 and 1 finished a cycle on the moved clock", func() (bool, string) {
			got := gather()
			for _, g := range []int{0, 1} {
				id := fmt.Sprintf("gpu=%d,uuid=GPU-%08d-0000-0000-0000-000000000000", g, g)
				if got["gpulens_sampler_last_success_timestamp_seconds{"+id+"}"] < moved {
					return false, fmt.Sprint(got)
				}
			}
			return true, ""
		})
	}
	past = float64(clock.Now().UnixNano()) / 1e9
	var got map[string]float64
	testenv.Eventually(wait, t, time.Millisecond, "GPUs 0 and 1 sampled after GPU 2's deadline passed, and the hang counted", func() (bool, string) {
		got = gather()
		return fresh(got), fmt.Sprint(got)
	})
	for _, g := range []int{0, 1} {
		id := fmt.Sprintf("gpu=%d,uuid=GPU-%08d-0000-0000-0000-000000000000", g, g)
		if _, ok := got["gpulens_gpu_temperature_celsius{"+id+"}"]; !ok {
			t.Errorf("GPU %d lost its temperature", g)
		}
	}
	id2 := "gpu=2,uuid=GPU-00000002-0000-0000-0000-000000000000"
	if v, ok := got["gpulens_gpu_up{"+id2+"}"]; !ok || v != 0 {
		t.Errorf("hung GPU 2: gpu_up = %v (present %v), want 0", v, ok)
	}
	if _, ok := got["gpulens_gpu_memory_used_bytes{"+id2+"}"]; ok {
		t.Errorf("hung GPU 2 still exports its memory series")
	}
	if v := got["gpulens_nvml_errors_total{call=GetTemperature,error=deadline_exceeded}"]; v != 1 {
		t.Errorf("deadline errors for GetTemperature = %v, want 1", v)
	}
	if v := got["gpulens_scrape_collector_success{collector=power}"]; v != 0 {
		t.Errorf("power collector success = %v while its call hangs, want 0", v)
	}
	if v := got["gpulens_scrape_collector_success{collector=memory}"]; v != 1 {
		t.Errorf("memory collector success = %v, want 1", v)
	}
}

// gathered is a prometheus.Gatherer that returns a finished Gather.
type gathered struct {
	mfs []*dto.MetricFamily
	err error
}

func (g gathered) Gather() ([]*dto.MetricFamily, error) { return g.mfs, g.err }

// xidEventSet delivers queued events, then times out.
type xidEventSet struct {
	mock.EventSet
	events chan nvml.EventData
}

func newXIDEventSet(events ...nvml.EventData) *xidEventSet {
	es := &xidEventSet{events: make(chan nvml.EventData, len(events))}
	for _, e := range events {
		es.events <- e
	}
	es.WaitFunc = func(ms uint32) (nvml.EventData, nvml.Return) {
		select {
		case e := <-es.events:
			return e, nvml.SUCCESS
		case <-time.After(time.Duration(ms) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	es.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return es
}

func TestXIDCounters(t *testing.T) {
	t.Parallel()
	devs := []nvml.Device{newMockDevice(0), newMockDevice(1)}
	set := newXIDEventSet(
		nvml.EventData{Device: devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79},
		nvml.EventData{Device: devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 13},
		nvml.EventData{Device: devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 13},
		nvml.EventData{Device: devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 48},
	)
	lib := newMockLib(devs...)
	lib.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) { return set, nvml.SUCCESS }
	clock := newFakeClock()
	s, reg := newTestSampler(t, lib, clock.Now, true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.xid.run(ctx); close(done) }()
	wait, stop := context.WithTimeout(t.Context(), 10*time.Second)
	defer stop()
	testenv.Eventually(wait, t, 5*time.Millisecond, "the XID loop to take every queued event", func() (bool, string) {
		return len(set.events) == 0, fmt.Sprintf("%d events queued", len(set.events))
	})
	cancel()
	<-done
	got := series(t, reg)
	want := map[string]float64{
		"gpulens_gpu_xid_errors_total{gpu=1,uuid=GPU-00000001-0000-0000-0000-000000000000,xid=79}":    1,
		"gpulens_gpu_xid_errors_total{gpu=1,uuid=GPU-00000001-0000-0000-0000-000000000000,xid=13}":    2,
		"gpulens_gpu_xid_errors_total{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000,xid=48}":    1,
		"gpulens_gpu_last_xid_timestamp_seconds{gpu=1,uuid=GPU-00000001-0000-0000-0000-000000000000}": 1_700_000_000,
		"gpulens_gpu_last_xid_timestamp_seconds{gpu=0,uuid=GPU-00000000-0000-0000-0000-000000000000}": 1_700_000_000,
	}
	for k, v := range normalized(want) {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if n := len(devs[0].(*mock.Device).RegisterEventsCalls()) + len(devs[1].(*mock.Device).RegisterEventsCalls()); n != 2 {
		t.Errorf("RegisterEvents called %d times, want 2", n)
	}
}
