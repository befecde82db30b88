package simdriver

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

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
	onLag               func(time.Duration)

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
		onLag:   opts.Lag,
		fails:   map[string]int{},
		hangs:   map[string]chan struct{}{},
		nextPtr: 0x7f0000000000,
		ctxs:    map[gpuprobe.Context]*simContext{},
		host:    map[*byte]int{},
	}
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
	if len(d.ctxs) == 0 && d.lag != 0 {
		d.lag = 0 // no context: nothing times the GPU, the clock catches up
		d.tellLag()
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
		if took := d.now().Sub(d.callStart); took > 0 {
			d.lag += took
			d.tellLag()
		}
	}
	d.inCall = false
	d.mu.Unlock()
}

// tellLag tells Options.Lag the lag; d.mu held.
func (d *Driver) tellLag() {
	if d.onLag != nil {
		d.onLag(d.lag)
	}
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
