package gpusim

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// TestProbeDriverIdentity: the CUDA devices of the probe driver are the NVML
// devices (the MIG instances of a GPU in MIG mode), with the same UUIDs, PCI
// bus ids, names and memory.
func TestProbeDriverIdentity(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"dgx-h100", "mig-mixed", "demo", "rented-vgpu", "rented-dedicated"} {
		t.Run(name, func(t *testing.T) {
			f, lib, clk := newTestFleet(t, mustLoad(t, name), 3)
			clk.Set(time.Minute)
			p := gpuprobe.New(f.ProbeDriver(), gpuprobe.Options{})
			got, err := p.Devices(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			type want struct {
				name, uuid, bus string
				mem             uint64
				sms             int
			}
			var wants []want
			// CUDA enumerates one MIG instance per process: the first.
			migSeen := false
			n, _ := lib.DeviceGetCount()
			for i := 0; i < n; i++ {
				d := handle(t, lib, i)
				pci, _ := d.GetPciInfo()
				bus := cString(pci.BusId[:])
				mode, _, _ := d.GetMigMode()
				if mode != nvml.DEVICE_MIG_ENABLE {
					w := want{bus: bus, sms: 132}
					w.name, _ = d.GetName()
					w.uuid, _ = d.GetUUID()
					mem, _ := d.GetMemoryInfo_v2()
					w.mem = mem.Total - mem.Reserved
					wants = append(wants, w)
					continue
				}
				for j := 0; !migSeen; j++ {
					md, r := d.GetMigDeviceHandleByIndex(j)
					if r != nvml.SUCCESS {
						break
					}
					migSeen = true
					w := want{bus: bus}
					w.name, _ = md.GetName()
					w.uuid, _ = md.GetUUID()
					mem, _ := md.GetMemoryInfo_v2()
					w.mem = mem.Total
					// The multiprocessors of go-nvml's mock H100 GPU-instance
					// profiles, which NVML's profile info reports too.
					w.sms = map[string]int{"1g.10gb": 16, "2g.20gb": 32, "3g.40gb": 48, "4g.40gb": 64}[w.name[strings.LastIndexByte(w.name, ' ')+1:]]
					wants = append(wants, w)
				}
			}
			if len(got) != len(wants) {
				t.Fatalf("%d CUDA devices; want %d", len(got), len(wants))
			}
			for i, w := range wants {
				g := got[i]
				if g.Ordinal != i || g.Name != w.name || g.UUID != w.uuid || g.PCIBusID != w.bus ||
					g.TotalMemoryBytes != w.mem || g.SMs != w.sms || g.ComputeCapability != "9.0" || g.DriverVersion != 12040 {
					t.Errorf("CUDA device %d = %+v; want %+v, cc 9.0, driver 12040", i, g, w)
				}
			}
		})
	}
}

// within reports whether got is within rel of want.
func within(got, want, rel float64) bool { return math.Abs(got-want) <= rel*math.Abs(want) }

// TestProbeRentedScenarios runs the real probe (gpuprobe.Probe with
// gpulens-verify's configuration) over each rented-* scenario's simulated
// CUDA driver and checks what gpulens-verify will be judging. The probe
// takes turns with the renter's own workload (the tenant NVML lists) and
// with the invisible neighbour: the neighbour takes its share, and the
// probe and the workload split the rest, the workload taking no more than
// its SM utilisation, which the test reads from NVML's samples at that
// time: stolen = neighbour + min(sm, (1 − neighbour)/2).
func TestProbeRentedScenarios(t *testing.T) {
	t.Parallel()
	const gib = 1 << 30
	h100 := h100Probe
	type figures struct {
		h2d       float64 // of the H100's host copy figures
		throttle  float64 // of the H100's kernel figures, before time-slicing (0: 1)
		neighbour float64 // the invisible neighbour's share
		total     uint64  // cuMemGetInfo total
		used      uint64  // by the scenario's tenants
	}
	full := uint64(81920-512) * mib
	tests := []struct {
		scenario string
		at       time.Duration
		want     figures
	}{
		// At 1 s: NVML's first samples end at 1/6 s.
		{"rented-dedicated", time.Second, figures{h2d: 1, total: full}},
		{"rented-dedicated", 4 * time.Minute, figures{h2d: 1, total: full}},
		// Inside the neighbour's window it takes half the GPU; copies over
		// PCIe are not time-sliced.
		{"rented-timesliced", time.Second, figures{h2d: 1, neighbour: 0.5, total: full, used: 4096 * mib}},
		{"rented-timesliced", 4 * time.Minute, figures{h2d: 1, total: full, used: 4096 * mib}},
		{"rented-timesliced", 6 * time.Minute, figures{h2d: 1, neighbour: 0.5, total: full, used: 4096 * mib}},
		{"rented-throttled", time.Minute, figures{h2d: 0.5904, throttle: 0.5904, total: full, used: 40960 * mib}},
		{"rented-vgpu", time.Minute, figures{h2d: 1, total: (20480 - 128) * mib, used: 2048 * mib}},
	}
	for _, tc := range tests {
		t.Run(tc.scenario+"@"+tc.at.String(), func(t *testing.T) {
			f, lib, clk := newTestFleet(t, mustLoad(t, tc.scenario), 1)
			clk.Set(tc.at)
			// The workload's SM share, as NVML's latest sample says.
			sm := 0.0
			if samples, r := handle(t, lib, 0).GetProcessUtilization(0); r == nvml.SUCCESS {
				sm = float64(samples[len(samples)-1].SmUtil) / 100
			}
			w := tc.want
			stolen := w.neighbour + math.Min(sm, (1-w.neighbour)/2)
			throttle := w.throttle
			if throttle == 0 {
				throttle = 1
			}
			scale := throttle * (1 - stolen)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := gpuprobe.New(f.ProbeDriver(), gpuprobe.Options{}).Probe(ctx, 0, gpuprobe.DefaultConfig())
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Errors) > 0 {
				t.Fatalf("measurement errors: %+v", res.Errors)
			}
			t.Logf("workload SM %.2f; H2D %.3g D2H %.3g copy %.3g B/s; FP32 %.3g FP16 %.3g BF16 %.3g FLOP/s; launch %v; stolen %+v; memory %+v",
				sm, res.H2DBytesPerSecond, res.D2HBytesPerSecond, res.DeviceCopyBytesPerSecond, res.FP32FLOPS,
				res.FP16TensorFLOPS, res.BF16TensorFLOPS, res.LaunchLatency, res.Stolen, res.Memory)
			checks := []struct {
				name      string
				got, want float64
			}{
				{"H2D B/s", res.H2DBytesPerSecond, h100.h2dGBs * 1e9 * w.h2d},
				{"D2H B/s", res.D2HBytesPerSecond, h100.d2hGBs * 1e9 * w.h2d},
				{"device copy B/s", res.DeviceCopyBytesPerSecond, h100.copyGBs * 1e9 * scale},
				{"FP32 FLOP/s", res.FP32FLOPS, h100.fp32TFLOPS * 1e12 * scale},
				{"FP16 FLOP/s", res.FP16TensorFLOPS, h100.fp16TFLOPS * 1e12 * scale},
				{"BF16 FLOP/s", res.BF16TensorFLOPS, h100.bf16TFLOPS * 1e12 * scale},
			}
			for _, c := range checks {
				if !within(c.got, c.want, 0.08) {
					t.Errorf("%s = %.4g; want %.4g ±8%%", c.name, c.got, c.want)
				}
			}
			if !within(float64(res.LaunchLatency), float64(8*time.Microsecond), 0.1) {
				t.Errorf("launch latency %v; want ~8 µs", res.LaunchLatency)
			}
			if s := res.Stolen; s == nil || math.Abs(s.Ratio-stolen) > 0.05 {
				t.Errorf("stolen = %+v; want ratio %.2f ±0.05", s, stolen)
			} else if stolen > 0 && !within(float64(s.GapMedian), float64(2*time.Millisecond), 0.1) {
				t.Errorf("stolen gap median %v; want ~2ms", s.GapMedian)
			} else if stolen == 0 && s.Gaps != 0 {
				t.Errorf("stolen: %d gaps on a GPU nobody else uses", s.Gaps)
			}
			if m := res.Memory; m == nil || m.TotalBytes != w.total || m.FreeBytes > w.total-w.used || m.FreeBytes < w.total-w.used-gib {
				t.Errorf("memory = %+v; want total %d, free just under %d", m, w.total, w.total-w.used)
			}
		})
	}
}

// TestProbeVgpuQuarter: the vGPU guest sees a quarter of the board.
func TestProbeVgpuQuarter(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, mustLoad(t, "rented-vgpu"), 1)
	devs, err := gpuprobe.New(f.ProbeDriver(), gpuprobe.Options{}).Devices(context.Background())
	if err != nil || len(devs) != 1 {
		t.Fatalf("Devices = %v, %v", devs, err)
	}
	if r := float64(devs[0].TotalMemoryBytes) / float64(81920*mib); r < 0.24 || r > 0.25 {
		t.Errorf("vGPU memory %d bytes = %.3f of the board; want ~0.25", devs[0].TotalMemoryBytes, r)
	}
}

// TestProbeDevicesScaling: the current PCIe link scales host copies, MIG
// instances their share of SMs and memory.
func TestProbeDevicesScaling(t *testing.T) {
	t.Parallel()
	f, _, _ := newTestFleet(t, mustParse(t, `
devices:
  - model: a100-sxm4-80gb
    pcie_link: {generation: 3, width: 8}
  - model: h100-sxm5-80gb
    mig: [3g.40gb, 1g.10gb]
`), 1)
	devs := f.probeDevices()
	if len(devs) != 3 {
		t.Fatalf("%d devices; want 3 (the A100, two MIG instances)", len(devs))
	}
	a := devs[0]
	// gen3 x8 of gen4 x16: 0.985*8 / (1.969*16) = 0.2501.
	if want := 25e9 * 0.985 * 8 / (1.969 * 16); !within(a.H2DBytesPerSecond, want, 1e-9) || !within(a.D2HBytesPerSecond, 26e9*want/25e9, 1e-9) {
		t.Errorf("A100 on gen3 x8: H2D %.4g, D2H %.4g; want %.4g, %.4g", a.H2DBytesPerSecond, a.D2HBytesPerSecond, want, 26e9*want/25e9)
	}
	if a.DeviceCopyBytesPerSecond != 1900e9 || a.FP32FLOPS != 18.5e12 || a.TimerResolution != time.Microsecond || a.CCMajor != 8 || a.SMs != 108 {
		t.Errorf("A100 figures = %+v", a)
	}
	m3, m1 := devs[1], devs[2]
	if m3.SMs != 48 || m3.TotalMemoryBytes != 40960*mib || !within(m3.FP32FLOPS, 60e12*48/132, 1e-9) || !within(m3.DeviceCopyBytesPerSecond, 2900e9*0.5, 1e-9) {
		t.Errorf("3g.40gb = SMs %d, %d bytes, FP32 %.4g, copy %.4g", m3.SMs, m3.TotalMemoryBytes, m3.FP32FLOPS, m3.DeviceCopyBytesPerSecond)
	}
	if m1.SMs != 16 || m1.TotalMemoryBytes != 10240*mib || !within(m1.BF16TensorFLOPS, 600e12*16/132, 1e-9) || !within(m1.DeviceCopyBytesPerSecond, 2900e9/8, 1e-9) {
		t.Errorf("1g.10gb = SMs %d, %d bytes, BF16 %.4g, copy %.4g", m1.SMs, m1.TotalMemoryBytes, m1.BF16TensorFLOPS, m1.DeviceCopyBytesPerSecond)
	}
	// Nothing runs on them: nobody takes the probe's time.
	for i, d := range devs {
		if share, _ := d.Neighbour(epoch); share != 0 {
			t.Errorf("device %d: idle GPU takes %v of the probe's time", i, share)
		}
	}
}

// TestProbeDeviceFunctions: UsedByOthers, Slowdown and Neighbour follow the
// fleet's sim time, as NVML does.
func TestProbeDeviceFunctions(t *testing.T) {
	t.Parallel()
	f, lib, clk := newTestFleet(t, mustLoad(t, "demo"), 1)
	devs := f.probeDevices()
	gpu1 := devs[1]
	at := func(d time.Duration) time.Time { return epoch.Add(d) }
	// GPU 1: leaky-server (NVML lists it) always, the invisible neighbour
	// (half the GPU) from 2 to 7 minutes of every 10. The probe splits
	// what the neighbour leaves with leaky-server, which takes no more
	// than its SM utilisation: share = neighbour + min(sm, (1 − neighbour)/2).
	for _, tc := range []struct {
		at        time.Duration
		neighbour float64
	}{{time.Second, 0}, {119 * time.Second, 0}, {2 * time.Minute, 0.5}, {6 * time.Minute, 0.5}, {7 * time.Minute, 0}, {12*time.Minute + time.Second, 0.5}} {
		clk.Set(tc.at)
		samples, r := handle(t, lib, 1).GetProcessUtilization(0)
		if r != nvml.SUCCESS {
			t.Fatalf("GPU 1 samples at %v: %v", tc.at, r)
		}
		sm := float64(samples[len(samples)-1].SmUtil) / 100
		want := tc.neighbour + math.Min(sm, (1-tc.neighbour)/2)
		share, slice := gpu1.Neighbour(at(tc.at))
		if math.Abs(share-want) > 0.02 || slice != 2*time.Millisecond {
			t.Errorf("demo GPU 1 at %v (leaky-server at %.2f) takes %v, %v of the probe's time; want %.3f, 2ms", tc.at, sm, share, slice, want)
		}
	}
	// GPU 0: llm-serve (25-45 %) alone, then batch-train (70 %) too: the
	// probe gets what llm-serve leaves, then a third of the GPU at most.
	if share, _ := devs[0].Neighbour(at(time.Minute)); share < 0.2 || share > 0.5 {
		t.Errorf("demo GPU 0 with llm-serve alone takes %v of the probe's time; want its 25-45 %%", share)
	}
	if share, _ := devs[0].Neighbour(at(5 * time.Minute)); share < 0.6 || share > 0.7 {
		t.Errorf("demo GPU 0 with two busy tenants takes %v of the probe's time; want 0.6-0.7", share)
	}
	// Memory used by others is NVML's used memory at that time (the leak).
	for _, d := range []time.Duration{0, 150 * time.Second, 10 * time.Minute} {
		clk.Set(d)
		mem, _ := handle(t, lib, 1).GetMemoryInfo_v2()
		if got := gpu1.UsedByOthers(at(d)); got != mem.Used || got < 4096*mib {
			t.Errorf("UsedByOthers at %v = %d; NVML used %d", d, got, mem.Used)
		}
	}
	// MIG instance 0 of GPU 4: the embedder's 8 GiB.
	if got := devs[4].UsedByOthers(at(time.Minute)); got != 8192*mib {
		t.Errorf("MIG 3g.40gb used by others = %d; want 8 GiB", got)
	}
	if s := gpu1.Slowdown(at(time.Minute)); s != 1 {
		t.Errorf("demo GPU 1 slowdown %v; want 1", s)
	}
}
