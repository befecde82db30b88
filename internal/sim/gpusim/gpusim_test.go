package gpusim

import (
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestMinimalExactValues(t *testing.T) {
	t.Parallel()
	_, lib, clk := newTestFleet(t, mustLoad(t, "minimal"), 1)
	clk.Set(10 * time.Second)

	if n, r := lib.DeviceGetCount(); r != nvml.SUCCESS || n != 1 {
		t.Fatalf("DeviceGetCount = %d, %v; want 1, SUCCESS", n, r)
	}
	if v, r := lib.SystemGetDriverVersion(); r != nvml.SUCCESS || v != "550.54.15" {
		t.Errorf("SystemGetDriverVersion = %q, %v", v, r)
	}
	if v, r := lib.SystemGetCudaDriverVersion(); r != nvml.SUCCESS || v != 12040 {
		t.Errorf("SystemGetCudaDriverVersion = %d, %v", v, r)
	}
	d := handle(t, lib, 0)

	const mi = uint64(1 << 20)
	mem, r := d.GetMemoryInfo_v2()
	wantMem := nvml.Memory_v2{Version: mem.Version, Total: 81920 * mi, Reserved: 512 * mi, Used: 40704 * mi, Free: 40704 * mi}
	if r != nvml.SUCCESS || mem != wantMem {
		t.Errorf("GetMemoryInfo_v2 = %+v, %v; want %+v", mem, r, wantMem)
	}
	if mem.Total != 85899345920 || mem.Used != 42681237504 {
		t.Errorf("memory bytes: total %d used %d", mem.Total, mem.Used)
	}
	if mem.Free != mem.Total-mem.Reserved-mem.Used {
		t.Errorf("Free %d != Total-Reserved-Used", mem.Free)
	}
	mem1, r := d.GetMemoryInfo()
	if want := (nvml.Memory{Total: 81920 * mi, Used: 41216 * mi, Free: 40704 * mi}); r != nvml.SUCCESS || mem1 != want {
		t.Errorf("GetMemoryInfo = %+v, %v; want %+v", mem1, r, want)
	}

	u32 := func(v uint32, r nvml.Return) any { return [2]any{v, r} }
	u64 := func(v uint64, r nvml.Return) any { return [2]any{v, r} }
	str := func(v string, r nvml.Return) any { return [2]any{v, r} }
	two := func(a, b uint32, r nvml.Return) any { return [3]any{a, b, r} }
	ok := nvml.SUCCESS
	tests := []struct {
		name      string
		got, want any
	}{
		{"GetName", str(d.GetName()), [2]any{"NVIDIA H100 80GB HBM3", ok}},
		{"GetVbiosVersion", str(d.GetVbiosVersion()), [2]any{"96.00.99.00.01", ok}},
		{"GetPowerUsage mW", u32(d.GetPowerUsage()), [2]any{uint32(420000), ok}},
		{"GetEnforcedPowerLimit mW", u32(d.GetEnforcedPowerLimit()), [2]any{uint32(700000), ok}},
		{"GetTotalEnergyConsumption mJ at 10s", u64(d.GetTotalEnergyConsumption()), [2]any{uint64(4200000), ok}},
		{"GetTemperature C", u32(d.GetTemperature(nvml.TEMPERATURE_GPU)), [2]any{uint32(60), ok}},
		{"GetClockInfo SM", u32(d.GetClockInfo(nvml.CLOCK_SM)), [2]any{uint32(1980), ok}},
		{"GetClockInfo GRAPHICS", u32(d.GetClockInfo(nvml.CLOCK_GRAPHICS)), [2]any{uint32(1980), ok}},
		{"GetClockInfo MEM", u32(d.GetClockInfo(nvml.CLOCK_MEM)), [2]any{uint32(2619), ok}},
		{"GetMaxClockInfo SM", u32(d.GetMaxClockInfo(nvml.CLOCK_SM)), [2]any{uint32(1980), ok}},
		{"GetMaxClockInfo GRAPHICS", u32(d.GetMaxClockInfo(nvml.CLOCK_GRAPHICS)), [2]any{uint32(1980), ok}},
		{"GetMaxClockInfo MEM", u32(d.GetMaxClockInfo(nvml.CLOCK_MEM)), [2]any{uint32(2619), ok}},
		{"GetPcieThroughput TX KB/s", u32(d.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES)), [2]any{uint32(256000), ok}},
		{"GetPcieThroughput RX KB/s", u32(d.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES)), [2]any{uint32(1024000), ok}},
		{"GetFanSpeed on SXM", u32(d.GetFanSpeed()), [2]any{uint32(0), nvml.ERROR_NOT_SUPPORTED}},
		{"GetCurrentClocksEventReasons", u64(d.GetCurrentClocksEventReasons()), [2]any{uint64(0), ok}},
		{"GetTotalEccErrors corrected volatile", u64(d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)), [2]any{uint64(0), ok}},
		{"GetTotalEccErrors uncorrected aggregate", u64(d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.AGGREGATE_ECC)), [2]any{uint64(0), ok}},
		{"GetEncoderUtilization", two(d.GetEncoderUtilization()), [3]any{uint32(0), uint32(167000), ok}},
		{"GetDecoderUtilization", two(d.GetDecoderUtilization()), [3]any{uint32(0), uint32(167000), ok}},
		{"GetTemperature bad sensor", u32(d.GetTemperature(nvml.TemperatureSensors(7))), [2]any{uint32(0), nvml.ERROR_INVALID_ARGUMENT}},
	}
	for _, tc := range tests {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v; want %v", tc.name, tc.got, tc.want)
		}
	}
	if u, r := d.GetUtilizationRates(); r != ok || u != (nvml.Utilization{Gpu: 50, Memory: 25}) {
		t.Errorf("GetUtilizationRates = %+v, %v", u, r)
	}
	if n, r := d.GetPcieReplayCounter(); r != ok || n != 0 {
		t.Errorf("GetPcieReplayCounter = %d, %v", n, r)
	}
	if c, u, p, f, r := d.GetRemappedRows(); r != ok || c != 0 || u != 0 || p || f {
		t.Errorf("GetRemappedRows = %d %d %v %v %v", c, u, p, f, r)
	}
	if m, r := d.GetPersistenceMode(); r != ok || m != nvml.FEATURE_ENABLED {
		t.Errorf("GetPersistenceMode = %v, %v", m, r)
	}
	if m, r := d.GetComputeMode(); r != ok || m != nvml.COMPUTEMODE_DEFAULT {
		t.Errorf("GetComputeMode = %v, %v", m, r)
	}
	if c, p, r := d.GetMigMode(); r != ok || c != nvml.DEVICE_MIG_DISABLE || p != nvml.DEVICE_MIG_DISABLE {
		t.Errorf("GetMigMode = %d %d %v", c, p, r)
	}
	if m, r := d.GetSupportedEventTypes(); r != ok || m&nvml.EventTypeXidCriticalError == 0 {
		t.Errorf("GetSupportedEventTypes = %#x, %v", m, r)
	}
	pci, r := d.GetPciInfo()
	if r != ok || cString(pci.BusId[:]) != "00000000:18:00.0" || cString(pci.BusIdLegacy[:]) != "0000:18:00.0" ||
		pci.Bus != 0x18 || pci.PciDeviceId != 0x233010DE {
		t.Errorf("GetPciInfo = %+v (%q, %q), %v", pci, cString(pci.BusId[:]), cString(pci.BusIdLegacy[:]), r)
	}
	uuid, _ := d.GetUUID()
	if !regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(uuid) {
		t.Errorf("GetUUID = %q; want a version-4 GPU- UUID", uuid)
	}
	if serial, _ := d.GetSerial(); !regexp.MustCompile(`^1654\d{9}$`).MatchString(serial) {
		t.Errorf("GetSerial = %q; want 13 digits starting 1654", serial)
	}
	if h, r := lib.DeviceGetHandleByUUID(uuid); r != ok || h != d {
		t.Errorf("DeviceGetHandleByUUID(%q) = %v, %v", uuid, h, r)
	}
	if h, r := lib.DeviceGetHandleByPciBusId("00000000:18:00.0"); r != ok || h != d {
		t.Errorf("DeviceGetHandleByPciBusId = %v, %v", h, r)
	}

	// Energy is the exact integral of the constant 420 W.
	clk.Set(10*time.Second + 500*time.Millisecond)
	if e, _ := d.GetTotalEnergyConsumption(); e != 4410000 {
		t.Errorf("energy at 10.5s = %d mJ; want 4410000", e)
	}
}

func TestUninitialised(t *testing.T) {
	t.Parallel()
	f, err := New(mustLoad(t, "minimal"), Options{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	lib := f.Interface()
	if _, r := lib.DeviceGetCount(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("DeviceGetCount before Init = %v; want ERROR_UNINITIALIZED", r)
	}
	if r := lib.Shutdown(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("Shutdown before Init = %v", r)
	}
	lib.Init()
	d := handle(t, lib, 0)
	if r := lib.Shutdown(); r != nvml.SUCCESS {
		t.Fatalf("Shutdown = %v", r)
	}
	if _, r := d.GetPowerUsage(); r != nvml.ERROR_UNINITIALIZED {
		t.Errorf("GetPowerUsage after Shutdown = %v; want ERROR_UNINITIALIZED", r)
	}
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	sc := mustLoad(t, "dgx-h100")
	_, libA, clkA := newTestFleet(t, sc, 42)
	_, libB, clkB := newTestFleet(t, sc, 42)
	_, libC, clkC := newTestFleet(t, sc, 43)
	// B visits the times in a different order: results must not depend on it.
	times := []time.Duration{0, 7 * time.Second, 95 * time.Second, 30 * time.Minute, 3*time.Hour + 250*time.Millisecond}
	rev := slices.Clone(times)
	slices.Reverse(rev)
	got := map[time.Duration][]snapshot{}
	for _, at := range rev {
		clkB.Set(at)
		for i := 0; i < 8; i++ {
			got[at] = append(got[at], takeSnapshot(handle(t, libB, i)))
		}
	}
	distinctPower := map[uint32]bool{}
	for _, at := range times {
		clkA.Set(at)
		clkC.Set(at)
		for i := 0; i < 8; i++ {
			a := takeSnapshot(handle(t, libA, i))
			if !reflect.DeepEqual(a, got[at][i]) {
				t.Errorf("t=%v gpu %d: same seed differs:\n%+v\n%+v", at, i, a, got[at][i])
			}
			c := takeSnapshot(handle(t, libC, i))
			if a.UUID == c.UUID || a.Serial == c.Serial {
				t.Errorf("gpu %d: seeds 42 and 43 give the same UUID %s / serial %s", i, a.UUID, a.Serial)
			}
			if a.BusID != c.BusID {
				t.Errorf("gpu %d: bus id depends on seed: %s vs %s", i, a.BusID, c.BusID)
			}
			distinctPower[a.Power] = true
		}
	}
	if len(distinctPower) < 20 {
		t.Errorf("only %d distinct power readings over 40 samples: load patterns are not varied", len(distinctPower))
	}
}

func TestDGXH100Ranges(t *testing.T) {
	t.Parallel()
	_, lib, clk := newTestFleet(t, mustLoad(t, "dgx-h100"), 7)
	var minP, maxP, minT, maxT uint32 = 1 << 31, 0, 1 << 31, 0
	var sawIdle, sawCap bool
	uuids := map[string]bool{}
	for s := 0; s <= 3600; s += 10 {
		clk.Set(time.Duration(s) * time.Second)
		for i := 0; i < 8; i++ {
			v := takeSnapshot(handle(t, lib, i))
			for j, r := range v.Rets {
				if r != nvml.SUCCESS {
					t.Fatalf("gpu %d call %d at %ds: %v", i, j, s, r)
				}
			}
			uuids[v.UUID] = true
			minP, maxP = min(minP, v.Power), max(maxP, v.Power)
			minT, maxT = min(minT, v.Temp), max(maxT, v.Temp)
			if v.SM > 1980 || v.MemClk != 2619 || v.Util.Gpu > 100 || v.Mem.Used > v.Mem.Total {
				t.Fatalf("gpu %d at %ds out of range: %+v", i, s, v)
			}
			sawIdle = sawIdle || v.Reasons&nvml.ClocksEventReasonGpuIdle != 0
			sawCap = sawCap || v.Reasons&nvml.ClocksEventReasonSwPowerCap != 0
		}
	}
	if len(uuids) != 8 {
		t.Errorf("%d distinct UUIDs; want 8", len(uuids))
	}
	if minP < 60000 || maxP > 700000 || maxP < 600000 || minP > 150000 {
		t.Errorf("power range %d-%d mW; want within 60-700 W, spanning idle to near TDP", minP, maxP)
	}
	if minT < 30 || maxT > 85 || maxT-minT < 20 {
		t.Errorf("temperature range %d-%d C; want within 30-85 and varied", minT, maxT)
	}
	if !sawIdle || !sawCap {
		t.Errorf("clock event reasons: idle seen %v, power cap seen %v; want both", sawIdle, sawCap)
	}
}

func TestCountersMonotonic(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - count: 2
    model: a100-pcie-80gb
    util: {shape: sine, min: 0, max: 100, period: 90s, noise: 10}
    ecc: {corrected_per_hour: 120, uncorrected_per_hour: 3}
    pcie_replays_per_hour: 30
`)
	_, lib, clk := newTestFleet(t, sc, 5)
	type ctr struct {
		energy, corr, unc, agg uint64
		replays                int
	}
	last := make([]ctr, 2)
	for s := 0; s <= 4*3600; s += 37 {
		clk.Set(time.Duration(s)*time.Second + 123*time.Millisecond)
		for i := 0; i < 2; i++ {
			d := handle(t, lib, i)
			var c ctr
			c.energy, _ = d.GetTotalEnergyConsumption()
			c.corr, _ = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.VOLATILE_ECC)
			c.unc, _ = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC)
			c.agg, _ = d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_CORRECTED, nvml.AGGREGATE_ECC)
			c.replays, _ = d.GetPcieReplayCounter()
			p := last[i]
			if c.energy < p.energy || c.corr < p.corr || c.unc < p.unc || c.agg < p.agg || c.replays < p.replays {
				t.Fatalf("gpu %d at %ds: counter decreased: %+v after %+v", i, s, c, p)
			}
			if c.agg < c.corr {
				t.Fatalf("aggregate %d below volatile %d", c.agg, c.corr)
			}
			last[i] = c
		}
	}
	// Rates: 4h at 120/h, 3/h and 30/h (per-hour counts are floor(rate+u)).
	for i, c := range last {
		if c.corr != 480 || c.unc < 12 || c.unc > 16 || c.replays != 120 {
			t.Errorf("gpu %d after 4h: corrected %d (want 480), uncorrected %d (want 12-16), replays %d (want 120)", i, c.corr, c.unc, c.replays)
		}
		// A100 PCIe 80GB idles at 45 W and tops at 300 W: mean energy in between.
		if avgW := float64(c.energy) / 1000 / (4*3600 + 0.123); avgW < 45 || avgW > 300 {
			t.Errorf("gpu %d mean power %.1f W outside [45, 300]", i, avgW)
		}
	}
	// Going back in time gives the same values as the first visit.
	clk.Set(1000 * time.Second)
	d := handle(t, lib, 0)
	e1, _ := d.GetTotalEnergyConsumption()
	_, lib2, clk2 := newTestFleet(t, sc, 5)
	clk2.Set(1000 * time.Second)
	e2, _ := handle(t, lib2, 0).GetTotalEnergyConsumption()
	if e1 != e2 || e1 == 0 {
		t.Errorf("energy at 1000s after rewinding %d, fresh fleet %d", e1, e2)
	}
}

func TestFanOnPCIeOnly(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - {model: a100-pcie-40gb, util: 100, power: 250}
  - {model: a100-sxm4-40gb, util: 100}
`)
	_, lib, clk := newTestFleet(t, sc, 1)
	clk.Set(5 * time.Minute)
	// 100 % load: 250 W = the limit, temperature 30 + 50 = 80 C, fan 30 + 70*50/55.
	if v, r := handle(t, lib, 0).GetFanSpeed(); r != nvml.SUCCESS || v != 94 {
		t.Errorf("PCIe fan = %d, %v; want 94", v, r)
	}
	if _, r := handle(t, lib, 1).GetFanSpeed(); r != nvml.ERROR_NOT_SUPPORTED {
		t.Errorf("SXM fan = %v; want ERROR_NOT_SUPPORTED", r)
	}
	if n, _ := handle(t, lib, 1).GetName(); n != "NVIDIA A100-SXM4-40GB" {
		t.Errorf("name %q", n)
	}
	// At the limit the power-cap reason is set and the SM clock drops 7 %.
	d := handle(t, lib, 0)
	reasons, _ := d.GetCurrentClocksEventReasons()
	sm, _ := d.GetClockInfo(nvml.CLOCK_SM)
	if reasons != nvml.ClocksEventReasonSwPowerCap || sm != 1305 {
		t.Errorf("reasons %#x sm %d; want SwPowerCap and 1305 MHz", reasons, sm)
	}
}
