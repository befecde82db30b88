package simdriver

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpulens/gpulens/internal/gpuid"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// CUDA symbol names the simulator answers to in FailCall and HangCall (the
// names the real binding calls), besides the kernel names of gpuprobe.
const (
	CallInit              = "cuInit"
	CallDriverGetVersion  = "cuDriverGetVersion"
	CallDeviceGetCount    = "cuDeviceGetCount"
	CallDeviceGetName     = "cuDeviceGetName"
	CallDeviceGetUUID     = "cuDeviceGetUuid_v2"
	CallDeviceGetAttr     = "cuDeviceGetAttribute"
	CallDeviceTotalMem    = "cuDeviceTotalMem_v2"
	CallCtxCreate         = "cuCtxCreate_v2"
	CallCtxDestroy        = "cuCtxDestroy_v2"
	CallCtxSynchronize    = "cuCtxSynchronize"
	CallMemGetInfo        = "cuMemGetInfo_v2"
	CallMemAlloc          = "cuMemAlloc_v2"
	CallMemFree           = "cuMemFree_v2"
	CallMemsetD8          = "cuMemsetD8_v2"
	CallMemAllocHost      = "cuMemAllocHost_v2"
	CallMemFreeHost       = "cuMemFreeHost"
	CallMemcpyHtoD        = "cuMemcpyHtoD_v2"
	CallMemcpyDtoH        = "cuMemcpyDtoH_v2"
	CallModuleLoadData    = "cuModuleLoadDataEx"
	CallModuleUnload      = "cuModuleUnload"
	CallModuleGetFunction = "cuModuleGetFunction"
	CallLaunchKernel      = "cuLaunchKernel"
	CallEventCreate       = "cuEventCreate"
	CallEventRecord       = "cuEventRecord"
	CallEventSynchronize  = "cuEventSynchronize"
	CallEventElapsedTime  = "cuEventElapsedTime"
	CallEventDestroy      = "cuEventDestroy_v2"
)

const (
	// backedLimit is the largest device allocation that gets real bytes:
	// enough for the stolen-time kernel's output and small copies; the
	// bandwidth buffers and the fill test's chunks are bookkeeping only
	// (writes to them are dropped, reads leave the destination as it was).
	backedLimit = 32 << 20
	// hostLimit caps one pinned host allocation (cuMemAllocHost fails with
	// CUDA_ERROR_OUT_OF_MEMORY beyond it, as a real one does when the host
	// cannot pin that much).
	hostLimit = 16 << 30

	defaultDriverVersion   = 12040
	defaultLaunchLatency   = 5 * time.Microsecond
	defaultTimerResolution = time.Microsecond
	maxThreadsPerBlock     = 1024
	maxThreadsPerSM        = 2048
	// jitter is the relative spread of simulated durations (uniform, ±half).
	jitter = 0.01
)

// Driver is a simulated CUDA driver over a fixed set of devices. It
// implements gpuprobe.Driver and is safe for concurrent use.
//
// Contexts: CUDA keeps a current context per OS thread; the simulator keeps
// a single current context per Driver (the last one created and not yet
// destroyed). That is all the probe needs, as it creates, uses and destroys
// its context on one locked thread and Probe calls of one gpuprobe.Probe are
// serialised; two probes running at once on one Driver would share it.
//
// Time: the host calls happen on a virtual clock that advances by what each
// call makes the host wait for, and never runs behind Options.Now less the
// time the driver's own calls took on it while a context was live (the lag,
// back to 0 at the first call with no context). A real driver answers in
// microseconds and its GPU works on its own; the simulator does the GPU's
// work in its calls (a stolen-time kernel's records, a memset's bytes),
// which on a loaded host or under the race detector takes longer than the
// simulated GPU would: that time is the simulator's, not the GPU's, and
// counting it would make host load steal the probe's GPU-time budget. The
// caller's own time between calls still counts, as it does on a GPU. The
// device has one stream, as the probe uses: a kernel launch costs the host a
// quarter of the device's launch latency and queues the kernel, which starts
// a full launch latency after the call or when the work queued before it
// ends, whichever is later (so back-to-back launches overlap their latency,
// and an empty kernel's launch + cuCtxSynchronize round trip is the launch
// latency); an event is stamped when the stream reaches it; cuCtxSynchronize,
// cuEventSynchronize, cuMemFree and cuCtxDestroy wait for the stream;
// copies and memsets wait for it, then take their bytes over the device's
// bandwidth. Kernels take their work over the device's figure, stretched by
// 1/Slowdown and by 1/(1-share) of a Neighbour, both read when the kernel
// starts; copies and memsets are stretched by 1/Slowdown only (copy engines
// are not time-sliced in this model). Durations carry ±0.5% of jitter drawn
// from Options.Seed, so a Driver is deterministic for a given Seed, clock
// and call sequence.
type Driver struct {
	mu     sync.Mutex
	devs   []Device
	now    func() time.Time
	rng    *rand.Rand
	vt     time.Time // the host's virtual clock
	stream time.Time // when the work queued on the stream ends
	// lag is the base-clock time spent inside the driver's own calls
	// (emulating them) since no context was live; the virtual clock
	// leaves it out (see Driver). callBase is the base clock less lag when
	// the call in progress entered, callStart the base clock then.
	lag                 time.Duration
	callBase, callStart time.Time
	inCall              bool
	version             int

	inited  bool
	fails   map[string]int
	hangs   map[string]chan struct{}
	handle  uintptr
	nextPtr uint64
	ctxs    map[gpuprobe.Context]*simContext
	current gpuprobe.Context
	host    map[*byte]int
	// spin is the host CPU time spent busy-waiting in cuEventSynchronize
	// (events without CU_EVENT_BLOCKING_SYNC): SpinTime.
	spin time.Duration
	// spare is the last pinned buffer freed, handed out again to an
	// allocation of its size (pinned memory's content is undefined, as
	// CUDA's is), which saves the tests clearing large buffers per probe.
	spare []byte
}

type simContext struct {
	dev     int
	allocs  map[gpuprobe.DevicePtr]*allocation
	modules map[gpuprobe.Module][]string
	funcs   map[gpuprobe.Function]string
	events  map[gpuprobe.Event]*event
}

type allocation struct {
	base gpuprobe.DevicePtr
	size uint64
	data []byte // nil beyond backedLimit
}

type event struct {
	flags    uint32 // CUevent_flags it was created with
	recorded bool
	at       time.Time
}

var _ gpuprobe.Driver = (*Driver)(nil)

// New returns a simulated driver exposing devs as CUDA ordinals, after
// Options.VisibleDevices and the one-MIG-device-per-process rule (see
// Visible).
func New(devs []Device, opts Options) *Driver {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	version := opts.DriverVersion
	if version == 0 {
		version = defaultDriverVersion
	}
	seed := uint64(opts.Seed)
	return &Driver{
		devs:    Visible(devs, opts.VisibleDevices),
		now:     now,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		vt:      now(),
		version: version,
		fails:   map[string]int{},
		hangs:   map[string]chan struct{}{},
		nextPtr: 0x7f0000000000,
		ctxs:    map[gpuprobe.Context]*simContext{},
		host:    map[*byte]int{},
	}
}

// Visible is what one process enumerates of devs under CUDA_VISIBLE_DEVICES
// visible ("" for all; UUIDs or indices, unknown entries ignored): with MIG,
// CUDA (11 and 12) enumerates a single MIG instance per process, the first
// visible one, so a process given several instances sees one of them, and
// the others can only be reached from other processes.
func Visible(devs []Device, visible string) []Device {
	var picked []Device
	if strings.TrimSpace(visible) == "" {
		picked = append(picked, devs...)
	} else {
		for _, f := range strings.Split(visible, ",") {
			f = strings.TrimSpace(f)
			if i, err := strconv.Atoi(f); err == nil {
				if i >= 0 && i < len(devs) {
					picked = append(picked, devs[i])
				}
				continue
			}
			for _, d := range devs {
				if strings.EqualFold(d.UUID, f) {
					picked = append(picked, d)
					break
				}
			}
		}
	}
	out := picked[:0:0]
	mig := false
	for _, d := range picked {
		if strings.HasPrefix(d.UUID, "MIG-") {
			if mig {
				continue
			}
			mig = true
		}
		out = append(out, d)
	}
	return out
}

// FailCall makes every later call of the CUDA symbol call (e.g.
// "cuMemAlloc_v2"; the Call* constants), or every later launch of the
// kernel named call (e.g. gpuprobe.KernelMMABF16), fail with CUresult code.
// Code 0 removes the fault.
func (d *Driver) FailCall(call string, code int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if code == 0 {
		delete(d.fails, call)
		return
	}
	d.fails[call] = code
}

// HangCall makes every later call of call (a CUDA symbol or a kernel name,
// as in FailCall) block until release is called. Blocked calls hold no lock:
// the rest of the driver keeps answering. release may be called more than
// once.
func (d *Driver) HangCall(call string) (release func()) {
	ch := make(chan struct{})
	d.mu.Lock()
	d.hangs[call] = ch
	d.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			d.mu.Lock()
			if d.hangs[call] == ch {
				delete(d.hangs, call)
			}
			d.mu.Unlock()
			close(ch)
		})
	}
}

// enter blocks while any of names is hung, then takes the driver lock and
// returns the injected failure of the first name that has one. The caller
// unlocks d.mu.
func (d *Driver) enter(names ...string) error {
	for {
		d.mu.Lock()
		var hang chan struct{}
		for _, n := range names {
			if ch := d.hangs[n]; ch != nil {
				hang = ch
				break
			}
		}
		if hang == nil {
			break
		}
		d.mu.Unlock()
		<-hang
	}
	now := d.now()
	if len(d.ctxs) == 0 {
		d.lag = 0 // no context: nothing times the GPU, the clock catches up
	}
	d.callStart, d.callBase, d.inCall = now, now.Add(-d.lag), true
	for _, n := range names {
		if code, ok := d.fails[n]; ok {
			return cudaError(names[0], code, fmt.Sprintf("simulated failure of %s", n))
		}
	}
	return nil
}

// leave ends a call that enter began: the time the call itself took on the
// base clock, while a context is live, is added to lag, and d.mu unlocked.
func (d *Driver) leave() {
	if len(d.ctxs) > 0 {
		d.lag += max(0, d.now().Sub(d.callStart))
	}
	d.inCall = false
	d.mu.Unlock()
}

// clock brings the virtual clock up to the base clock less lag (as it was
// when the call in progress entered) and returns it.
func (d *Driver) clock() time.Time {
	n := d.callBase
	if !d.inCall {
		n = d.now().Add(-d.lag)
	}
	if n.After(d.vt) {
		d.vt = n
	}
	return d.vt
}

// sync makes the host wait for the stream.
func (d *Driver) sync() {
	if d.clock(); d.stream.After(d.vt) {
		d.vt = d.stream
	}
}

// blocking runs a host-synchronous operation (a copy, a memset) of dur
// after the queued work.
func (d *Driver) blocking(dur time.Duration) {
	d.sync()
	d.vt = d.vt.Add(max(0, dur))
	d.stream = d.vt
}

// enqueue queues a kernel launched now on dev: the host pays a quarter of
// the launch latency, the kernel starts a launch latency from now or after
// the queued work, and runs for run(start); dev's Kernel hears of the run.
func (d *Driver) enqueue(dev *Device, latency time.Duration, run func(start time.Time) time.Time) {
	now := d.clock()
	start := now.Add(latency)
	if d.stream.After(start) {
		start = d.stream
	}
	d.stream = run(start)
	d.vt = now.Add(latency / 4)
	if dev.Kernel != nil && d.stream.After(start) {
		dev.Kernel(start, d.stream)
	}
}

// jittered scales a duration by 1±jitter/2.
func (d *Driver) jittered(dur time.Duration) time.Duration {
	return time.Duration(float64(dur) * (1 + jitter*(d.rng.Float64()-0.5)))
}

func (d *Driver) requireInit(call string) error {
	if !d.inited {
		return cudaError(call, gpuprobe.CUDAErrNotInitalized, "")
	}
	return nil
}

func (d *Driver) device(call string, ordinal int) (*Device, error) {
	if err := d.requireInit(call); err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= len(d.devs) {
		return nil, cudaError(call, gpuprobe.CUDAErrInvalidDevice, "")
	}
	return &d.devs[ordinal], nil
}

// ctx returns the current context.
func (d *Driver) ctx(call string) (*simContext, error) {
	if err := d.requireInit(call); err != nil {
		return nil, err
	}
	c := d.ctxs[d.current]
	if c == nil {
		return nil, cudaError(call, errInvalidContext, "")
	}
	return c, nil
}

func (d *Driver) nextHandle() uintptr {
	d.handle++
	return d.handle
}

// Now is the virtual clock.
func (d *Driver) Now() time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.clock()
}

func (d *Driver) Init() error {
	err := d.enter(CallInit)
	defer d.leave()
	if err != nil {
		return err
	}
	if len(d.devs) == 0 {
		return cudaError(CallInit, gpuprobe.CUDAErrNoDevice, "")
	}
	d.inited = true
	return nil
}

func (d *Driver) DriverVersion() (int, error) {
	err := d.enter(CallDriverGetVersion)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	return d.version, nil
}

func (d *Driver) DeviceCount() (int, error) {
	err := d.enter(CallDeviceGetCount)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	if err := d.requireInit(CallDeviceGetCount); err != nil {
		return 0, err
	}
	return len(d.devs), nil
}

func (d *Driver) DeviceName(ordinal int) (string, error) {
	err := d.enter(CallDeviceGetName)
	defer d.leave()
	if err != nil {
		return "", err
	}
	dev, err := d.device(CallDeviceGetName, ordinal)
	if err != nil {
		return "", err
	}
	return dev.Name, nil
}

func (d *Driver) DeviceUUID(ordinal int) (string, error) {
	err := d.enter(CallDeviceGetUUID)
	defer d.leave()
	if err != nil {
		return "", err
	}
	dev, err := d.device(CallDeviceGetUUID, ordinal)
	if err != nil {
		return "", err
	}
	return dev.UUID, nil
}

func (d *Driver) DeviceAttribute(ordinal int, a gpuprobe.Attribute) (int, error) {
	err := d.enter(CallDeviceGetAttr)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	dev, err := d.device(CallDeviceGetAttr, ordinal)
	if err != nil {
		return 0, err
	}
	switch a {
	case gpuprobe.AttrMaxThreadsPerBlock:
		return maxThreadsPerBlock, nil
	case gpuprobe.AttrClockRateKHz:
		return dev.ClockRateKHz, nil
	case gpuprobe.AttrMultiprocessorCount:
		return dev.SMs, nil
	case gpuprobe.AttrMemoryClockRateKHz:
		return dev.MemoryClockKHz, nil
	case gpuprobe.AttrGlobalMemoryBusWidth:
		return dev.MemoryBusWidthBit, nil
	case gpuprobe.AttrMaxThreadsPerMultiprocessor:
		if dev.MaxThreadsPerSM > 0 {
			return dev.MaxThreadsPerSM, nil
		}
		return maxThreadsPerSM, nil
	case gpuprobe.AttrComputeMode:
		return dev.ComputeMode, nil
	case gpuprobe.AttrL2CacheSize:
		return dev.L2CacheBytes, nil
	case gpuprobe.AttrComputeCapabilityMajor:
		return dev.CCMajor, nil
	case gpuprobe.AttrComputeCapabilityMinor:
		return dev.CCMinor, nil
	case gpuprobe.AttrPCIDomainID, gpuprobe.AttrPCIBusID, gpuprobe.AttrPCIDeviceID:
		var b gpuid.BusID
		if dev.PCIBusID != "" {
			var err error
			if b, err = gpuid.ParseBusID(dev.PCIBusID); err != nil {
				return 0, cudaError(CallDeviceGetAttr, errInvalidValue, fmt.Sprintf("simulated device %d has a malformed PCIBusID %q", ordinal, dev.PCIBusID))
			}
		}
		switch a {
		case gpuprobe.AttrPCIDomainID:
			return int(b.Domain), nil
		case gpuprobe.AttrPCIBusID:
			return int(b.Bus), nil
		default:
			return int(b.Device), nil
		}
	}
	return 0, cudaError(CallDeviceGetAttr, errInvalidValue, fmt.Sprintf("attribute %d is not simulated", a))
}

func (d *Driver) DeviceTotalMem(ordinal int) (uint64, error) {
	err := d.enter(CallDeviceTotalMem)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	dev, err := d.device(CallDeviceTotalMem, ordinal)
	if err != nil {
		return 0, err
	}
	return dev.TotalMemoryBytes, nil
}

func (d *Driver) CtxCreate(ordinal int) (gpuprobe.Context, error) {
	err := d.enter(CallCtxCreate)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	dev, err := d.device(CallCtxCreate, ordinal)
	if err != nil {
		return 0, err
	}
	switch dev.ComputeMode {
	case gpuprobe.ComputeModeProhibited:
		return 0, cudaError(CallCtxCreate, gpuprobe.CUDAErrDeviceUnavail, "CUDA-capable device(s) is/are busy or unavailable (compute mode PROHIBITED)")
	case gpuprobe.ComputeModeExclusiveProcess, gpuprobe.ComputeModeExclusiveThread:
		if dev.OtherContexts != nil && dev.OtherContexts(d.clock()) > 0 {
			return 0, cudaError(CallCtxCreate, gpuprobe.CUDAErrDeviceUnavail, "CUDA-capable device(s) is/are busy or unavailable (compute mode EXCLUSIVE_PROCESS, another process holds a context)")
		}
	}
	if used := d.usedBy(ordinal) + d.others(dev); used > dev.TotalMemoryBytes || dev.ContextMemoryBytes > dev.TotalMemoryBytes-used {
		return 0, cudaError(CallCtxCreate, gpuprobe.CUDAErrOutOfMemory, "")
	}
	h := gpuprobe.Context(d.nextHandle())
	d.ctxs[h] = &simContext{
		dev:     ordinal,
		allocs:  map[gpuprobe.DevicePtr]*allocation{},
		modules: map[gpuprobe.Module][]string{},
		funcs:   map[gpuprobe.Function]string{},
		events:  map[gpuprobe.Event]*event{},
	}
	d.current = h
	if f := d.devs[ordinal].Context; f != nil {
		d.clock()
		f(true, d.vt)
	}
	return h, nil
}

// CtxDestroy frees everything the context holds, as the real driver does.
func (d *Driver) CtxDestroy(c gpuprobe.Context) error {
	err := d.enter(CallCtxDestroy)
	defer d.leave()
	if err != nil {
		return err
	}
	if err := d.requireInit(CallCtxDestroy); err != nil {
		return err
	}
	if d.ctxs[c] == nil {
		return cudaError(CallCtxDestroy, errInvalidContext, "")
	}
	d.sync()
	if f := d.devs[d.ctxs[c].dev].Context; f != nil {
		f(false, d.vt)
	}
	delete(d.ctxs, c)
	if d.current == c {
		d.current = 0
	}
	return nil
}

// CtxSynchronize waits for the stream.
func (d *Driver) CtxSynchronize() error {
	err := d.enter(CallCtxSynchronize)
	defer d.leave()
	if err != nil {
		return err
	}
	if _, err = d.ctx(CallCtxSynchronize); err != nil {
		return err
	}
	d.sync()
	return nil
}

// usedBy is what our contexts hold on a device, their own memory included.
func (d *Driver) usedBy(dev int) uint64 {
	var used uint64
	for _, c := range d.ctxs {
		if c.dev != dev {
			continue
		}
		used += d.devs[dev].ContextMemoryBytes
		for _, a := range c.allocs {
			used += a.size
		}
	}
	return used
}

func (d *Driver) others(dev *Device) uint64 {
	if dev.UsedByOthers == nil {
		return 0
	}
	return dev.UsedByOthers(d.clock())
}

func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	err = d.enter(CallMemGetInfo)
	defer d.leave()
	if err != nil {
		return 0, 0, err
	}
	c, err := d.ctx(CallMemGetInfo)
	if err != nil {
		return 0, 0, err
	}
	dev := &d.devs[c.dev]
	total = dev.TotalMemoryBytes
	used := d.usedBy(c.dev) + d.others(dev)
	if used < total {
		free = total - used
	}
	return free, total, nil
}

func (d *Driver) MemAlloc(bytes uint64) (gpuprobe.DevicePtr, error) {
	err := d.enter(CallMemAlloc)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallMemAlloc)
	if err != nil {
		return 0, err
	}
	if bytes == 0 {
		return 0, cudaError(CallMemAlloc, errInvalidValue, "")
	}
	dev := &d.devs[c.dev]
	used := d.usedBy(c.dev) + d.others(dev)
	if used > dev.TotalMemoryBytes || bytes > dev.TotalMemoryBytes-used {
		return 0, cudaError(CallMemAlloc, gpuprobe.CUDAErrOutOfMemory, "")
	}
	a := &allocation{base: gpuprobe.DevicePtr(d.nextPtr), size: bytes}
	if bytes <= backedLimit {
		a.data = make([]byte, bytes)
	}
	const align = 2 << 20
	d.nextPtr += (bytes+align-1)/align*align + align
	c.allocs[a.base] = a
	return a.base, nil
}

func (d *Driver) MemFree(p gpuprobe.DevicePtr) error {
	err := d.enter(CallMemFree)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallMemFree)
	if err != nil {
		return err
	}
	if c.allocs[p] == nil {
		return cudaError(CallMemFree, errInvalidValue, fmt.Sprintf("%#x is not an allocation of this context", uint64(p)))
	}
	d.sync()
	delete(c.allocs, p)
	return nil
}

// span finds the allocation holding [p, p+n) in context c.
func (c *simContext) span(p gpuprobe.DevicePtr, n uint64) (*allocation, uint64, bool) {
	for _, a := range c.allocs {
		if p >= a.base && uint64(p-a.base) <= a.size && n <= a.size-uint64(p-a.base) {
			return a, uint64(p - a.base), true
		}
	}
	return nil, 0, false
}

func (d *Driver) slowdown(dev *Device, t time.Time) float64 {
	if dev.Slowdown == nil {
		return 1
	}
	s := dev.Slowdown(t)
	if s <= 0 || s > 1 {
		if s > 1 {
			return 1
		}
		return 1e-3
	}
	return s
}

func neighbour(dev *Device, t time.Time) (float64, time.Duration) {
	if dev.Neighbour == nil {
		return 0, 0
	}
	share, slice := dev.Neighbour(t)
	if share <= 0 || slice <= 0 {
		return 0, 0
	}
	return min(share, 0.99), slice
}

// transfer is how long bytes take at rate bytes/s on dev now (Slowdown
// applied, no neighbour).
func (d *Driver) transfer(dev *Device, bytes uint64, rate float64) time.Duration {
	rate *= d.slowdown(dev, d.clock())
	return d.jittered(time.Duration(float64(bytes) / rate * 1e9))
}

func (d *Driver) MemsetD8(dst gpuprobe.DevicePtr, value byte, n uint64) error {
	err := d.enter(CallMemsetD8)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallMemsetD8)
	if err != nil {
		return err
	}
	a, off, ok := c.span(dst, n)
	if !ok {
		return cudaError(CallMemsetD8, errInvalidValue, "range outside any allocation")
	}
	if a.data != nil {
		region := a.data[off : off+n]
		for i := range region {
			region[i] = value
		}
	}
	dev := &d.devs[c.dev]
	if rate := dev.DeviceCopyBytesPerSecond; rate > 0 {
		d.sync()
		d.blocking(d.transfer(dev, n, rate))
	}
	return nil
}

func (d *Driver) MemAllocHost(bytes uint64) ([]byte, error) {
	err := d.enter(CallMemAllocHost)
	defer d.leave()
	if err != nil {
		return nil, err
	}
	if _, err := d.ctx(CallMemAllocHost); err != nil {
		return nil, err
	}
	if bytes == 0 {
		return nil, cudaError(CallMemAllocHost, errInvalidValue, "")
	}
	if bytes > hostLimit {
		return nil, cudaError(CallMemAllocHost, gpuprobe.CUDAErrOutOfMemory, "")
	}
	b := d.spare
	if uint64(len(b)) == bytes {
		d.spare = nil
	} else {
		b = make([]byte, bytes)
	}
	d.host[&b[0]] = len(b)
	return b, nil
}

func (d *Driver) MemFreeHost(b []byte) error {
	err := d.enter(CallMemFreeHost)
	defer d.leave()
	if err != nil {
		return err
	}
	d.sync()
	if err := d.requireInit(CallMemFreeHost); err != nil {
		return err
	}
	if len(b) == 0 || d.host[&b[0]] == 0 {
		return cudaError(CallMemFreeHost, errInvalidValue, "not a pinned host allocation")
	}
	n := d.host[&b[0]]
	delete(d.host, &b[0])
	if cap(b) >= n {
		d.spare = b[:n]
	}
	return nil
}

func (d *Driver) memcpy(call string, p gpuprobe.DevicePtr, host []byte, toDevice bool) error {
	err := d.enter(call)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(call)
	if err != nil {
		return err
	}
	n := uint64(len(host))
	a, off, ok := c.span(p, n)
	if !ok {
		return cudaError(call, errInvalidValue, "range outside any allocation")
	}
	// Unbacked (large) allocations have no bytes: writes to them are
	// dropped and reads leave the host buffer as it was.
	if a.data != nil {
		if toDevice {
			copy(a.data[off:off+n], host)
		} else {
			copy(host, a.data[off:off+n])
		}
	}
	dev := &d.devs[c.dev]
	rate := dev.H2DBytesPerSecond
	if !toDevice {
		rate = dev.D2HBytesPerSecond
	}
	if rate <= 0 {
		return cudaError(call, errNotSupported, "the simulated device has no bandwidth figure for this direction")
	}
	d.sync()
	d.blocking(d.transfer(dev, n, rate))
	return nil
}

func (d *Driver) MemcpyHtoD(dst gpuprobe.DevicePtr, src []byte) error {
	return d.memcpy(CallMemcpyHtoD, dst, src, true)
}

func (d *Driver) MemcpyDtoH(dst []byte, src gpuprobe.DevicePtr) error {
	return d.memcpy(CallMemcpyDtoH, src, dst, false)
}

var (
	entryRE  = regexp.MustCompile(`\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)`)
	targetRE = regexp.MustCompile(`\.target\s+sm_(\d+)`)
	mmaRE    = regexp.MustCompile(`\bmma\.sync`)
)

// ModuleLoadData "JIT-compiles" PTX: it finds the .entry names and checks
// the module's needs against the device: a .target sm_XY above the device's
// compute capability, or mma.sync (the tensor kernels) below 8.0, fails with
// CUDA_ERROR_INVALID_PTX and a JIT-like log.
func (d *Driver) ModuleLoadData(ptx string) (gpuprobe.Module, error) {
	err := d.enter(CallModuleLoadData)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallModuleLoadData)
	if err != nil {
		return 0, err
	}
	dev := &d.devs[c.dev]
	cc := dev.CCMajor*10 + dev.CCMinor
	var entries []string
	tensor := false
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		entries = append(entries, m[1])
		if m[1] == gpuprobe.KernelMMAF16 || m[1] == gpuprobe.KernelMMABF16 {
			tensor = true
		}
	}
	if len(entries) == 0 {
		return 0, cudaError(CallModuleLoadData, gpuprobe.CUDAErrInvalidPTX, "ptxas fatal: no .entry in the PTX text")
	}
	if m := targetRE.FindStringSubmatch(ptx); m != nil {
		if sm, _ := strconv.Atoi(m[1]); sm > cc {
			return 0, cudaError(CallModuleLoadData, gpuprobe.CUDAErrInvalidPTX,
				fmt.Sprintf("ptxas fatal: SM version specified by .target (sm_%d) is higher than the device's (sm_%d)", sm, cc))
		}
	}
	if (tensor || mmaRE.MatchString(ptx)) && dev.CCMajor < 8 {
		return 0, cudaError(CallModuleLoadData, gpuprobe.CUDAErrInvalidPTX,
			fmt.Sprintf("ptxas error: mma.sync with .f16/.bf16 inputs requires sm_80 or higher (device is sm_%d)", cc))
	}
	h := gpuprobe.Module(d.nextHandle())
	c.modules[h] = entries
	return h, nil
}

func (d *Driver) ModuleUnload(m gpuprobe.Module) error {
	err := d.enter(CallModuleUnload)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallModuleUnload)
	if err != nil {
		return err
	}
	if c.modules[m] == nil {
		return cudaError(CallModuleUnload, errInvalidHandle, "")
	}
	delete(c.modules, m)
	return nil
}

func (d *Driver) ModuleGetFunction(m gpuprobe.Module, name string) (gpuprobe.Function, error) {
	err := d.enter(CallModuleGetFunction)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallModuleGetFunction)
	if err != nil {
		return 0, err
	}
	entries := c.modules[m]
	if entries == nil {
		return 0, cudaError(CallModuleGetFunction, errInvalidHandle, "")
	}
	for _, e := range entries {
		if e == name {
			f := gpuprobe.Function(d.nextHandle())
			c.funcs[f] = name
			return f, nil
		}
	}
	return 0, cudaError(CallModuleGetFunction, errNotFound, fmt.Sprintf("no kernel %q in the module", name))
}

// EventCreate creates an event with flags (gpuprobe.Event*): a wait on it
// blocks the thread with gpuprobe.EventBlockingSync, else spins (SpinTime).
func (d *Driver) EventCreate(flags uint32) (gpuprobe.Event, error) {
	err := d.enter(CallEventCreate)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallEventCreate)
	if err != nil {
		return 0, err
	}
	if flags&^(gpuprobe.EventBlockingSync|gpuprobe.EventDisableTiming) != 0 {
		return 0, cudaError(CallEventCreate, errInvalidValue, fmt.Sprintf("event flags %#x", flags))
	}
	e := gpuprobe.Event(d.nextHandle())
	c.events[e] = &event{flags: flags}
	return e, nil
}

func (d *Driver) event(call string, e gpuprobe.Event) (*event, error) {
	c, err := d.ctx(call)
	if err != nil {
		return nil, err
	}
	ev := c.events[e]
	if ev == nil {
		return nil, cudaError(call, errInvalidHandle, "")
	}
	return ev, nil
}

// EventRecord stamps the event with the time the stream reaches it: now,
// or when the work queued before it ends.
func (d *Driver) EventRecord(e gpuprobe.Event) error {
	err := d.enter(CallEventRecord)
	defer d.leave()
	if err != nil {
		return err
	}
	ev, err := d.event(CallEventRecord, e)
	if err != nil {
		return err
	}
	if d.clock(); d.stream.Before(d.vt) {
		d.stream = d.vt
	}
	ev.recorded, ev.at = true, d.stream
	return nil
}

// EventSynchronize waits until the stream has reached the event. As the
// CUDA driver API documents, the thread blocks only on an event created
// with CU_EVENT_BLOCKING_SYNC; on any other it busy-waits, whatever the
// context's scheduling flag: the wait is added to SpinTime.
func (d *Driver) EventSynchronize(e gpuprobe.Event) error {
	err := d.enter(CallEventSynchronize)
	defer d.leave()
	if err != nil {
		return err
	}
	ev, err := d.event(CallEventSynchronize, e)
	if err != nil {
		return err
	}
	if d.clock(); ev.recorded && ev.at.After(d.vt) {
		if ev.flags&gpuprobe.EventBlockingSync == 0 {
			d.spin += ev.at.Sub(d.vt)
		}
		d.vt = ev.at
	}
	return nil
}

// SpinTime is the host CPU time the driver's callers have spent
// busy-waiting: cuEventSynchronize on events without
// CU_EVENT_BLOCKING_SYNC, for as long as the event took to complete
// (virtual time; one core each). Waits that block (blocking events,
// cuCtxSynchronize and synchronous copies in the probe's
// CU_CTX_SCHED_BLOCKING_SYNC context) cost none.
func (d *Driver) SpinTime() time.Duration {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.spin
}

func (d *Driver) EventElapsed(start, end gpuprobe.Event) (time.Duration, error) {
	err := d.enter(CallEventElapsedTime)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	s, err := d.event(CallEventElapsedTime, start)
	if err != nil {
		return 0, err
	}
	e, err := d.event(CallEventElapsedTime, end)
	if err != nil {
		return 0, err
	}
	now := d.clock()
	if !s.recorded || !e.recorded {
		return 0, cudaError(CallEventElapsedTime, errInvalidHandle, "event not recorded")
	}
	if (s.flags|e.flags)&gpuprobe.EventDisableTiming != 0 {
		return 0, cudaError(CallEventElapsedTime, errInvalidHandle, "event created with CU_EVENT_DISABLE_TIMING")
	}
	if s.at.After(now) || e.at.After(now) {
		return 0, cudaError(CallEventElapsedTime, errNotReady, "")
	}
	return e.at.Sub(s.at), nil
}

func (d *Driver) EventDestroy(e gpuprobe.Event) error {
	err := d.enter(CallEventDestroy)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallEventDestroy)
	if err != nil {
		return err
	}
	if c.events[e] == nil {
		return cudaError(CallEventDestroy, errInvalidHandle, "")
	}
	delete(c.events, e)
	return nil
}
