package gpuprobe

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// DefaultLibCUDA is the library Open loads when given "".
const DefaultLibCUDA = "libcuda.so.1"

// ErrClosed is returned (wrapped, with the call's name) by every method of a
// CUDA after Close.
var ErrClosed = errors.New("gpuprobe: CUDA driver library closed")

// CUDA is the real CUDA driver, libcuda bound at run time (Open). It
// implements Driver. Its methods are safe for concurrent use; the ones that
// act on the current context follow Driver's threading rule (the caller
// locks its goroutine to one OS thread from CtxCreate to CtxDestroy).
type CUDA struct {
	path string
	lib  uintptr // dlopen handle
	fn   cudaFuncs

	// Names of the symbols bound where libcuda offers alternatives
	// (errors name the call that failed).
	uuidCall, eventDestroyCall string

	dlclose func(uintptr) error

	closed   atomic.Bool
	inflight atomic.Int64
	initRun  atomic.Bool // cuInit was called: the driver's threads run in the library
	unloaded atomic.Bool

	mu   sync.Mutex
	host map[uintptr]uint64 // page-locked allocations by address: size
}

// cudaFuncs are the libcuda entry points, as purego calls them. CUresult,
// CUdevice and the enums are C ints (int32); size_t and CUdeviceptr are 64
// bits (Open refuses other platforms); handles are pointers (uintptr).
type cudaFuncs struct {
	cuInit               func(flags uint32) int32
	cuDriverGetVersion   func(version *int32) int32
	cuDeviceGet          func(dev *int32, ordinal int32) int32
	cuDeviceGetCount     func(count *int32) int32
	cuDeviceGetName      func(name *byte, size int32, dev int32) int32
	cuDeviceGetUuid      func(uuid *[16]byte, dev int32) int32
	cuDeviceGetAttribute func(value *int32, attr int32, dev int32) int32
	cuDeviceTotalMem     func(bytes *uint64, dev int32) int32

	cuCtxCreate      func(ctx *uintptr, flags uint32, dev int32) int32
	cuCtxDestroy     func(ctx uintptr) int32
	cuCtxSynchronize func() int32

	cuMemGetInfo   func(free, total *uint64) int32
	cuMemAlloc     func(dptr *uint64, bytes uint64) int32
	cuMemFree      func(dptr uint64) int32
	cuMemsetD8     func(dptr uint64, value uint8, n uint64) int32
	cuMemAllocHost func(p *unsafe.Pointer, bytes uint64) int32
	cuMemFreeHost  func(p unsafe.Pointer) int32
	cuMemcpyHtoD   func(dst uint64, src unsafe.Pointer, bytes uint64) int32
	cuMemcpyDtoH   func(dst unsafe.Pointer, src uint64, bytes uint64) int32

	cuModuleLoadDataEx  func(mod *uintptr, image *byte, numOptions uint32, options *int32, optionValues *uintptr) int32
	cuModuleUnload      func(mod uintptr) int32
	cuModuleGetFunction func(fn *uintptr, mod uintptr, name *byte) int32
	cuLaunchKernel      func(f uintptr, gridX, gridY, gridZ, blockX, blockY, blockZ, sharedMemBytes uint32, stream uintptr, kernelParams *unsafe.Pointer, extra *unsafe.Pointer) int32

	cuEventCreate      func(ev *uintptr, flags uint32) int32
	cuEventRecord      func(ev uintptr, stream uintptr) int32
	cuEventSynchronize func(ev uintptr) int32
	cuEventElapsedTime func(ms *float32, start, end uintptr) int32
	cuEventDestroy     func(ev uintptr) int32

	cuGetErrorName   func(code int32, str **byte) int32
	cuGetErrorString func(code int32, str **byte) int32
}

// cudaSymbol binds one entry point: the first of names the library exports.
type cudaSymbol struct {
	names []string
	fn    any // pointer to a cudaFuncs field
	bound *string
}

// symbols lists every entry point Open binds, in libcuda's names.
func (c *CUDA) symbols() []cudaSymbol {
	f := &c.fn
	one := func(name string, fn any) cudaSymbol { return cudaSymbol{names: []string{name}, fn: fn} }
	return []cudaSymbol{
		one("cuInit", &f.cuInit),
		one("cuDriverGetVersion", &f.cuDriverGetVersion),
		one("cuDeviceGet", &f.cuDeviceGet),
		one("cuDeviceGetCount", &f.cuDeviceGetCount),
		one("cuDeviceGetName", &f.cuDeviceGetName),
		// _v2 reports a MIG instance's own UUID (CUDA 11.4+).
		{names: []string{"cuDeviceGetUuid_v2", "cuDeviceGetUuid"}, fn: &f.cuDeviceGetUuid, bound: &c.uuidCall},
		one("cuDeviceGetAttribute", &f.cuDeviceGetAttribute),
		one("cuDeviceTotalMem_v2", &f.cuDeviceTotalMem),
		one("cuCtxCreate_v2", &f.cuCtxCreate),
		one("cuCtxDestroy_v2", &f.cuCtxDestroy),
		one("cuCtxSynchronize", &f.cuCtxSynchronize),
		one("cuMemGetInfo_v2", &f.cuMemGetInfo),
		one("cuMemAlloc_v2", &f.cuMemAlloc),
		one("cuMemFree_v2", &f.cuMemFree),
		one("cuMemsetD8_v2", &f.cuMemsetD8),
		one("cuMemAllocHost_v2", &f.cuMemAllocHost),
		one("cuMemFreeHost", &f.cuMemFreeHost),
		one("cuMemcpyHtoD_v2", &f.cuMemcpyHtoD),
		one("cuMemcpyDtoH_v2", &f.cuMemcpyDtoH),
		one("cuModuleLoadDataEx", &f.cuModuleLoadDataEx),
		one("cuModuleUnload", &f.cuModuleUnload),
		one("cuModuleGetFunction", &f.cuModuleGetFunction),
		one("cuLaunchKernel", &f.cuLaunchKernel),
		one("cuEventCreate", &f.cuEventCreate),
		one("cuEventRecord", &f.cuEventRecord),
		one("cuEventSynchronize", &f.cuEventSynchronize),
		one("cuEventElapsedTime", &f.cuEventElapsedTime),
		{names: []string{"cuEventDestroy_v2", "cuEventDestroy"}, fn: &f.cuEventDestroy, bound: &c.eventDestroyCall},
		one("cuGetErrorName", &f.cuGetErrorName),
		one("cuGetErrorString", &f.cuGetErrorString),
	}
}

// bind resolves every symbol with lookup (dlsym) before registering any, and
// registers each with register (purego.RegisterFunc). A missing symbol is an
// error naming it; nothing panics.
func (c *CUDA) bind(lookup func(name string) (uintptr, error), register func(fn any, addr uintptr)) error {
	syms := c.symbols()
	addrs := make([]uintptr, len(syms))
	chosen := make([]string, len(syms))
	for i, s := range syms {
		for _, name := range s.names {
			if addr, err := lookup(name); err == nil && addr != 0 {
				addrs[i], chosen[i] = addr, name
				break
			}
		}
		if addrs[i] == 0 {
			return fmt.Errorf("gpuprobe: %s does not export %s: the NVIDIA driver is too old or this is not libcuda",
				c.path, strings.Join(s.names, " or "))
		}
	}
	for i, s := range syms {
		register(s.fn, addrs[i])
		if s.bound != nil {
			*s.bound = chosen[i]
		}
	}
	return nil
}

// enter guards a call into the library: it fails after Close, and keeps the
// library loaded while the call runs (exit releases it).
func (c *CUDA) enter(call string) error {
	if c == nil || c.fn.cuInit == nil {
		return fmt.Errorf("%s: gpuprobe: CUDA driver not opened (use gpuprobe.Open)", call)
	}
	c.inflight.Add(1)
	if c.closed.Load() {
		c.exit()
		return fmt.Errorf("%s: %w", call, ErrClosed)
	}
	return nil
}

func (c *CUDA) exit() {
	if c.inflight.Add(-1) == 0 && c.closed.Load() {
		c.unload()
	}
}

// unload dlcloses the library once, when closed and no call is running, and
// only if cuInit was never called: after cuInit the driver's own threads run
// code in libcuda, so the library must stay mapped for the life of the
// process (as every CUDA program leaves it).
func (c *CUDA) unload() {
	if c.initRun.Load() || c.dlclose == nil {
		return
	}
	if c.unloaded.CompareAndSwap(false, true) {
		_ = c.dlclose(c.lib)
	}
}

// Close ends the binding: every later call returns an error wrapping
// ErrClosed. It does not destroy contexts or free memory the caller still
// holds. Calling it twice returns ErrClosed.
func (c *CUDA) Close() error {
	if c == nil || c.fn.cuInit == nil {
		return errors.New("gpuprobe: CUDA driver not opened")
	}
	if c.closed.Swap(true) {
		return fmt.Errorf("Close: %w", ErrClosed)
	}
	if c.inflight.Load() == 0 {
		c.unload()
	}
	return nil
}

// check turns a CUresult into nil or a *CUDAError for call.
func (c *CUDA) check(call string, r int32) error {
	if r == CUDASuccess {
		return nil
	}
	return c.cudaError(call, int(r), "")
}

// cudaError builds the error for a failed call, naming the code with
// cuGetErrorName and describing it with cuGetErrorString (unless msg is
// given).
func (c *CUDA) cudaError(call string, code int, msg string) *CUDAError {
	var name, str *byte
	if c.fn.cuGetErrorName(int32(code), &name) != CUDASuccess {
		name = nil
	}
	if msg == "" && c.fn.cuGetErrorString(int32(code), &str) == CUDASuccess {
		msg = goString(str, 1024)
	}
	return newCUDAError(call, code, goString(name, 256), msg)
}

// newCUDAError fills in a name when the driver does not know the code.
func newCUDAError(call string, code int, name, msg string) *CUDAError {
	if name == "" {
		name = "CUresult " + strconv.Itoa(code)
	}
	return &CUDAError{Call: call, Code: code, Name: name, Msg: strings.TrimSpace(msg)}
}

// goString copies a NUL-terminated C string (at most limit bytes) that the
// driver owns.
func goString(p *byte, limit int) string {
	if p == nil {
		return ""
	}
	var b []byte
	for i := 0; i < limit; i++ {
		ch := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if ch == 0 {
			break
		}
		b = append(b, ch)
	}
	return string(b)
}

// cString returns s as a NUL-terminated byte slice.
func cString(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// device returns the CUdevice for a CUDA ordinal.
func (c *CUDA) device(ordinal int) (int32, error) {
	if ordinal < 0 || ordinal > math.MaxInt32 {
		return 0, newCUDAError("cuDeviceGet", CUDAErrInvalidDevice, "CUDA_ERROR_INVALID_DEVICE",
			fmt.Sprintf("device ordinal %d out of range", ordinal))
	}
	var dev int32
	if err := c.check("cuDeviceGet", c.fn.cuDeviceGet(&dev, int32(ordinal))); err != nil {
		return 0, err
	}
	return dev, nil
}

// Init calls cuInit(0).
func (c *CUDA) Init() error {
	const call = "cuInit"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	c.initRun.Store(true)
	return c.check(call, c.fn.cuInit(0))
}

// DriverVersion is cuDriverGetVersion: 12040 for CUDA 12.4. It works before
// Init.
func (c *CUDA) DriverVersion() (int, error) {
	const call = "cuDriverGetVersion"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	var v int32
	if err := c.check(call, c.fn.cuDriverGetVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceCount is cuDeviceGetCount.
func (c *CUDA) DeviceCount() (int, error) {
	const call = "cuDeviceGetCount"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	var n int32
	if err := c.check(call, c.fn.cuDeviceGetCount(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// DeviceName is cuDeviceGetName.
func (c *CUDA) DeviceName(ordinal int) (string, error) {
	const call = "cuDeviceGetName"
	if err := c.enter(call); err != nil {
		return "", err
	}
	defer c.exit()
	return c.deviceName(ordinal)
}

func (c *CUDA) deviceName(ordinal int) (string, error) {
	dev, err := c.device(ordinal)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 256)
	if err := c.check("cuDeviceGetName", c.fn.cuDeviceGetName(&buf[0], int32(len(buf)), dev)); err != nil {
		return "", err
	}
	return goString(&buf[0], len(buf)), nil
}

// DeviceUUID is cuDeviceGetUuid_v2 (cuDeviceGetUuid on drivers before CUDA
// 11.4), formatted as NVML formats it. A MIG instance is recognised by its
// CUDA device name ("NVIDIA A100-SXM4-40GB MIG 1g.5gb") and gets the "MIG-"
// prefix: with _v2 the bytes are the instance's own UUID.
func (c *CUDA) DeviceUUID(ordinal int) (string, error) {
	call := "cuDeviceGetUuid_v2"
	if c != nil && c.uuidCall != "" {
		call = c.uuidCall
	}
	if err := c.enter(call); err != nil {
		return "", err
	}
	defer c.exit()
	dev, err := c.device(ordinal)
	if err != nil {
		return "", err
	}
	var u [16]byte
	if err := c.check(call, c.fn.cuDeviceGetUuid(&u, dev)); err != nil {
		return "", err
	}
	prefix := "GPU"
	if call == "cuDeviceGetUuid_v2" {
		name, err := c.deviceName(ordinal)
		if err != nil {
			return "", err
		}
		if isMIGDeviceName(name) {
			prefix = "MIG"
		}
	}
	return formatUUID(prefix, u), nil
}

// isMIGDeviceName reports whether a CUDA device name is a MIG instance's:
// the GPU's name followed by " MIG " and the profile.
func isMIGDeviceName(name string) bool {
	return strings.Contains(name, " MIG ")
}

// formatUUID formats 16 UUID bytes as NVML does:
// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", lower-case hex.
func formatUUID(prefix string, u [16]byte) string {
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// DeviceAttribute is cuDeviceGetAttribute.
func (c *CUDA) DeviceAttribute(ordinal int, a Attribute) (int, error) {
	const call = "cuDeviceGetAttribute"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	dev, err := c.device(ordinal)
	if err != nil {
		return 0, err
	}
	var v int32
	if err := c.check(call, c.fn.cuDeviceGetAttribute(&v, int32(a), dev)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// DeviceTotalMem is cuDeviceTotalMem_v2.
func (c *CUDA) DeviceTotalMem(ordinal int) (uint64, error) {
	const call = "cuDeviceTotalMem_v2"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	dev, err := c.device(ordinal)
	if err != nil {
		return 0, err
	}
	var n uint64
	if err := c.check(call, c.fn.cuDeviceTotalMem(&n, dev)); err != nil {
		return 0, err
	}
	return n, nil
}

// ctxSchedBlockingSync is CU_CTX_SCHED_BLOCKING_SYNC: waits for the GPU
// block the thread on a synchronisation primitive instead of spinning (the
// default, CU_CTX_SCHED_AUTO, spins a core while the GPU is busy when there
// are fewer active contexts than cores, as there are).
const ctxSchedBlockingSync = 0x04

// CtxCreate is cuCtxCreate_v2 with CU_CTX_SCHED_BLOCKING_SYNC; the new
// context is current on the calling thread.
func (c *CUDA) CtxCreate(ordinal int) (Context, error) {
	const call = "cuCtxCreate_v2"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	dev, err := c.device(ordinal)
	if err != nil {
		return 0, err
	}
	var ctx uintptr
	if err := c.check(call, c.fn.cuCtxCreate(&ctx, ctxSchedBlockingSync, dev)); err != nil {
		return 0, err
	}
	return Context(ctx), nil
}

// CtxDestroy is cuCtxDestroy_v2.
func (c *CUDA) CtxDestroy(ctx Context) error {
	const call = "cuCtxDestroy_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuCtxDestroy(uintptr(ctx)))
}

// CtxSynchronize is cuCtxSynchronize.
func (c *CUDA) CtxSynchronize() error {
	const call = "cuCtxSynchronize"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuCtxSynchronize())
}

// MemGetInfo is cuMemGetInfo_v2.
func (c *CUDA) MemGetInfo() (free, total uint64, err error) {
	const call = "cuMemGetInfo_v2"
	if err := c.enter(call); err != nil {
		return 0, 0, err
	}
	defer c.exit()
	if err := c.check(call, c.fn.cuMemGetInfo(&free, &total)); err != nil {
		return 0, 0, err
	}
	return free, total, nil
}

// MemAlloc is cuMemAlloc_v2.
func (c *CUDA) MemAlloc(bytes uint64) (DevicePtr, error) {
	const call = "cuMemAlloc_v2"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	var p uint64
	if err := c.check(call, c.fn.cuMemAlloc(&p, bytes)); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemFree is cuMemFree_v2.
func (c *CUDA) MemFree(p DevicePtr) error {
	const call = "cuMemFree_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuMemFree(uint64(p)))
}

// MemsetD8 is cuMemsetD8_v2.
func (c *CUDA) MemsetD8(dst DevicePtr, value byte, n uint64) error {
	const call = "cuMemsetD8_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuMemsetD8(uint64(dst), value, n))
}

// MemAllocHost is cuMemAllocHost_v2: page-locked host memory the driver
// owns, as a slice over it. Free it with MemFreeHost (in the same context).
func (c *CUDA) MemAllocHost(bytes uint64) ([]byte, error) {
	const call = "cuMemAllocHost_v2"
	if err := c.enter(call); err != nil {
		return nil, err
	}
	defer c.exit()
	if bytes == 0 || bytes > math.MaxInt {
		return nil, newCUDAError(call, 1, "CUDA_ERROR_INVALID_VALUE", fmt.Sprintf("cannot allocate %d bytes", bytes))
	}
	var p unsafe.Pointer
	if err := c.check(call, c.fn.cuMemAllocHost(&p, bytes)); err != nil {
		return nil, err
	}
	c.mu.Lock()
	if c.host == nil {
		c.host = map[uintptr]uint64{}
	}
	c.host[uintptr(p)] = bytes
	c.mu.Unlock()
	return unsafe.Slice((*byte)(p), int(bytes)), nil
}

// MemFreeHost is cuMemFreeHost for a slice MemAllocHost returned (whole,
// from its first byte); any other slice is refused without calling the
// driver.
func (c *CUDA) MemFreeHost(b []byte) error {
	const call = "cuMemFreeHost"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	p := unsafe.Pointer(unsafe.SliceData(b))
	c.mu.Lock()
	_, ok := c.host[uintptr(p)]
	if ok {
		delete(c.host, uintptr(p))
	}
	c.mu.Unlock()
	if !ok {
		return newCUDAError(call, 1, "CUDA_ERROR_INVALID_VALUE", "not memory from MemAllocHost (or freed already)")
	}
	return c.check(call, c.fn.cuMemFreeHost(p))
}

// MemcpyHtoD is cuMemcpyHtoD_v2 (synchronous). src may be Go memory (the
// driver stages it) or MemAllocHost's page-locked memory (direct DMA).
func (c *CUDA) MemcpyHtoD(dst DevicePtr, src []byte) error {
	const call = "cuMemcpyHtoD_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	if len(src) == 0 {
		return nil
	}
	var pin runtime.Pinner // a no-op for MemAllocHost memory
	defer pin.Unpin()
	p := unsafe.Pointer(unsafe.SliceData(src))
	pin.Pin(p)
	return c.check(call, c.fn.cuMemcpyHtoD(uint64(dst), p, uint64(len(src))))
}

// MemcpyDtoH is cuMemcpyDtoH_v2 (synchronous).
func (c *CUDA) MemcpyDtoH(dst []byte, src DevicePtr) error {
	const call = "cuMemcpyDtoH_v2"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	if len(dst) == 0 {
		return nil
	}
	var pin runtime.Pinner
	defer pin.Unpin()
	p := unsafe.Pointer(unsafe.SliceData(dst))
	pin.Pin(p)
	return c.check(call, c.fn.cuMemcpyDtoH(p, uint64(src), uint64(len(dst))))
}

// CUjit_option values (cuda.h).
const (
	cuJitErrorLogBuffer          = 5 // CU_JIT_ERROR_LOG_BUFFER
	cuJitErrorLogBufferSizeBytes = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
	jitLogBytes                  = 16 << 10
)

// ModuleLoadData is cuModuleLoadDataEx on PTX text, with an error log
// buffer: a failed JIT compilation's log becomes the error's Msg.
func (c *CUDA) ModuleLoadData(ptx string) (Module, error) {
	const call = "cuModuleLoadDataEx"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	image := cString(ptx)
	logBuf := make([]byte, jitLogBytes)
	// The option values are void*: a pointer for the buffer, the size as
	// an integer, which the driver overwrites with the bytes it wrote.
	options := []int32{cuJitErrorLogBuffer, cuJitErrorLogBufferSizeBytes}
	values := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), uintptr(len(logBuf))}
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(&image[0])
	pin.Pin(&logBuf[0])
	pin.Pin(&options[0])
	pin.Pin(&values[0])
	var m uintptr
	r := c.fn.cuModuleLoadDataEx(&m, &image[0], uint32(len(options)), &options[0], &values[0])
	runtime.KeepAlive(logBuf)
	if r != CUDASuccess {
		return 0, c.cudaError(call, int(r), jitLog(logBuf, values[1]))
	}
	return Module(m), nil
}

// jitLog is the text the JIT wrote into buf (n bytes by its count).
func jitLog(buf []byte, n uintptr) string {
	if n > uintptr(len(buf)) {
		n = uintptr(len(buf))
	}
	s := string(buf[:n])
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}

// ModuleUnload is cuModuleUnload.
func (c *CUDA) ModuleUnload(m Module) error {
	const call = "cuModuleUnload"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuModuleUnload(uintptr(m)))
}

// ModuleGetFunction is cuModuleGetFunction; the error names the kernel.
func (c *CUDA) ModuleGetFunction(m Module, name string) (Function, error) {
	const call = "cuModuleGetFunction"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	cname := cString(name)
	var f uintptr
	if r := c.fn.cuModuleGetFunction(&f, uintptr(m), &cname[0]); r != CUDASuccess {
		e := c.cudaError(call, int(r), "")
		e.Msg = strings.TrimSpace(e.Msg + " (kernel " + name + ")")
		return 0, e
	}
	return Function(f), nil
}

// LaunchKernel is cuLaunchKernel on the default stream. kernelParams is an
// array of pointers, one to each argument's value. Both the values and the
// array are Go memory held by a runtime.Pinner for the call: cgo's rule for
// Go memory that holds Go pointers and is passed to C (the driver copies
// the arguments before cuLaunchKernel returns, so nothing outlives it). This
// costs no driver call, unlike page-locked host memory per launch.
func (c *CUDA) LaunchKernel(f Function, grid, block Dim3, sharedMemBytes uint32, args ...uint64) error {
	const call = "cuLaunchKernel"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	var params *unsafe.Pointer
	var pin runtime.Pinner
	defer pin.Unpin()
	if len(args) > 0 {
		values := make([]uint64, len(args))
		copy(values, args)
		ptrs := make([]unsafe.Pointer, len(args))
		pin.Pin(&values[0])
		for i := range values {
			ptrs[i] = unsafe.Pointer(&values[i])
		}
		pin.Pin(&ptrs[0])
		params = &ptrs[0]
	}
	return c.check(call, c.fn.cuLaunchKernel(uintptr(f), grid.X, grid.Y, grid.Z, block.X, block.Y, block.Z,
		sharedMemBytes, 0, params, nil))
}

// EventCreate is cuEventCreate with flags (EventBlockingSync, …).
func (c *CUDA) EventCreate(flags uint32) (Event, error) {
	const call = "cuEventCreate"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	var ev uintptr
	if err := c.check(call, c.fn.cuEventCreate(&ev, flags)); err != nil {
		return 0, err
	}
	return Event(ev), nil
}

// EventRecord is cuEventRecord on the default stream.
func (c *CUDA) EventRecord(ev Event) error {
	const call = "cuEventRecord"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuEventRecord(uintptr(ev), 0))
}

// EventSynchronize is cuEventSynchronize.
func (c *CUDA) EventSynchronize(ev Event) error {
	const call = "cuEventSynchronize"
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuEventSynchronize(uintptr(ev)))
}

// EventElapsed is cuEventElapsedTime (milliseconds as a float, resolution
// about 0.5 µs), rounded to the nanosecond.
func (c *CUDA) EventElapsed(start, end Event) (time.Duration, error) {
	const call = "cuEventElapsedTime"
	if err := c.enter(call); err != nil {
		return 0, err
	}
	defer c.exit()
	var ms float32
	if err := c.check(call, c.fn.cuEventElapsedTime(&ms, uintptr(start), uintptr(end))); err != nil {
		return 0, err
	}
	return msToDuration(ms), nil
}

func msToDuration(ms float32) time.Duration {
	return time.Duration(math.Round(float64(ms) * float64(time.Millisecond)))
}

// EventDestroy is cuEventDestroy_v2 (cuEventDestroy on old drivers).
func (c *CUDA) EventDestroy(ev Event) error {
	call := "cuEventDestroy_v2"
	if c != nil && c.eventDestroyCall != "" {
		call = c.eventDestroyCall
	}
	if err := c.enter(call); err != nil {
		return err
	}
	defer c.exit()
	return c.check(call, c.fn.cuEventDestroy(uintptr(ev)))
}

// Now is time.Now: a real GPU runs on the host's clock.
func (c *CUDA) Now() time.Time { return time.Now() }

var _ Driver = (*CUDA)(nil)
