package gpuprobe

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

func TestFormatUUID(t *testing.T) {
	tests := []struct {
		prefix string
		in     [16]byte
		want   string
	}{
		{"GPU", [16]byte{0x2b, 0x6c, 0x1a, 0x9e, 0x5f, 0x3d, 0x47, 0x01, 0x8a, 0xbc, 0xde, 0xf0, 0x12, 0x34, 0x56, 0x78},
			"GPU-2b6c1a9e-5f3d-4701-8abc-def012345678"},
		{"MIG", [16]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15},
			"MIG-00010203-0405-0607-0809-0a0b0c0d0e0f"},
		{"GPU", [16]byte{}, "GPU-00000000-0000-0000-0000-000000000000"},
		{"GPU", [16]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
			"GPU-ffffffff-ffff-ffff-ffff-ffffffffffff"},
	}
	for _, tc := range tests {
		if got := formatUUID(tc.prefix, tc.in); got != tc.want {
			t.Errorf("formatUUID(%s, % x) = %s, want %s", tc.prefix, tc.in, got, tc.want)
		}
	}
}

func TestIsMIGDeviceName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"NVIDIA A100-SXM4-40GB MIG 1g.5gb", true},
		{"NVIDIA H100 80GB HBM3 MIG 3g.40gb", true},
		{"NVIDIA H100 80GB HBM3", false},
		{"NVIDIA H200", false},
		{"MIGHTY GPU", false},
	}
	for _, tc := range tests {
		if got := isMIGDeviceName(tc.name); got != tc.want {
			t.Errorf("isMIGDeviceName(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCUDAErrorFormatting(t *testing.T) {
	tests := []struct {
		call      string
		code      int
		name, msg string
		want      string
	}{
		{"cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory",
			"cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory"},
		{"cuInit", 100, "CUDA_ERROR_NO_DEVICE", " no CUDA-capable device is detected\n",
			"cuInit: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"},
		{"cuCtxSynchronize", 4242, "", "", "cuCtxSynchronize: CUresult 4242 (4242)"},
		{"cuModuleLoadDataEx", 218, "CUDA_ERROR_INVALID_PTX", "ptxas application ptx input, line 7; error   : Unknown symbol 'x'",
			"cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218): ptxas application ptx input, line 7; error   : Unknown symbol 'x'"},
	}
	for _, tc := range tests {
		err := newCUDAError(tc.call, tc.code, tc.name, tc.msg)
		if got := err.Error(); got != tc.want {
			t.Errorf("newCUDAError(%s, %d).Error() = %q, want %q", tc.call, tc.code, got, tc.want)
		}
		var ce *CUDAError
		if !errors.As(error(err), &ce) || ce.Code != tc.code || ce.Call != tc.call {
			t.Errorf("newCUDAError(%s, %d) = %+v", tc.call, tc.code, ce)
		}
	}
}

func TestJITLog(t *testing.T) {
	tests := []struct {
		buf  string
		n    uintptr
		want string
	}{
		{"error : bad\x00\x00\x00", 12, "error : bad"},
		{"line 1\nline 2\n\x00junk", 100, "line 1\nline 2"}, // count past the buffer
		{"abcdef", 3, "abc"},
		{"\x00\x00", 0, ""},
	}
	for _, tc := range tests {
		if got := jitLog([]byte(tc.buf), tc.n); got != tc.want {
			t.Errorf("jitLog(%q, %d) = %q, want %q", tc.buf, tc.n, got, tc.want)
		}
	}
}

func TestGoString(t *testing.T) {
	tests := []struct {
		in    string
		limit int
		want  string
	}{
		{"CUDA_ERROR_NO_DEVICE\x00trailing", 256, "CUDA_ERROR_NO_DEVICE"},
		{"abc\x00", 2, "ab"},
		{"\x00", 10, ""},
	}
	for _, tc := range tests {
		b := []byte(tc.in)
		if got := goString(&b[0], tc.limit); got != tc.want {
			t.Errorf("goString(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
	if got := goString(nil, 10); got != "" {
		t.Errorf("goString(nil) = %q", got)
	}
}

func TestMsToDuration(t *testing.T) {
	tests := []struct {
		ms   float32
		want time.Duration
	}{
		{0, 0},
		{1.5, 1500 * time.Microsecond},
		{0.0005, 500 * time.Nanosecond},
		{250, 250 * time.Millisecond},
	}
	for _, tc := range tests {
		if got := msToDuration(tc.ms); got != tc.want {
			t.Errorf("msToDuration(%v) = %v, want %v", tc.ms, got, tc.want)
		}
	}
}

func TestUnopenedCUDAReturnsErrors(t *testing.T) {
	var nilCUDA *CUDA
	for _, c := range []*CUDA{nilCUDA, {}} {
		if err := c.Init(); err == nil || !strings.Contains(err.Error(), "cuInit: gpuprobe: CUDA driver not opened") {
			t.Errorf("Init on an unopened CUDA = %v", err)
		}
		if _, err := c.MemAlloc(1); err == nil {
			t.Error("MemAlloc on an unopened CUDA succeeded")
		}
		if _, err := c.DeviceUUID(0); err == nil || !strings.HasPrefix(err.Error(), "cuDeviceGetUuid_v2:") {
			t.Errorf("DeviceUUID on an unopened CUDA = %v", err)
		}
		if err := c.EventDestroy(1); err == nil || !strings.HasPrefix(err.Error(), "cuEventDestroy_v2:") {
			t.Errorf("EventDestroy on an unopened CUDA = %v", err)
		}
		if err := c.Close(); err == nil {
			t.Error("Close on an unopened CUDA succeeded")
		}
	}
}

// fakeLib stands in for libcuda's C side: Go functions with the C
// signatures, so that the Go half of the binding (argument passing, error
// building, JIT log, pinned-memory book-keeping, Close) is tested without
// the library. Codes it does not name make cuGetErrorName fail.
type fakeLib struct {
	mu      sync.Mutex
	calls   []string
	closes  int
	strings map[string][]byte // NUL-terminated, kept alive here
	// ctxFlags is the flags argument of the last cuCtxCreate_v2.
	ctxFlags uint32
}

var fakeErrors = map[int32][2]string{
	1:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	2:   {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	218: {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	500: {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
}

func (f *fakeLib) record(call string) {
	f.mu.Lock()
	f.calls = append(f.calls, call)
	f.mu.Unlock()
}

func (f *fakeLib) called() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

func (f *fakeLib) cstr(s string) *byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.strings == nil {
		f.strings = map[string][]byte{}
	}
	b, ok := f.strings[s]
	if !ok {
		b = cString(s)
		f.strings[s] = b
	}
	return &b[0]
}

// newFakeCUDA returns a CUDA bound to f: every entry point records its call
// and succeeds; tests replace the ones they exercise.
func newFakeCUDA(f *fakeLib) *CUDA {
	c := &CUDA{path: "fake", lib: 1, uuidCall: "cuDeviceGetUuid_v2", eventDestroyCall: "cuEventDestroy_v2"}
	c.dlclose = func(uintptr) error { f.mu.Lock(); f.closes++; f.mu.Unlock(); return nil }
	ok := func(name string) int32 { f.record(name); return 0 }
	c.fn = cudaFuncs{
		cuInit:             func(uint32) int32 { return ok("cuInit") },
		cuDriverGetVersion: func(v *int32) int32 { *v = 12080; return ok("cuDriverGetVersion") },
		cuDeviceGet:        func(dev *int32, ordinal int32) int32 { *dev = ordinal + 10; return ok("cuDeviceGet") },
		cuDeviceGetCount:   func(n *int32) int32 { *n = 1; return ok("cuDeviceGetCount") },
		cuDeviceGetName: func(name *byte, size int32, dev int32) int32 {
			copy(unsafe.Slice(name, size), cString("NVIDIA H100 80GB HBM3"))
			return ok("cuDeviceGetName")
		},
		cuDeviceGetUuid:      func(u *[16]byte, dev int32) int32 { u[15] = byte(dev); return ok("cuDeviceGetUuid") },
		cuDeviceGetAttribute: func(v *int32, attr, dev int32) int32 { *v = attr*1000 + dev; return ok("cuDeviceGetAttribute") },
		cuDeviceTotalMem:     func(n *uint64, dev int32) int32 { *n = 80 << 30; return ok("cuDeviceTotalMem_v2") },
		cuCtxCreate: func(ctx *uintptr, flags uint32, dev int32) int32 {
			*ctx = 0xc0
			f.mu.Lock()
			f.ctxFlags = flags
			f.mu.Unlock()
			return ok("cuCtxCreate_v2")
		},
		cuCtxDestroy:     func(uintptr) int32 { return ok("cuCtxDestroy_v2") },
		cuCtxSynchronize: func() int32 { return ok("cuCtxSynchronize") },
		cuMemGetInfo:     func(free, total *uint64) int32 { *free, *total = 70<<30, 80<<30; return ok("cuMemGetInfo_v2") },
		cuMemAlloc:       func(p *uint64, n uint64) int32 { *p = 0x7000_0000; return ok("cuMemAlloc_v2") },
		cuMemFree:        func(uint64) int32 { return ok("cuMemFree_v2") },
		cuMemsetD8:       func(uint64, uint8, uint64) int32 { return ok("cuMemsetD8_v2") },
		cuMemAllocHost:   func(p *unsafe.Pointer, n uint64) int32 { return ok("cuMemAllocHost_v2") },
		cuMemFreeHost:    func(unsafe.Pointer) int32 { return ok("cuMemFreeHost") },
		cuMemcpyHtoD:     func(uint64, unsafe.Pointer, uint64) int32 { return ok("cuMemcpyHtoD_v2") },
		cuMemcpyDtoH:     func(unsafe.Pointer, uint64, uint64) int32 { return ok("cuMemcpyDtoH_v2") },
		cuModuleLoadDataEx: func(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32 {
			*m = 0x30
			return ok("cuModuleLoadDataEx")
		},
		cuModuleUnload:      func(uintptr) int32 { return ok("cuModuleUnload") },
		cuModuleGetFunction: func(fn *uintptr, m uintptr, name *byte) int32 { *fn = 0xf0; return ok("cuModuleGetFunction") },
		cuLaunchKernel: func(f uintptr, gx, gy, gz, bx, by, bz, shm uint32, stream uintptr, params, extra *unsafe.Pointer) int32 {
			return ok("cuLaunchKernel")
		},
		cuEventCreate:      func(ev *uintptr, flags uint32) int32 { *ev = 0xe0; return ok("cuEventCreate") },
		cuEventRecord:      func(uintptr, uintptr) int32 { return ok("cuEventRecord") },
		cuEventSynchronize: func(uintptr) int32 { return ok("cuEventSynchronize") },
		cuEventElapsedTime: func(ms *float32, a, b uintptr) int32 { *ms = 1.5; return ok("cuEventElapsedTime") },
		cuEventDestroy:     func(uintptr) int32 { return ok("cuEventDestroy_v2") },
		cuGetErrorName: func(code int32, s **byte) int32 {
			e, known := fakeErrors[code]
			if !known {
				return 1
			}
			*s = f.cstr(e[0])
			return 0
		},
		cuGetErrorString: func(code int32, s **byte) int32 {
			e, known := fakeErrors[code]
			if !known {
				return 1
			}
			*s = f.cstr(e[1])
			return 0
		},
	}
	return c
}

func TestCUDAFailedCallsAreCUDAErrors(t *testing.T) {
	tests := []struct {
		code     int32
		call     string
		run      func(c *CUDA) error
		name     string
		msg      string
		noDriver bool // the driver is not called (bad argument caught in Go)
	}{
		{2, "cuMemAlloc_v2", func(c *CUDA) error { _, err := c.MemAlloc(1 << 40); return err },
			"CUDA_ERROR_OUT_OF_MEMORY", "out of memory", false},
		{100, "cuInit", func(c *CUDA) error { return c.Init() }, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected", false},
		{4242, "cuCtxSynchronize", func(c *CUDA) error { return c.CtxSynchronize() }, "CUresult 4242", "", false},
		{500, "cuModuleGetFunction", func(c *CUDA) error { _, err := c.ModuleGetFunction(0x30, "gpulens_nope"); return err },
			"CUDA_ERROR_NOT_FOUND", "named symbol not found (kernel gpulens_nope)", false},
		{101, "cuDeviceGet", func(c *CUDA) error { _, err := c.DeviceName(-1); return err },
			"CUDA_ERROR_INVALID_DEVICE", "device ordinal -1 out of range", true},
	}
	for _, tc := range tests {
		t.Run(tc.call, func(t *testing.T) {
			f := &fakeLib{}
			c := newFakeCUDA(f)
			fail := func(string) int32 { return tc.code }
			switch tc.call {
			case "cuMemAlloc_v2":
				c.fn.cuMemAlloc = func(*uint64, uint64) int32 { return fail(tc.call) }
			case "cuInit":
				c.fn.cuInit = func(uint32) int32 { return fail(tc.call) }
			case "cuCtxSynchronize":
				c.fn.cuCtxSynchronize = func() int32 { return fail(tc.call) }
			case "cuModuleGetFunction":
				c.fn.cuModuleGetFunction = func(fn *uintptr, m uintptr, name *byte) int32 {
					if got := goString(name, 64); got != "gpulens_nope" {
						t.Errorf("kernel name passed = %q", got)
					}
					return fail(tc.call)
				}
			}
			err := tc.run(c)
			var ce *CUDAError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T) is not a *CUDAError", err, err)
			}
			want := CUDAError{Call: tc.call, Code: int(tc.code), Name: tc.name, Msg: tc.msg}
			if *ce != want {
				t.Errorf("error = %+v, want %+v", *ce, want)
			}
			if tc.noDriver && len(f.called()) != 0 {
				t.Errorf("driver called: %v", f.called())
			}
		})
	}
}

func TestCUDADeviceQueries(t *testing.T) {
	f := &fakeLib{}
	c := newFakeCUDA(f)
	if v, err := c.DriverVersion(); err != nil || v != 12080 {
		t.Errorf("DriverVersion = %d, %v", v, err)
	}
	if n, err := c.DeviceCount(); err != nil || n != 1 {
		t.Errorf("DeviceCount = %d, %v", n, err)
	}
	if name, err := c.DeviceName(0); err != nil || name != "NVIDIA H100 80GB HBM3" {
		t.Errorf("DeviceName = %q, %v", name, err)
	}
	// ordinal 2 is CUdevice 12 in the fake: the attribute call must get
	// the CUdevice cuDeviceGet returned, not the ordinal.
	if v, err := c.DeviceAttribute(2, AttrMultiprocessorCount); err != nil || v != 16*1000+12 {
		t.Errorf("DeviceAttribute(2, SMs) = %d, %v; want 16012", v, err)
	}
	if n, err := c.DeviceTotalMem(0); err != nil || n != 80<<30 {
		t.Errorf("DeviceTotalMem = %d, %v", n, err)
	}
	free, total, err := c.MemGetInfo()
	if err != nil || free != 70<<30 || total != 80<<30 {
		t.Errorf("MemGetInfo = %d, %d, %v", free, total, err)
	}
	if ctx, err := c.CtxCreate(0); err != nil || ctx != 0xc0 {
		t.Errorf("CtxCreate = %#x, %v", ctx, err)
	}
	// CU_CTX_SCHED_BLOCKING_SYNC: event and context waits sleep, never spin.
	if f.ctxFlags != 0x04 {
		t.Errorf("cuCtxCreate flags = %#x, want CU_CTX_SCHED_BLOCKING_SYNC (0x04)", f.ctxFlags)
	}
	if d, err := c.EventElapsed(1, 2); err != nil || d != 1500*time.Microsecond {
		t.Errorf("EventElapsed = %v, %v", d, err)
	}
}

func TestCUDADeviceUUID(t *testing.T) {
	tests := []struct {
		symbol, name string
		ordinal      int
		want         string
	}{
		{"cuDeviceGetUuid_v2", "NVIDIA H100 80GB HBM3", 0, "GPU-00000000-0000-0000-0000-00000000000a"},
		{"cuDeviceGetUuid_v2", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 1, "MIG-00000000-0000-0000-0000-00000000000b"},
		// The old symbol returns the parent GPU's UUID even for a MIG device.
		{"cuDeviceGetUuid", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", 5, "GPU-00000000-0000-0000-0000-00000000000f"},
	}
	for _, tc := range tests {
		f := &fakeLib{}
		c := newFakeCUDA(f)
		c.uuidCall = tc.symbol
		c.fn.cuDeviceGetName = func(name *byte, size int32, dev int32) int32 {
			copy(unsafe.Slice(name, size), cString(tc.name))
			return 0
		}
		got, err := c.DeviceUUID(tc.ordinal)
		if err != nil || got != tc.want {
			t.Errorf("%s %q: DeviceUUID(%d) = %q, %v; want %q", tc.symbol, tc.name, tc.ordinal, got, err, tc.want)
		}
	}
}

func TestCUDAModuleLoadDataJITLog(t *testing.T) {
	const ptx = ".version 7.0\n.target sm_52\n.address_size 64\nbogus;\n"
	const log = "ptxas application ptx input, line 4; error   : Unknown symbol 'bogus'\nptxas fatal   : Ptx assembly aborted due to errors"
	f := &fakeLib{}
	c := newFakeCUDA(f)
	c.fn.cuModuleLoadDataEx = func(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32 {
		if got := goString(image, len(ptx)+1); got != ptx {
			t.Errorf("image = %q, want the PTX, NUL-terminated", got)
		}
		if n != 2 {
			t.Fatalf("numOptions = %d, want 2", n)
		}
		o := unsafe.Slice(opts, n)
		v := unsafe.Slice(vals, n)
		if o[0] != cuJitErrorLogBuffer || o[1] != cuJitErrorLogBufferSizeBytes {
			t.Errorf("options = %v, want [5 6]", o)
		}
		if v[1] != jitLogBytes {
			t.Errorf("log buffer size = %d, want %d", v[1], jitLogBytes)
		}
		// Like the JIT: write the log into the buffer and its length back.
		buf := unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&v[0]))), v[1])
		copy(buf, cString(log))
		v[1] = uintptr(len(log) + 1)
		return 218
	}
	_, err := c.ModuleLoadData(ptx)
	var ce *CUDAError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v is not a *CUDAError", err)
	}
	want := CUDAError{Call: "cuModuleLoadDataEx", Code: 218, Name: "CUDA_ERROR_INVALID_PTX", Msg: log}
	if *ce != want {
		t.Errorf("error = %+v\nwant %+v", *ce, want)
	}

	// A failure with an empty log falls back to cuGetErrorString.
	c.fn.cuModuleLoadDataEx = func(m *uintptr, image *byte, n uint32, opts *int32, vals *uintptr) int32 {
		unsafe.Slice(vals, n)[1] = 0
		return 2
	}
	_, err = c.ModuleLoadData(ptx)
	if !errors.As(err, &ce) || ce.Msg != "out of memory" {
		t.Errorf("error with an empty JIT log = %v, want cuGetErrorString's text", err)
	}
}

func TestCUDALaunchKernelPassesArguments(t *testing.T) {
	tests := []struct {
		name string
		args []uint64
	}{
		{"noop", nil},
		{"copy", []uint64{0x7000_0000, 0x7100_0000, 1 << 20}},
		{"stolen", []uint64{0x7200_0000, 100_000_000, 20_000, 256}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeLib{}
			c := newFakeCUDA(f)
			var got []uint64
			var dims [7]uint32
			var stream uintptr = 99
			var params, extra *unsafe.Pointer
			c.fn.cuLaunchKernel = func(fn uintptr, gx, gy, gz, bx, by, bz, shm uint32, s uintptr, p, e *unsafe.Pointer) int32 {
				dims = [7]uint32{gx, gy, gz, bx, by, bz, shm}
				stream, params, extra = s, p, e
				if p != nil {
					for _, ptr := range unsafe.Slice(p, len(tc.args)) {
						got = append(got, *(*uint64)(ptr))
					}
				}
				if fn != 0xf0 {
					t.Errorf("function = %#x", fn)
				}
				return 0
			}
			err := c.LaunchKernel(0xf0, Dim3{132, 2, 1}, Dim3{256, 1, 1}, 48, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			if dims != [7]uint32{132, 2, 1, 256, 1, 1, 48} {
				t.Errorf("grid, block, shared = %v", dims)
			}
			if stream != 0 || extra != nil {
				t.Errorf("stream = %d, extra = %v; want the default stream and no extra", stream, extra)
			}
			if len(tc.args) == 0 && params != nil {
				t.Errorf("kernelParams = %v for a kernel without arguments, want NULL", params)
			}
			if len(got) != len(tc.args) {
				t.Fatalf("arguments = %v, want %v", got, tc.args)
			}
			for i := range got {
				if got[i] != tc.args[i] {
					t.Errorf("argument %d = %#x, want %#x", i, got[i], tc.args[i])
				}
			}
		})
	}
}

func TestCUDAMemcpyAndHostMemory(t *testing.T) {
	f := &fakeLib{}
	c := newFakeCUDA(f)
	device := map[uint64][]byte{} // fake device memory by address
	c.fn.cuMemcpyHtoD = func(dst uint64, src unsafe.Pointer, n uint64) int32 {
		device[dst] = append([]byte(nil), unsafe.Slice((*byte)(src), n)...)
		return 0
	}
	c.fn.cuMemcpyDtoH = func(dst unsafe.Pointer, src uint64, n uint64) int32 {
		copy(unsafe.Slice((*byte)(dst), n), device[src])
		return 0
	}
	hostBacking := make([]byte, 4096)
	var freed []unsafe.Pointer
	c.fn.cuMemAllocHost = func(p *unsafe.Pointer, n uint64) int32 {
		*p = unsafe.Pointer(&hostBacking[0])
		return 0
	}
	c.fn.cuMemFreeHost = func(p unsafe.Pointer) int32 { freed = append(freed, p); return 0 }

	h, err := c.MemAllocHost(4096)
	if err != nil || len(h) != 4096 || &h[0] != &hostBacking[0] {
		t.Fatalf("MemAllocHost = len %d, %v; want a 4096-byte slice over the driver's memory", len(h), err)
	}
	for i := range h {
		h[i] = byte(i * 7)
	}
	if err := c.MemcpyHtoD(0x7000_0000, h); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 4096)
	if err := c.MemcpyDtoH(back, 0x7000_0000); err != nil {
		t.Fatal(err)
	}
	for i := range back {
		if back[i] != byte(i*7) {
			t.Fatalf("byte %d = %d after the round trip, want %d", i, back[i], byte(i*7))
		}
	}
	if err := c.MemFreeHost(make([]byte, 16)); err == nil {
		t.Error("MemFreeHost of Go memory succeeded")
	}
	if err := c.MemFreeHost(h[1:]); err == nil {
		t.Error("MemFreeHost of a sub-slice succeeded")
	}
	if len(freed) != 0 {
		t.Fatalf("cuMemFreeHost called for memory it does not own: %v", freed)
	}
	if err := c.MemFreeHost(h); err != nil {
		t.Fatal(err)
	}
	if len(freed) != 1 || freed[0] != unsafe.Pointer(&hostBacking[0]) {
		t.Errorf("cuMemFreeHost got %v, want the allocation", freed)
	}
	if err := c.MemFreeHost(h); err == nil || len(freed) != 1 {
		t.Errorf("second MemFreeHost = %v (driver calls %d), want an error and no driver call", err, len(freed))
	}
	if _, err := c.MemAllocHost(0); err == nil {
		t.Error("MemAllocHost(0) succeeded")
	}
}

func TestCUDACloseWaitsForCallsInFlight(t *testing.T) {
	f := &fakeLib{}
	c := newFakeCUDA(f)
	entered, release := make(chan struct{}), make(chan struct{})
	c.fn.cuCtxSynchronize = func() int32 {
		close(entered)
		<-release
		return 0
	}
	done := make(chan error)
	go func() { done <- c.CtxSynchronize() }()
	<-entered
	if err := c.Close(); err != nil {
		t.Fatalf("Close = %v", err)
	}
	f.mu.Lock()
	closes := f.closes
	f.mu.Unlock()
	if closes != 0 {
		t.Fatal("library unloaded while a call was running in it")
	}
	if _, err := c.DeviceCount(); !errors.Is(err, ErrClosed) || !strings.HasPrefix(err.Error(), "cuDeviceGetCount: ") {
		t.Errorf("DeviceCount after Close = %v, want cuDeviceGetCount: ... ErrClosed", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("the call in flight = %v, want its own result", err)
	}
	f.mu.Lock()
	closes = f.closes
	f.mu.Unlock()
	if closes != 1 {
		t.Errorf("library unloaded %d times after the last call, want 1", closes)
	}
	if err := c.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
}

func TestCUDACloseAfterInitKeepsLibraryLoaded(t *testing.T) {
	f := &fakeLib{}
	c := newFakeCUDA(f)
	if err := c.Init(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	calls := len(f.called())
	checks := []struct {
		call string
		run  func() error
	}{
		{"cuInit", c.Init},
		{"cuMemAlloc_v2", func() error { _, err := c.MemAlloc(1); return err }},
		{"cuLaunchKernel", func() error { return c.LaunchKernel(1, Dim3{1, 1, 1}, Dim3{1, 1, 1}, 0, 1) }},
		{"cuModuleLoadDataEx", func() error { _, err := c.ModuleLoadData(ptxBase); return err }},
		{"cuEventDestroy_v2", func() error { return c.EventDestroy(1) }},
	}
	for _, ch := range checks {
		if err := ch.run(); !errors.Is(err, ErrClosed) || !strings.HasPrefix(err.Error(), ch.call+": ") {
			t.Errorf("%s after Close = %v, want %s: ... ErrClosed", ch.call, err, ch.call)
		}
	}
	if n := len(f.called()); n != calls {
		t.Errorf("the driver was called after Close: %v", f.called()[calls:])
	}
	if f.closes != 0 {
		t.Errorf("library unloaded after cuInit (%d dlclose): the driver's threads run in it", f.closes)
	}
}
