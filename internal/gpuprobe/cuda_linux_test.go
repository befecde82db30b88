package gpuprobe

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ebitengine/purego"

	"github.com/gpulens/gpulens/internal/gpuid"
)

func TestOpenMissingLibrary(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "libcuda.so.1")
	if err := os.WriteFile(junk, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{
		filepath.Join(dir, "no-such-dir", "libcuda.so.1"),
		dir,  // a directory
		junk, // not a shared object
	} {
		c, err := Open(path)
		if err == nil {
			c.Close()
			t.Errorf("Open(%s) succeeded", path)
			continue
		}
		if c != nil {
			t.Errorf("Open(%s) returned a CUDA with its error", path)
		}
		if !strings.Contains(err.Error(), "libcuda") || !strings.Contains(err.Error(), path) {
			t.Errorf("Open(%s) error %q does not name libcuda and the path", path, err)
		}
	}
}

func TestOpenDefaultWithoutDriver(t *testing.T) {
	c, err := Open("")
	if err == nil {
		c.Close()
		t.Skip("libcuda.so.1 is installed on this machine: the no-driver path cannot be tested here")
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Errorf("Open(\"\") error %q does not name libcuda.so.1", err)
	}
}

// TestOpenNotLibcuda loads a library that exists but is not libcuda: the
// missing symbol is an error naming it, not purego's panic.
func TestOpenNotLibcuda(t *testing.T) {
	c, err := Open("libm.so.6")
	if err == nil {
		c.Close()
		t.Fatal("Open(libm.so.6) succeeded")
	}
	if strings.Contains(err.Error(), "loading the CUDA driver library") {
		t.Skipf("libm.so.6 cannot be loaded here (not glibc?): %v", err)
	}
	if want := "libm.so.6 does not export cuInit"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
}

// allSymbolNames is every name the binding may look up.
func allSymbolNames() []string {
	var names []string
	for _, s := range (&CUDA{}).symbols() {
		names = append(names, s.names...)
	}
	return names
}

// TestBindSymbols binds fake addresses through purego.RegisterFunc: it
// checks every Go signature is one purego accepts, that each cudaFuncs field
// is bound, the _v2/unversioned choices, and that a missing symbol is
// reported by name before anything is registered.
func TestBindSymbols(t *testing.T) {
	all := allSymbolNames()
	without := func(drop ...string) []string {
		return slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(drop, n) })
	}
	tests := []struct {
		name                  string
		exported              []string
		wantUUID, wantDestroy string
		wantErr               string
	}{
		{"535 driver", all, "cuDeviceGetUuid_v2", "cuEventDestroy_v2", ""},
		{"old driver", without("cuDeviceGetUuid_v2", "cuEventDestroy_v2"), "cuDeviceGetUuid", "cuEventDestroy", ""},
		{"no cuMemAlloc_v2", without("cuMemAlloc_v2"), "", "", "fake.so does not export cuMemAlloc_v2:"},
		{"no UUID at all", without("cuDeviceGetUuid_v2", "cuDeviceGetUuid"), "", "",
			"fake.so does not export cuDeviceGetUuid_v2 or cuDeviceGetUuid:"},
		{"nothing", nil, "", "", "fake.so does not export cuInit:"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := &CUDA{path: "fake.so"}
			var looked []string
			lookup := func(name string) (uintptr, error) {
				looked = append(looked, name)
				if i := slices.Index(tc.exported, name); i >= 0 {
					return uintptr(0x10000 + 16*i), nil
				}
				return 0, fmt.Errorf("fake.so: undefined symbol: %s", name)
			}
			registered := 0
			register := func(fn any, addr uintptr) {
				registered++
				purego.RegisterFunc(fn, addr)
			}
			err := c.bind(lookup, register)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("bind error = %v, want %q", err, tc.wantErr)
				}
				if registered != 0 {
					t.Errorf("%d functions registered before the missing symbol was reported", registered)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			v := reflect.ValueOf(c.fn)
			for i := range v.NumField() {
				if v.Field(i).IsNil() {
					t.Errorf("%s not bound", v.Type().Field(i).Name)
				}
			}
			if c.uuidCall != tc.wantUUID || c.eventDestroyCall != tc.wantDestroy {
				t.Errorf("bound %s and %s, want %s and %s", c.uuidCall, c.eventDestroyCall, tc.wantUUID, tc.wantDestroy)
			}
			if registered != v.NumField() {
				t.Errorf("%d functions registered, want %d", registered, v.NumField())
			}
		})
	}
}

// openReal opens the libcuda GPULENS_LIBCUDA names (scripts/check-ptx.sh
// sets it to Debian's libcuda1; on a GPU machine use libcuda.so.1).
func openReal(t *testing.T) *CUDA {
	t.Helper()
	path := os.Getenv("GPULENS_LIBCUDA")
	if path == "" {
		t.Skip("GPULENS_LIBCUDA not set: no real libcuda to test against (make check-ptx provides one)")
	}
	c, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): %v", path, err)
	}
	return c
}

var (
	uuidRE  = regexp.MustCompile(`^(GPU|MIG)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	busIDRE = regexp.MustCompile(`^[0-9A-F]{8}:[0-9A-F]{2}:[0-9A-F]{2}\.0$`)
)

// TestRealLibcuda checks the binding against a real driver library: error
// names and codes, and cuInit either failing with CUDA_ERROR_NO_DEVICE (a
// machine without a GPU) or listing the devices.
func TestRealLibcuda(t *testing.T) {
	c := openReal(t)
	v, err := c.DriverVersion()
	if err != nil || v < 11000 || v%10 != 0 {
		t.Errorf("DriverVersion = %d, %v; want CUDA's encoding of 11.0 or newer (12020 for driver 535)", v, err)
	}
	t.Logf("%s: CUDA driver version %d; %s, %s", os.Getenv("GPULENS_LIBCUDA"), v, c.uuidCall, c.eventDestroyCall)
	if c.uuidCall != "cuDeviceGetUuid_v2" || c.eventDestroyCall != "cuEventDestroy_v2" {
		t.Errorf("bound %s and %s, want the _v2 symbols of a CUDA 11.4+ driver", c.uuidCall, c.eventDestroyCall)
	}
	// The codes driver.go names, as the library names them.
	for code, name := range map[int]string{
		CUDAErrOutOfMemory:   "CUDA_ERROR_OUT_OF_MEMORY",
		CUDAErrNotInitalized: "CUDA_ERROR_NOT_INITIALIZED",
		CUDAErrNoDevice:      "CUDA_ERROR_NO_DEVICE",
		CUDAErrInvalidDevice: "CUDA_ERROR_INVALID_DEVICE",
		CUDAErrInvalidPTX:    "CUDA_ERROR_INVALID_PTX",
		CUDAErrLaunchTimeout: "CUDA_ERROR_LAUNCH_TIMEOUT",
	} {
		e := c.cudaError("test", code, "")
		if e.Name != name || e.Msg == "" {
			t.Errorf("code %d: name %q, message %q; want %s and a message", code, e.Name, e.Msg, name)
		}
	}
	if e := c.cudaError("test", 4242, ""); e.Name != "CUresult 4242" {
		t.Errorf("unknown code named %q", e.Name)
	}

	err = c.Init()
	var ce *CUDAError
	switch {
	case errors.As(err, &ce):
		want := CUDAError{Call: "cuInit", Code: CUDAErrNoDevice, Name: "CUDA_ERROR_NO_DEVICE", Msg: "no CUDA-capable device is detected"}
		if *ce != want {
			t.Fatalf("cuInit = %+v, want %+v (or success on a GPU machine)", *ce, want)
		}
		t.Logf("cuInit: %v", err)
		if _, err := c.DeviceCount(); !errors.As(err, &ce) || ce.Call != "cuDeviceGetCount" || ce.Code == 0 {
			t.Errorf("DeviceCount after a failed cuInit = %v, want a cuDeviceGetCount *CUDAError", err)
		}
		if _, err := c.ModuleLoadData(ptxBase); !errors.As(err, &ce) || ce.Call != "cuModuleLoadDataEx" {
			t.Errorf("ModuleLoadData without a context = %v, want a cuModuleLoadDataEx *CUDAError", err)
		}
	case err != nil:
		t.Fatalf("cuInit: %v (%T), want a *CUDAError", err, err)
	default:
		n, err := c.DeviceCount()
		if err != nil || n < 1 {
			t.Fatalf("DeviceCount = %d, %v after a successful cuInit", n, err)
		}
		for i := range n {
			name, err := c.DeviceName(i)
			if err != nil || name == "" {
				t.Errorf("device %d: name %q, %v", i, name, err)
			}
			uuid, err := c.DeviceUUID(i)
			if err != nil || !uuidRE.MatchString(uuid) {
				t.Errorf("device %d: UUID %q, %v", i, uuid, err)
			}
			var attrs []int
			for _, a := range []Attribute{AttrPCIDomainID, AttrPCIBusID, AttrPCIDeviceID, AttrComputeCapabilityMajor,
				AttrComputeCapabilityMinor, AttrMultiprocessorCount} {
				v, err := c.DeviceAttribute(i, a)
				if err != nil {
					t.Fatalf("device %d: attribute %d: %v", i, a, err)
				}
				attrs = append(attrs, v)
			}
			busID := gpuid.BusID{Domain: uint32(attrs[0]), Bus: uint8(attrs[1]), Device: uint8(attrs[2])}.String()
			if !busIDRE.MatchString(busID) || attrs[3] < 3 || attrs[5] < 1 {
				t.Errorf("device %d: bus id %s, compute capability %d.%d, %d SMs", i, busID, attrs[3], attrs[4], attrs[5])
			}
			mem, err := c.DeviceTotalMem(i)
			if err != nil || mem < 1<<30 {
				t.Errorf("device %d: total memory %d, %v", i, mem, err)
			}
			t.Logf("device %d: %s %s %s cc %d.%d, %d SMs, %d MiB", i, name, uuid, busID, attrs[3], attrs[4], attrs[5], mem>>20)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := c.Init(); !errors.Is(err, ErrClosed) {
		t.Errorf("Init after Close = %v, want ErrClosed", err)
	}
	if _, err := c.DriverVersion(); !errors.Is(err, ErrClosed) {
		t.Errorf("DriverVersion after Close = %v, want ErrClosed", err)
	}
}

// fmaExpected is what gpulens_fma stores for global thread gid.
func fmaExpected(gid int, iters int) float32 {
	a, b := math.Float32frombits(0x3F7FFF58), math.Float32frombits(0x3727C5AC)
	seed := float32(gid) * float32(1.0/(1<<20))
	var sum float32
	for c := range FMAChains {
		x := seed + float32(c+1)
		for range iters {
			x = float32(math.FMA(float64(x), float64(a), float64(b)))
		}
		if c == 0 {
			sum = x
		} else {
			sum += x
		}
	}
	return sum
}

// mmaExpected is what gpulens_mma_* store for every warp: lane 0 holds
// D[0][0], D[0][1], D[8][0], D[8][1] of each chain; with A's elements
// (lane+1)/64 and B's (lane%4+1)/8 by the lane holding them, each grows by
// sum_k A[0][k]*B[k][n] = 4*(1*1+2*2+3*3+4*4)/512 = 0.234375 per
// iteration from c+1: 16 values, 4*(1+2+3+4) + 16*0.234375*iters.
func mmaExpected(iters int) float32 { return 40 + 3.75*float32(iters) }

// TestRealLibcudaKernels runs every kernel on device 0 of a real GPU and
// checks what they compute. It needs GPULENS_LIBCUDA and a GPU.
func TestRealLibcudaKernels(t *testing.T) {
	c := openReal(t)
	defer c.Close()
	if err := c.Init(); err != nil {
		var ce *CUDAError
		if errors.As(err, &ce) && ce.Code == CUDAErrNoDevice {
			t.Skipf("no CUDA device here (%v)", err)
		}
		t.Fatal(err)
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx, err := c.CtxCreate(0)
	must(err)
	defer func() { must(c.CtxDestroy(ctx)) }()
	free, total, err := c.MemGetInfo()
	if err != nil || total == 0 || free > total {
		t.Fatalf("MemGetInfo = %d, %d, %v", free, total, err)
	}
	major, err := c.DeviceAttribute(0, AttrComputeCapabilityMajor)
	must(err)
	sms, err := c.DeviceAttribute(0, AttrMultiprocessorCount)
	must(err)

	base, err := c.ModuleLoadData(ptxBase)
	must(err)
	defer func() { must(c.ModuleUnload(base)) }()
	fn := map[string]Function{}
	for _, name := range []string{KernelNoop, KernelCopy, KernelFMA, KernelStolen} {
		fn[name], err = c.ModuleGetFunction(base, name)
		must(err)
	}
	alloc := func(n uint64) DevicePtr {
		t.Helper()
		p, err := c.MemAlloc(n)
		must(err)
		t.Cleanup(func() { _ = c.MemFree(p) })
		return p
	}
	download := func(p DevicePtr, n int) []byte {
		t.Helper()
		b := make([]byte, n)
		must(c.MemcpyDtoH(b, p))
		return b
	}

	// Launch latency path: noop between events.
	start, err := c.EventCreate(EventBlockingSync)
	must(err)
	end, err := c.EventCreate(EventBlockingSync)
	must(err)
	must(c.EventRecord(start))
	must(c.LaunchKernel(fn[KernelNoop], Dim3{1, 1, 1}, Dim3{32, 1, 1}, 0))
	must(c.EventRecord(end))
	must(c.EventSynchronize(end))
	d, err := c.EventElapsed(start, end)
	if err != nil || d < 0 || d > time.Second {
		t.Errorf("noop kernel took %v, %v", d, err)
	}
	must(c.EventDestroy(start))
	must(c.EventDestroy(end))

	// Copy: pinned host → device, copy kernel, device → Go memory.
	const n16 = 1 << 16
	host, err := c.MemAllocHost(16 * n16)
	must(err)
	for i := range host {
		host[i] = byte(i*31 + i>>8)
	}
	src, dst := alloc(16*n16), alloc(16*n16)
	must(c.MemcpyHtoD(src, host))
	must(c.MemsetD8(dst, 0xab, 16*n16))
	if b := download(dst, 4096); b[0] != 0xab || b[4095] != 0xab {
		t.Errorf("MemsetD8: %#x ... %#x", b[0], b[4095])
	}
	must(c.LaunchKernel(fn[KernelCopy], Dim3{uint32(sms), 1, 1}, Dim3{256, 1, 1}, 0, uint64(dst), uint64(src), n16))
	must(c.CtxSynchronize())
	got := download(dst, 16*n16)
	for i := range got {
		if got[i] != host[i] {
			t.Fatalf("copy kernel: byte %d = %#x, want %#x", i, got[i], host[i])
		}
	}
	must(c.MemFreeHost(host))

	// FMA: every thread's sum of chains, against the host.
	const threads, fmaIters = 2 * 256, 1000
	out := alloc(4 * threads)
	must(c.LaunchKernel(fn[KernelFMA], Dim3{2, 1, 1}, Dim3{256, 1, 1}, 0, uint64(out), fmaIters))
	must(c.CtxSynchronize())
	res := download(out, 4*threads)
	for _, gid := range []int{0, 1, 255, 256, threads - 1} {
		g := math.Float32frombits(binary.LittleEndian.Uint32(res[4*gid:]))
		w := fmaExpected(gid, fmaIters)
		if math.Abs(float64(g-w)) > 1e-5*math.Abs(float64(w)) {
			t.Errorf("fma thread %d = %v, want %v", gid, g, w)
		}
	}

	// Stolen time: one block per SM for 20 ms.
	const window, threshold, maxGaps = 20_000_000, 20_000, 64
	sout := alloc(uint64(sms) * StolenBlockBytes(maxGaps))
	must(c.LaunchKernel(fn[KernelStolen], Dim3{uint32(sms), 1, 1}, Dim3{32, 1, 1}, 0, uint64(sout), window, threshold, maxGaps))
	must(c.CtxSynchronize())
	raw := download(sout, int(uint64(sms)*StolenBlockBytes(maxGaps)))
	for b := range sms {
		w := func(i int) uint64 {
			return binary.LittleEndian.Uint64(raw[int(uint64(b)*StolenBlockBytes(maxGaps))+8*i:])
		}
		first, last, gaps, sum, resolution, reads := w(0), w(1), w(2), w(3), w(4), w(5)
		if first == 0 || last < first+window || last > first+window+uint64(time.Second) || reads < 2 ||
			resolution == 0 || resolution > 1_000_000 || sum > last-first {
			t.Errorf("block %d: first %d last %d (%d ns) gaps %d sum %d resolution %d reads %d", b, first, last, last-first, gaps, sum, resolution, reads)
			continue
		}
		var kept uint64
		for g := range min(gaps, maxGaps) {
			at, length := w(StolenHeaderWords+2*int(g)), w(StolenHeaderWords+2*int(g)+1)
			if length <= threshold || at < first || at+length > last {
				t.Errorf("block %d gap %d: at %d length %d outside [%d, %d] or under the threshold", b, g, at, length, first, last)
			}
			kept += length
		}
		if kept > sum {
			t.Errorf("block %d: kept gaps total %d > sum %d", b, kept, sum)
		}
		if b == 0 {
			t.Logf("stolen block 0: window %d ns, %d reads, timer resolution %d ns, %d gaps, %d ns in gaps", last-first, reads, resolution, gaps, sum)
		}
	}

	// A JIT error carries the JIT's log.
	_, err = c.ModuleLoadData(".version 7.0\n.target sm_52\n.address_size 64\n.visible .entry bad()\n{\n\tbogus.u32 %r1;\n}\n")
	var ce *CUDAError
	if !errors.As(err, &ce) || ce.Call != "cuModuleLoadDataEx" || ce.Code != CUDAErrInvalidPTX || !strings.Contains(ce.Msg, "error") {
		t.Errorf("bad PTX: %v, want CUDA_ERROR_INVALID_PTX with the JIT log", err)
	} else {
		t.Logf("bad PTX: %v", err)
	}
	if _, err := c.ModuleGetFunction(base, "gpulens_nope"); !errors.As(err, &ce) || !strings.Contains(ce.Msg, "gpulens_nope") {
		t.Errorf("missing kernel: %v", err)
	}

	// Tensor kernels (compute capability 8.0+).
	tensor, err := c.ModuleLoadData(ptxTensor)
	if major < 8 {
		if err == nil {
			t.Errorf("the sm_80 tensor module loaded on compute capability %d", major)
		}
		return
	}
	must(err)
	defer func() { must(c.ModuleUnload(tensor)) }()
	const warps, mmaIters = 8, 1000
	for _, name := range []string{KernelMMAF16, KernelMMABF16} {
		f, err := c.ModuleGetFunction(tensor, name)
		must(err)
		mout := alloc(4 * warps)
		must(c.LaunchKernel(f, Dim3{2, 1, 1}, Dim3{128, 1, 1}, 0, uint64(mout), mmaIters))
		must(c.CtxSynchronize())
		r := download(mout, 4*warps)
		for w := range warps {
			if g := math.Float32frombits(binary.LittleEndian.Uint32(r[4*w:])); g != mmaExpected(mmaIters) {
				t.Errorf("%s warp %d = %v, want %v", name, w, g, mmaExpected(mmaIters))
			}
		}
	}
}
