package gpusim

import (
	"sync"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// testClock is a manual clock safe for concurrent use.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func newTestClock() *testClock { return &testClock{t: epoch} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Set(elapsed time.Duration) {
	c.mu.Lock()
	c.t = epoch.Add(elapsed)
	c.mu.Unlock()
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newTestFleet builds and initialises a fleet on a manual clock.
func newTestFleet(t testing.TB, sc *Scenario, seed int64) (*Fleet, nvml.Interface, *testClock) {
	t.Helper()
	clk := newTestClock()
	f, lib := newFleetOn(t, sc, seed, clk.Now)
	return f, lib, clk
}

// newFleetOn builds and initialises a fleet reading the clock now.
func newFleetOn(t testing.TB, sc *Scenario, seed int64, now func() time.Time) (*Fleet, nvml.Interface) {
	t.Helper()
	f, err := New(sc, Options{Seed: seed, Start: epoch, Now: now})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	lib := f.Interface()
	if r := lib.Init(); r != nvml.SUCCESS {
		t.Fatalf("Init: %v", r)
	}
	t.Cleanup(func() { lib.Shutdown() })
	return f, lib
}

func mustLoad(t testing.TB, name string) *Scenario {
	t.Helper()
	sc, err := Load(name)
	if err != nil {
		t.Fatalf("Load(%q): %v", name, err)
	}
	return sc
}

func mustParse(t testing.TB, yml string) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(yml), "test.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return sc
}

func handle(t testing.TB, lib nvml.Interface, i int) nvml.Device {
	t.Helper()
	d, r := lib.DeviceGetHandleByIndex(i)
	if r != nvml.SUCCESS {
		t.Fatalf("DeviceGetHandleByIndex(%d): %v", i, r)
	}
	return d
}

func cString(b []int8) string {
	var out []byte
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// snapshot reads every simulated value of a device, as a comparable record.
type snapshot struct {
	UUID, Name, Serial, Vbios, BusID string
	Mem                              nvml.Memory_v2
	Util                             nvml.Utilization
	Enc, Dec                         uint32
	Temp, Power, Limit               uint32
	Energy                           uint64
	SM, MemClk, Graphics             uint32
	Reasons                          uint64
	Tx, Rx                           uint32
	Replays                          int
	EccCorr, EccUnc, EccAgg          uint64
	Rets                             []nvml.Return
}

func takeSnapshot(d nvml.Device) snapshot {
	var s snapshot
	var r nvml.Return
	rec := func() { s.Rets = append(s.Rets, r) }
	s.UUID, r = d.GetUUID()
	rec()
	s.Name, r = d.GetName()
	rec()
	s.Serial, r = d.GetSerial()
	rec()
	s.Vbios, r = d.GetVbiosVersion()
	rec()
	var pci nvml.PciInfo
	pci, r = d.GetPciInfo()
	rec()
	s.BusID = cString(pci.BusId[:])
	s.Mem, r = d.GetMemoryInfo_v2()
	rec()
	s.Util, r = d.GetUtilizationRates()
	rec()
	s.Enc, _, r = d.GetEncoderUtilization()
	rec()
	s.Dec, _, r = d.GetDecoderUtilization()
	rec()
	s.Temp, r = d.GetTemperature(nvml.TEMPERATURE_GPU)
	rec()
	s.Power, r = d.GetPowerUsage()
	rec()
	s.Limit, r = d.GetEnforcedPowerLimit()
	rec()
	s.Energy, r = d.GetTotalEnergyConsumption()
	rec()
	s.SM, r = d.GetClockInfo(nvml.CLOCK_SM)
	rec()
	s.MemClk, r = d.GetClockInfo(nvml.CLOCK_MEM)
	rec()
	s.Graphics, r = d.GetClockInfo(nvml.CLOCK_GRAPHICS)
	rec()
	s.Reasons, r = d.GetCurrentClocksEventReasons()
	rec()
	s.Tx, r = d.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)
	rec()
	s.Rx, r = d.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES)
	rec()
	s.Replays, r = d.GetPcieReplayCounter()
	rec()
	s.EccCorr, r = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
	rec()
	s.EccUnc, r = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
	rec()
	s.EccAgg, r = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC)
	rec()
	return s
}
