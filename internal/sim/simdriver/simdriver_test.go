package simdriver

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

var base = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// Module texts with just what the simulator reads: targets and entries.
const (
	baseModule   = ".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry gpulens_noop()\n{ ret; }\n.visible .entry gpulens_copy(.param .u64 a)\n.visible .entry gpulens_fma(.param .u64 a)\n.visible .entry gpulens_stolen(.param .u64 a)\n"
	tensorModule = ".version 7.0\n.target sm_80\n.visible .entry gpulens_mma_f16(.param .u64 a)\n{ mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ... }\n.visible .entry gpulens_mma_bf16(.param .u64 a)\n"
)

func testDevice() Device {
	return Device{
		Name: "sim", UUID: "GPU-00000000-0000-0000-0000-000000000001", PCIBusID: "00000001:2a:03.0",
		CCMajor: 8, CCMinor: 0, SMs: 4, TotalMemoryBytes: 1 << 30,
		H2DBytesPerSecond: 1e9, D2HBytesPerSecond: 2e9, DeviceCopyBytesPerSecond: 1e11,
		FP32FLOPS: 1e12, FP16TensorFLOPS: 8e12, BF16TensorFLOPS: 4e12,
		LaunchLatency: 10 * time.Microsecond, TimerResolution: time.Microsecond,
	}
}

// fixture is a driver with a context on device 0 and the base module.
type fixture struct {
	t   *testing.T
	d   *Driver
	now time.Time // the base clock, moved by tests
	mu  sync.Mutex
	fn  map[string]gpuprobe.Function
}

func newFixture(t *testing.T, dev Device) *fixture {
	t.Helper()
	f := &fixture{t: t, now: base, fn: map[string]gpuprobe.Function{}}
	f.d = New([]Device{dev}, Options{Now: f.clock, Seed: 1})
	f.must(f.d.Init())
	_, err := f.d.CtxCreate(0)
	f.must(err)
	m, err := f.d.ModuleLoadData(baseModule)
	f.must(err)
	for _, k := range []string{gpuprobe.KernelNoop, gpuprobe.KernelCopy, gpuprobe.KernelFMA, gpuprobe.KernelStolen} {
		f.fn[k], err = f.d.ModuleGetFunction(m, k)
		f.must(err)
	}
	return f
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) alloc(n uint64) gpuprobe.DevicePtr {
	f.t.Helper()
	p, err := f.d.MemAlloc(n)
	f.must(err)
	return p
}

func wantCode(t *testing.T, what string, err error, code int) {
	t.Helper()
	var ce *gpuprobe.CUDAError
	if !errors.As(err, &ce) || ce.Code != code {
		t.Errorf("%s: error %v, want CUresult %d", what, err, code)
	}
}

func near(t *testing.T, what string, got, want time.Duration, tol float64) {
	t.Helper()
	if math.Abs(float64(got-want)) > tol*float64(want) {
		t.Errorf("%s = %s, want %s ± %.1f%%", what, got, want, 100*tol)
	}
}

func TestClockAndStream(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testDevice())
	d := f.d
	out := f.alloc(4096)
	start, _ := d.EventCreate(gpuprobe.EventBlockingSync)
	end, _ := d.EventCreate(gpuprobe.EventBlockingSync)
	// One FMA launch of 4 blocks x 256 threads x 1000 iterations:
	// 1024*1000*FMAChains*2 = 16.384 MFLOP at 1 TFLOP/s = 16.384 µs.
	run := 16384 * time.Nanosecond
	t0 := d.Now()
	f.must(d.EventRecord(start))
	f.must(d.LaunchKernel(f.fn[gpuprobe.KernelFMA], gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(out), 1000))
	// The launch returns before the kernel ends: the host paid a quarter
	// of the latency.
	near(t, "host time after a launch", d.Now().Sub(t0), 10*time.Microsecond/4, 0.01)
	f.must(d.EventRecord(end))
	_, err := d.EventElapsed(start, end)
	wantCode(t, "elapsed before the end event is reached", err, errNotReady)
	f.must(d.EventSynchronize(end))
	el, err := d.EventElapsed(start, end)
	f.must(err)
	near(t, "one launch between events", el, 10*time.Microsecond+run, 0.01)
	near(t, "host time after the sync", d.Now().Sub(t0), 10*time.Microsecond+run, 0.01)

	// Back-to-back launches overlap their latency.
	f.must(d.EventRecord(start))
	for range 10 {
		f.must(d.LaunchKernel(f.fn[gpuprobe.KernelFMA], gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(out), 1000))
	}
	f.must(d.EventRecord(end))
	f.must(d.CtxSynchronize())
	el, err = d.EventElapsed(start, end)
	f.must(err)
	near(t, "ten launches", el, 10*time.Microsecond+10*run, 0.01)

	// An empty kernel's round trip is the launch latency.
	t1 := d.Now()
	f.must(d.LaunchKernel(f.fn[gpuprobe.KernelNoop], gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, 0))
	f.must(d.CtxSynchronize())
	near(t, "round trip", d.Now().Sub(t1), 10*time.Microsecond, 0.01)

	// A copy waits for the stream, then takes bytes over bandwidth:
	// 1 MiB at 1 GB/s.
	host, err := d.MemAllocHost(1 << 20)
	f.must(err)
	dev := f.alloc(1 << 20)
	t2 := d.Now()
	f.must(d.MemcpyHtoD(dev, host))
	near(t, "1 MiB H2D", d.Now().Sub(t2), 1048576*time.Nanosecond, 0.01)

	// The virtual clock never runs behind the base clock.
	f.mu.Lock()
	f.now = base.Add(time.Hour)
	f.mu.Unlock()
	if got := d.Now(); !got.Equal(base.Add(time.Hour)) {
		t.Errorf("Now = %s, want the base clock %s", got, base.Add(time.Hour))
	}
}

// TestOwnTimeIsNotGPUTime: the time the simulator takes to emulate a call
// (here the device's Slowdown, read inside the launch, moves the base clock
// as a loaded host or the race detector would) is not GPU time, while the
// caller's time between calls is; with no context left the clock catches
// up with the base clock.
func TestOwnTimeIsNotGPUTime(t *testing.T) {
	t.Parallel()
	kernel := 10*time.Microsecond + 16384*time.Nanosecond // latency + one FMA launch (TestClockAndStream)
	for _, tc := range []struct {
		name           string
		inside, caller time.Duration // base clock moved inside the launch, and by the caller before it
		want           time.Duration // the events' elapsed time
	}{
		{"fast driver", 0, 0, kernel},
		{"slow driver", 50 * time.Millisecond, 0, kernel},
		// The host's own delay before the launch is idle GPU time
		// between the events, as on a real GPU.
		{"slow caller", 0, 5 * time.Millisecond, 5*time.Millisecond + kernel},
		{"slow driver and caller", 50 * time.Millisecond, 5 * time.Millisecond, 5*time.Millisecond + kernel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			now := base
			clock := func() time.Time {
				mu.Lock()
				defer mu.Unlock()
				return now
			}
			wait := func(d time.Duration) {
				mu.Lock()
				now = now.Add(d)
				mu.Unlock()
			}
			dev := testDevice()
			dev.Slowdown = func(time.Time) float64 { wait(tc.inside); return 1 }
			var told []time.Duration // Options.Lag
			d := New([]Device{dev}, Options{Now: clock, Seed: 1, Lag: func(l time.Duration) { told = append(told, l) }})
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(d.Init())
			c, err := d.CtxCreate(0)
			must(err)
			m, err := d.ModuleLoadData(baseModule)
			must(err)
			fma, err := d.ModuleGetFunction(m, gpuprobe.KernelFMA)
			must(err)
			out, err := d.MemAlloc(4096)
			must(err)
			start, _ := d.EventCreate(gpuprobe.EventBlockingSync)
			end, _ := d.EventCreate(gpuprobe.EventBlockingSync)
			must(d.EventRecord(start))
			wait(tc.caller)
			must(d.LaunchKernel(fma, gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(out), 1000))
			must(d.EventRecord(end))
			must(d.EventSynchronize(end))
			el, err := d.EventElapsed(start, end)
			must(err)
			near(t, "elapsed", el, tc.want, 0.01)

			// Inside the context the clock ran behind by the launch's own time.
			if lag := clock().Sub(d.Now()); lag < tc.inside-time.Millisecond || lag > tc.inside {
				t.Errorf("inside the context the clock is %s behind the base clock, want about %s", lag, tc.inside)
			}
			// Options.Lag was told the lag, as it grew.
			if tc.inside == 0 && len(told) != 0 {
				t.Errorf("Lag told %v with no time inside the calls", told)
			}
			if tc.inside > 0 && (len(told) == 0 || told[len(told)-1] != tc.inside) {
				t.Errorf("Lag told %v; want the lag %s last", told, tc.inside)
			}
			must(d.CtxDestroy(c))
			if _, err := d.DeviceCount(); err != nil {
				t.Fatal(err)
			}
			if tc.inside > 0 && told[len(told)-1] != 0 {
				t.Errorf("Lag told %v; want 0 last once no context is live", told)
			}
			if got := d.Now(); got.Before(clock()) {
				t.Errorf("with no context the clock is %s behind the base clock", clock().Sub(got))
			}
		})
	}
}

func TestFigures(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		slow  float64
		share float64
	}{
		{"at spec", 1, 0},
		{"throttled", 0.5, 0},
		{"neighbour", 1, 0.75},
		{"both", 0.5, 0.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := testDevice()
			dev.Slowdown = func(time.Time) float64 { return tc.slow }
			dev.Neighbour = func(time.Time) (float64, time.Duration) { return tc.share, time.Millisecond }
			f := newFixture(t, dev)
			d := f.d
			src, dst := f.alloc(100<<20), f.alloc(100<<20)
			// 2*16*n16 = 200 MB at 100 GB/s = 2 ms, stretched.
			t0 := d.Now()
			f.must(d.LaunchKernel(f.fn[gpuprobe.KernelCopy], gpuprobe.Dim3{X: 16, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(dst), uint64(src), 6_250_000))
			f.must(d.CtxSynchronize())
			want := time.Duration(float64(2*time.Millisecond)/tc.slow/(1-tc.share)) + 10*time.Microsecond
			near(t, "copy kernel", d.Now().Sub(t0), want, 0.01)
			// Copies: Slowdown only.
			host, _ := d.MemAllocHost(10 << 20)
			t1 := d.Now()
			f.must(d.MemcpyDtoH(host, src))
			near(t, "D2H", d.Now().Sub(t1), time.Duration(float64(10<<20)/2e9/tc.slow*1e9), 0.01)
		})
	}
}

func TestMemory(t *testing.T) {
	t.Parallel()
	dev := testDevice()
	dev.UsedByOthers = func(time.Time) uint64 { return 256 << 20 }
	f := newFixture(t, dev)
	d := f.d
	free, total, err := d.MemGetInfo()
	f.must(err)
	if free != 768<<20 || total != 1<<30 {
		t.Errorf("MemGetInfo = %d, %d, want 768 MiB, 1 GiB", free, total)
	}
	a := f.alloc(512 << 20)
	_, err = d.MemAlloc(257 << 20)
	wantCode(t, "allocation past what is free", err, gpuprobe.CUDAErrOutOfMemory)
	b := f.alloc(256 << 20)
	if free, _, _ := d.MemGetInfo(); free != 0 {
		t.Errorf("free = %d after allocating all of it", free)
	}
	f.must(d.MemFree(a))
	wantCode(t, "double free", d.MemFree(a), errInvalidValue)
	if free, _, _ := d.MemGetInfo(); free != 512<<20 {
		t.Errorf("free = %d after freeing 512 MiB", free)
	}
	_, err = d.MemAlloc(0)
	wantCode(t, "zero bytes", err, errInvalidValue)

	// Small allocations hold bytes: what goes in comes out.
	small := f.alloc(64)
	in := []byte("0123456789abcdef")
	f.must(d.MemcpyHtoD(small+8, in))
	outb := make([]byte, 24)
	f.must(d.MemcpyDtoH(outb, small))
	if string(outb[8:]) != string(in) || outb[0] != 0 {
		t.Errorf("read back %q", outb)
	}
	f.must(d.MemsetD8(small, 'x', 4))
	f.must(d.MemcpyDtoH(outb[:5], small))
	if string(outb[:5]) != "xxxx\x00" {
		t.Errorf("after memset: %q", outb[:5])
	}
	wantCode(t, "copy past the allocation", d.MemcpyHtoD(small+60, in), errInvalidValue)

	// Destroying the context frees what it held.
	ctx2, err := d.CtxCreate(0)
	f.must(err)
	_ = f.alloc(100 << 20)
	f.must(d.CtxDestroy(ctx2))
	_, _, err = d.MemGetInfo()
	wantCode(t, "no current context", err, errInvalidContext)
	_, err = d.CtxCreate(0)
	f.must(err)
	if free, _, _ := d.MemGetInfo(); free != 768<<20-256<<20-64 {
		t.Errorf("free = %d after destroying a context, want the first context's allocations only", free)
	}
	_ = b
}

func TestModules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		major, minor int
		ptx          string
		code         int
		log          string
	}{
		{"base on 7.5", 7, 5, baseModule, 0, ""},
		{"tensor on 8.0", 8, 0, tensorModule, 0, ""},
		{"tensor on 7.5", 7, 5, tensorModule, gpuprobe.CUDAErrInvalidPTX, "sm_80"},
		{"mma without target", 7, 0, ".entry gpulens_mma_bf16()\nmma.sync.aligned", gpuprobe.CUDAErrInvalidPTX, "mma.sync"},
		{"target above the device", 8, 0, ".target sm_90\n.entry gpulens_noop()", gpuprobe.CUDAErrInvalidPTX, "sm_90"},
		{"empty", 9, 0, "", gpuprobe.CUDAErrInvalidPTX, "no .entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := testDevice()
			dev.CCMajor, dev.CCMinor = tc.major, tc.minor
			d := New([]Device{dev}, Options{Now: func() time.Time { return base }})
			if err := d.Init(); err != nil {
				t.Fatal(err)
			}
			if _, err := d.CtxCreate(0); err != nil {
				t.Fatal(err)
			}
			m, err := d.ModuleLoadData(tc.ptx)
			if tc.code == 0 {
				if err != nil {
					t.Fatal(err)
				}
				_, err = d.ModuleGetFunction(m, "gpulens_nope")
				wantCode(t, "unknown kernel", err, errNotFound)
				return
			}
			wantCode(t, "load", err, tc.code)
			if err == nil || !strings.Contains(err.Error(), tc.log) || !strings.Contains(err.Error(), "CUDA_ERROR_INVALID_PTX") {
				t.Errorf("error %v, want CUDA_ERROR_INVALID_PTX and %q", err, tc.log)
			}
		})
	}
}

func TestLaunchChecks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testDevice())
	d := f.d
	out := f.alloc(1024)
	one := gpuprobe.Dim3{X: 1, Y: 1, Z: 1}
	for _, tc := range []struct {
		name        string
		fn          gpuprobe.Function
		grid, block gpuprobe.Dim3
		args        []uint64
		code        int
	}{
		{"ok", f.fn[gpuprobe.KernelFMA], one, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, []uint64{uint64(out), 1}, 0},
		{"output too small", f.fn[gpuprobe.KernelFMA], one, gpuprobe.Dim3{X: 257, Y: 1, Z: 1}, []uint64{uint64(out), 1}, errIllegalAddress},
		{"output unallocated", f.fn[gpuprobe.KernelFMA], one, one, []uint64{12345, 1}, errIllegalAddress},
		{"parameters", f.fn[gpuprobe.KernelFMA], one, one, []uint64{uint64(out)}, errInvalidValue},
		{"block too big", f.fn[gpuprobe.KernelNoop], one, gpuprobe.Dim3{X: 2048, Y: 1, Z: 1}, nil, errInvalidValue},
		{"empty grid", f.fn[gpuprobe.KernelNoop], gpuprobe.Dim3{}, one, nil, errInvalidValue},
		{"unknown function", 999, one, one, nil, errInvalidHandle},
		{"stolen output", f.fn[gpuprobe.KernelStolen], gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 32, Y: 1, Z: 1}, []uint64{uint64(out), 1000, 10, 16}, errIllegalAddress}, // 4 blocks of 8*(6+32) bytes > 1024,
	} {
		err := d.LaunchKernel(tc.fn, tc.grid, tc.block, 0, tc.args...)
		if tc.code == 0 {
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
			}
			continue
		}
		wantCode(t, tc.name, err, tc.code)
	}
}

func TestLifecycleErrors(t *testing.T) {
	t.Parallel()
	d := New([]Device{testDevice()}, Options{Now: func() time.Time { return base }})
	_, err := d.DeviceCount()
	wantCode(t, "before cuInit", err, gpuprobe.CUDAErrNotInitalized)
	wantCode(t, "no devices", New(nil, Options{}).Init(), gpuprobe.CUDAErrNoDevice)
	if err := d.Init(); err != nil {
		t.Fatal(err)
	}
	_, err = d.DeviceName(1)
	wantCode(t, "ordinal 1", err, gpuprobe.CUDAErrInvalidDevice)
	_, err = d.MemAlloc(1)
	wantCode(t, "no context", err, errInvalidContext)
	v, err := d.DriverVersion()
	if err != nil || v != 12040 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	if v, _ := New(nil, Options{DriverVersion: 13000}).DriverVersion(); v != 13000 {
		t.Errorf("DriverVersion option: %d", v)
	}
	for a, want := range map[gpuprobe.Attribute]int{
		gpuprobe.AttrPCIDomainID: 1, gpuprobe.AttrPCIBusID: 0x2a, gpuprobe.AttrPCIDeviceID: 3,
		gpuprobe.AttrMultiprocessorCount: 4, gpuprobe.AttrComputeCapabilityMajor: 8, gpuprobe.AttrComputeCapabilityMinor: 0,
	} {
		if got, err := d.DeviceAttribute(0, a); err != nil || got != want {
			t.Errorf("attribute %d = %d, %v; want %d", a, got, err, want)
		}
	}
	_, err = d.DeviceAttribute(0, 9999)
	wantCode(t, "unknown attribute", err, errInvalidValue)
}

func TestFailCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testDevice())
	d := f.d
	out := f.alloc(1 << 16)
	launch := func() error {
		return d.LaunchKernel(f.fn[gpuprobe.KernelFMA], gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, gpuprobe.Dim3{X: 32, Y: 1, Z: 1}, 0, uint64(out), 1)
	}
	d.FailCall("cuMemAlloc_v2", 2)
	_, err := d.MemAlloc(16)
	wantCode(t, "failed cuMemAlloc_v2", err, 2)
	var ce *gpuprobe.CUDAError
	if errors.As(err, &ce) && (ce.Call != "cuMemAlloc_v2" || ce.Name != "CUDA_ERROR_OUT_OF_MEMORY") {
		t.Errorf("error %+v, want the call and the code's name", ce)
	}
	d.FailCall("cuMemAlloc_v2", 0)
	if _, err := d.MemAlloc(16); err != nil {
		t.Errorf("after clearing the fault: %v", err)
	}
	// A kernel name fails that kernel's launches only.
	d.FailCall(gpuprobe.KernelFMA, 719)
	wantCode(t, "failed kernel", launch(), 719)
	if err := d.LaunchKernel(f.fn[gpuprobe.KernelNoop], gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, 0); err != nil {
		t.Errorf("another kernel: %v", err)
	}
	d.FailCall(gpuprobe.KernelFMA, 0)
	d.FailCall("cuLaunchKernel", 999)
	wantCode(t, "every launch", launch(), 999)
}

func TestHangCall(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testDevice())
	d := f.d
	release := d.HangCall("cuCtxSynchronize")
	done := make(chan error)
	go func() { done <- d.CtxSynchronize() }()
	// The rest of the driver answers while the call hangs.
	if n, err := d.DeviceCount(); n != 1 || err != nil {
		t.Errorf("DeviceCount during a hang: %d, %v", n, err)
	}
	_ = d.Now()
	select {
	case err := <-done:
		t.Fatalf("hung call returned %v before release", err)
	default:
	}
	release()
	if err := <-done; err != nil {
		t.Errorf("released call: %v", err)
	}
	release() // twice is harmless
	if err := d.CtxSynchronize(); err != nil {
		t.Errorf("after release: %v", err)
	}
}

// stolenRecords decodes simulateStolen's output per block.
func stolenRecords(raw []byte, blocks, maxGaps int) [][]uint64 {
	bb := int(gpuprobe.StolenBlockBytes(uint64(maxGaps)))
	var out [][]uint64
	for b := range blocks {
		var words []uint64
		for i := 0; i < bb/8; i++ {
			words = append(words, binary.LittleEndian.Uint64(raw[b*bb+8*i:]))
		}
		out = append(out, words)
	}
	return out
}

func TestSimulateStolen(t *testing.T) {
	t.Parallel()
	const window = 100 * time.Millisecond
	seq := func() func() float64 { // a fixed "random" sequence
		x := 0.0
		return func() float64 { x = math.Mod(x+0.37, 1); return x }
	}
	for _, tc := range []struct {
		name              string
		share             float64
		slice, res, thr   time.Duration
		maxGaps           int
		wantRatio         float64
		wantGaps, gapsTol float64
		wantGapLen        time.Duration
	}{
		{"alone", 0, 0, 32, 10 * time.Microsecond, 16, 0, 0, 0, 0},
		{"half", 0.5, 2 * time.Millisecond, time.Microsecond, 10 * time.Microsecond, 64, 0.5, 25, 1, 2 * time.Millisecond},
		{"quarter in 1ms slices", 0.25, time.Millisecond, 32, 10 * time.Microsecond, 64, 0.25, 25, 1, time.Millisecond},
		{"slices under the threshold", 0.5, 5 * time.Microsecond, 32, 10 * time.Microsecond, 8, 0, 0, 0, 0},
		// Every 20 µs step is over the 10 µs threshold.
		{"coarse timer", 0, 0, 20 * time.Microsecond, 10 * time.Microsecond, 8, 1, 5000, 0, 20 * time.Microsecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const blocks = 8
			raw, end := simulateStolen(stolenRun{
				start: base, window: window, threshold: tc.thr, resolution: tc.res, maxGaps: tc.maxGaps, blocks: blocks,
				neighbour: func(time.Time) (float64, time.Duration) { return tc.share, tc.slice },
				rand:      seq(),
			})
			recs := stolenRecords(raw, blocks, tc.maxGaps)
			var lastEnd uint64
			for b, r := range recs {
				first, last, count, sum, minStep, reads := r[0], r[1], r[2], r[3], r[4], r[5]
				w := last - first
				if w < uint64(window) || w > uint64(window)+uint64(tc.slice)+uint64(tc.res) {
					t.Errorf("block %d: window %d", b, w)
				}
				if first%uint64(tc.res) != 0 || last%uint64(tc.res) != 0 || minStep != uint64(tc.res) || reads < 1000 {
					t.Errorf("block %d: first %d last %d min step %d reads %d, want readings on a %s timer", b, first, last, minStep, reads, tc.res)
				}
				if ratio := float64(sum) / float64(w); math.Abs(ratio-tc.wantRatio) > 0.03 {
					t.Errorf("block %d: ratio %.4f, want %.2f", b, ratio, tc.wantRatio)
				}
				if math.Abs(float64(count)-tc.wantGaps) > tc.gapsTol {
					t.Errorf("block %d: %d gaps, want %.0f", b, count, tc.wantGaps)
				}
				if b > 0 && count != recs[0][2] {
					t.Errorf("block %d saw %d gaps, block 0 %d: time-slicing stops every block", b, count, recs[0][2])
				}
				kept := min(int(count), tc.maxGaps)
				var keptSum uint64
				for i := range kept {
					start, length := r[6+2*i], r[7+2*i]
					if start < first || start+length > last || time.Duration(length) <= tc.thr {
						t.Errorf("block %d gap %d: %d ns at %d, outside [%d,%d] or under the threshold", b, i, length, start, first, last)
					}
					if math.Abs(float64(length)-float64(tc.wantGapLen)) > 0.03*float64(tc.wantGapLen)+float64(tc.res) {
						t.Errorf("block %d gap %d: %s, want %s", b, i, time.Duration(length), tc.wantGapLen)
					}
					keptSum += length
				}
				if int(count) <= tc.maxGaps && keptSum != sum {
					t.Errorf("block %d: kept gaps sum to %d, header %d", b, keptSum, sum)
				}
				lastEnd = max(lastEnd, last)
			}
			if end.UnixNano() < int64(lastEnd) || end.Sub(base) > window+time.Duration(tc.slice)+time.Microsecond*2 {
				t.Errorf("kernel end %s after start, last reading %d", end.Sub(base), lastEnd)
			}
		})
	}
}

// TestStolenStartsInSlice: a block launched while the neighbour holds the
// GPU starts when the slice ends; its first reading is after it.
func TestStolenStartsInSlice(t *testing.T) {
	t.Parallel()
	gaps := []interval{{base.UnixNano() - 1000, base.UnixNano() + 5000}}
	rec, end := stolenBlock(stolenRun{window: time.Millisecond, threshold: 10 * time.Microsecond, resolution: 100, maxGaps: 2}, gaps, base.UnixNano())
	if int64(rec[0]) != base.UnixNano()+5000 || rec[2] != 0 || end != base.UnixNano()+5000+int64(time.Millisecond) {
		t.Errorf("record %v end %d", rec[:6], end)
	}
}

// TestEventWaitSpinsUnlessBlocking: as the CUDA driver API documents,
// cuEventSynchronize busy-waits on an event created without
// CU_EVENT_BLOCKING_SYNC (whatever the context's flag) and blocks on one
// created with it: the wait costs the host a core for its length in the
// first case (SpinTime) and nothing in the second.
func TestEventWaitSpinsUnlessBlocking(t *testing.T) {
	t.Parallel()
	// One FMA launch of 4 blocks x 256 threads x 1000 iterations takes
	// 16.384 µs (TestClockAndStream), started 10 µs after the launch, of
	// which the host paid 2.5 µs: the wait is 10 - 2.5 + 16.384 µs.
	wait := 10*time.Microsecond - 10*time.Microsecond/4 + 16384*time.Nanosecond
	for _, tc := range []struct {
		name  string
		flags uint32
		spin  time.Duration
	}{
		{"default", gpuprobe.EventDefault, wait},
		{"disable timing", gpuprobe.EventDisableTiming, wait},
		{"blocking sync", gpuprobe.EventBlockingSync, 0},
		{"blocking sync, no timing", gpuprobe.EventBlockingSync | gpuprobe.EventDisableTiming, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, testDevice())
			d := f.d
			out := f.alloc(4096)
			end, err := d.EventCreate(tc.flags)
			f.must(err)
			f.must(d.LaunchKernel(f.fn[gpuprobe.KernelFMA], gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(out), 1000))
			f.must(d.EventRecord(end))
			f.must(d.EventSynchronize(end))
			if got := d.SpinTime(); got < tc.spin-time.Nanosecond-tc.spin/100 || got > tc.spin+tc.spin/100 {
				t.Errorf("SpinTime = %s, want %s", got, tc.spin)
			}
			// Waiting on the context (CU_CTX_SCHED_BLOCKING_SYNC) blocks.
			before := d.SpinTime()
			f.must(d.LaunchKernel(f.fn[gpuprobe.KernelFMA], gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(out), 1000))
			f.must(d.CtxSynchronize())
			if got := d.SpinTime(); got != before {
				t.Errorf("SpinTime after cuCtxSynchronize = %s, want %s (unchanged)", got, before)
			}
			start, err := d.EventCreate(tc.flags)
			f.must(err)
			f.must(d.EventRecord(start))
			f.must(d.EventRecord(end))
			f.must(d.EventSynchronize(end))
			_, err = d.EventElapsed(start, end)
			if tc.flags&gpuprobe.EventDisableTiming != 0 {
				wantCode(t, "elapsed time between events without timing", err, errInvalidHandle)
			} else {
				f.must(err)
			}
		})
	}
	f := newFixture(t, testDevice())
	_, err := f.d.EventCreate(0x4) // CU_EVENT_INTERPROCESS needs DISABLE_TIMING; not one the probe uses
	wantCode(t, "an unknown event flag", err, errInvalidValue)
}

// TestKernelSpans: the device's Kernel hook hears of each kernel's run on
// the stream, from its start (a launch latency after the call, or when the
// queued work ends) to its end, stretched by a neighbour's share; an empty
// kernel takes no time and is not reported.
func TestKernelSpans(t *testing.T) {
	t.Parallel()
	type span struct{ from, to time.Time }
	var mu sync.Mutex
	var spans []span
	dev := testDevice()
	dev.Kernel = func(from, to time.Time) {
		mu.Lock()
		defer mu.Unlock()
		spans = append(spans, span{from, to})
	}
	dev.Neighbour = func(time.Time) (float64, time.Duration) { return 0.5, time.Millisecond }
	f := newFixture(t, dev)
	d := f.d
	out := f.alloc(4096)
	fma := func() {
		f.must(d.LaunchKernel(f.fn[gpuprobe.KernelFMA], gpuprobe.Dim3{X: 4, Y: 1, Z: 1}, gpuprobe.Dim3{X: 256, Y: 1, Z: 1}, 0, uint64(out), 1000))
	}
	// 16.384 µs of work (TestClockAndStream) at half the GPU.
	run := 2 * 16384 * time.Nanosecond
	t0 := d.Now()
	fma()
	fma()
	f.must(d.LaunchKernel(f.fn[gpuprobe.KernelNoop], gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, gpuprobe.Dim3{X: 1, Y: 1, Z: 1}, 0))
	f.must(d.CtxSynchronize())
	end := d.Now()
	mu.Lock()
	defer mu.Unlock()
	if len(spans) != 2 {
		t.Fatalf("%d kernel spans %v; want the two FMA runs (the empty kernel takes no time)", len(spans), spans)
	}
	near(t, "first kernel's start", spans[0].from.Sub(t0), 10*time.Microsecond, 0.01)
	near(t, "first kernel's run", spans[0].to.Sub(spans[0].from), run, 0.01)
	if !spans[1].from.Equal(spans[0].to) {
		t.Errorf("second kernel starts at %s; want when the first ends, %s", spans[1].from, spans[0].to)
	}
	near(t, "second kernel's run", spans[1].to.Sub(spans[1].from), run, 0.01)
	if spans[1].to.After(end) {
		t.Errorf("the last kernel ends at %s, after the synchronize returned at %s", spans[1].to, end)
	}
}
