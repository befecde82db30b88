// Package gpuprobe measures what a GPU actually delivers, from the inside: the
// memory a context can really allocate, host↔device and device memory
// bandwidth, FP32 and tensor throughput, kernel launch latency and the time
// the GPU spent running someone else's work ("stolen time"). It is the
// tenant's view: it needs no NVML and sees neighbours that NVML hides
// (inside a VM or a container) by their effect on its own kernels.
//
// The probe drives the GPU through the small slice of the CUDA driver API in
// Driver. CUDA (cuda.go) binds it to libcuda.so.1 at run time with purego, no
// CUDA toolkit needed; kernels are PTX text JIT-compiled by the driver.
// simdriver implements the same interface for tests and the simulated fleet,
// so every measurement and its analysis run the same code on both.
package gpuprobe

import (
	"fmt"
	"time"
)

// DevicePtr is a device address (CUdeviceptr).
type DevicePtr uint64

// Opaque driver handles. Their values mean something only to the Driver
// that returned them.
type (
	Context  uintptr // CUcontext
	Module   uintptr // CUmodule
	Function uintptr // CUfunction
	Event    uintptr // CUevent
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z uint32 }

// Attribute is a CUdevice_attribute; the values are CUDA's.
type Attribute int

// The device attributes the probe reads (values from cuda.h).
const (
	AttrMaxThreadsPerBlock          Attribute = 1
	AttrClockRateKHz                Attribute = 13
	AttrMultiprocessorCount         Attribute = 16
	AttrComputeMode                 Attribute = 20 // CUcomputemode: ComputeMode*
	AttrPCIBusID                    Attribute = 33
	AttrPCIDeviceID                 Attribute = 34
	AttrMemoryClockRateKHz          Attribute = 36
	AttrGlobalMemoryBusWidth        Attribute = 37
	AttrL2CacheSize                 Attribute = 38 // bytes
	AttrMaxThreadsPerMultiprocessor Attribute = 39
	AttrPCIDomainID                 Attribute = 50
	AttrComputeCapabilityMajor      Attribute = 75
	AttrComputeCapabilityMinor      Attribute = 76
)

// CUcomputemode values (AttrComputeMode).
const (
	ComputeModeDefault          = 0 // any number of contexts, from any process
	ComputeModeExclusiveThread  = 1 // deprecated since CUDA 8; drivers report it no more
	ComputeModeProhibited       = 2 // no context can be created
	ComputeModeExclusiveProcess = 3 // one process at a time may hold contexts
)

// Driver is the slice of the CUDA driver API the probe uses. Methods after
// CtxCreate act on the calling OS thread's current context: the probe locks
// its goroutine to one thread (runtime.LockOSThread) from CtxCreate to
// CtxDestroy. Every error a Driver returns for a failed CUDA call is a
// *CUDAError.
type Driver interface {
	Init() error
	// DriverVersion is CUDA's encoding: 12040 for 12.4.
	DriverVersion() (int, error)
	DeviceCount() (int, error)
	DeviceName(ordinal int) (string, error)
	// DeviceUUID is formatted as NVML formats it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
	// (a MIG instance's CUDA device shows its MIG UUID as "MIG-…" when the
	// driver reports one).
	DeviceUUID(ordinal int) (string, error)
	DeviceAttribute(ordinal int, a Attribute) (int, error)
	DeviceTotalMem(ordinal int) (uint64, error)

	// CtxCreate creates a context with CU_CTX_SCHED_BLOCKING_SYNC (0x04):
	// a thread waiting for the GPU (cuCtxSynchronize, cuEventSynchronize)
	// sleeps on an OS primitive instead of spinning a CPU core.
	CtxCreate(ordinal int) (Context, error)
	CtxDestroy(Context) error
	CtxSynchronize() error

	MemGetInfo() (free, total uint64, err error)
	MemAlloc(bytes uint64) (DevicePtr, error)
	MemFree(DevicePtr) error
	MemsetD8(dst DevicePtr, value byte, n uint64) error
	// MemAllocHost returns page-locked host memory (cuMemAllocHost_v2).
	MemAllocHost(bytes uint64) ([]byte, error)
	MemFreeHost([]byte) error
	MemcpyHtoD(dst DevicePtr, src []byte) error
	MemcpyDtoH(dst []byte, src DevicePtr) error

	// ModuleLoadData JIT-compiles PTX text; the error carries the JIT log.
	ModuleLoadData(ptx string) (Module, error)
	ModuleUnload(Module) error
	ModuleGetFunction(m Module, name string) (Function, error)
	// LaunchKernel launches f on the default stream. Every kernel of this
	// package takes only .u64 parameters, passed in args in order.
	LaunchKernel(f Function, grid, block Dim3, sharedMemBytes uint32, args ...uint64) error

	// EventCreate is cuEventCreate with flags (EventBlockingSync, …).
	EventCreate(flags uint32) (Event, error)
	EventRecord(Event) error
	// EventSynchronize waits until the event completes: blocking the
	// thread when the event has EventBlockingSync, else busy-waiting
	// (whatever the context's scheduling flag).
	EventSynchronize(Event) error
	EventElapsed(start, end Event) (time.Duration, error)
	EventDestroy(Event) error

	// Now is the host clock the driver's calls are timed against: time.Now
	// for a real GPU, a virtual clock for a simulated one.
	Now() time.Time
}

// CUDAError is a failed CUDA driver call.
type CUDAError struct {
	Call string // "cuMemAlloc_v2"
	Code int    // CUresult: 2 CUDA_ERROR_OUT_OF_MEMORY, 100 CUDA_ERROR_NO_DEVICE, ...
	Name string // "CUDA_ERROR_OUT_OF_MEMORY"
	Msg  string // cuGetErrorString, or the JIT log for a module load
}

func (e *CUDAError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s: %s (%d): %s", e.Call, e.Name, e.Code, e.Msg)
	}
	return fmt.Sprintf("%s: %s (%d)", e.Call, e.Name, e.Code)
}

// CUevent_flags (cuEventCreate). The CUDA driver API documents that
// cuEventSynchronize blocks the calling thread only for an event created
// with CU_EVENT_BLOCKING_SYNC; on any other event it busy-waits until the
// event completes, whatever the context's CU_CTX_SCHED_* flag says. Timing
// stays on unless EventDisableTiming is given, so the probe's events are
// EventBlockingSync alone (probeEventFlags).
const (
	EventDefault       = 0x0 // CU_EVENT_DEFAULT: timing on, busy-wait
	EventBlockingSync  = 0x1 // CU_EVENT_BLOCKING_SYNC: cuEventSynchronize blocks
	EventDisableTiming = 0x2 // CU_EVENT_DISABLE_TIMING
)

// probeEventFlags are the flags of every event the probe and the burn
// create: timing events whose wait blocks instead of spinning a core.
const probeEventFlags = EventBlockingSync

// CUresult codes the probe treats specially.
const (
	CUDASuccess          = 0
	CUDAErrOutOfMemory   = 2
	CUDAErrNotInitalized = 3
	CUDAErrDeviceUnavail = 46 // CUDA_ERROR_DEVICE_UNAVAILABLE: exclusive or prohibited compute mode
	CUDAErrNoDevice      = 100
	CUDAErrInvalidDevice = 101
	CUDAErrInvalidPTX    = 218
	CUDAErrLaunchTimeout = 702
)
