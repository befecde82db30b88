// Package simdriver is a simulated CUDA driver: it implements gpuprobe.Driver
// for tests and for the simulated fleet (internal/sim/gpusim), emulating the
// probe's kernels by name with durations derived from each device's figures
// on a virtual clock, and injecting faults on request.
package simdriver

import (
	"time"
)

// Device is one simulated CUDA device. Figures are what the device delivers
// when nothing else runs; Slowdown and Neighbour vary them over time.
type Device struct {
	Name              string
	UUID              string // "GPU-…" or "MIG-…"
	PCIBusID          string // "00000000:18:00.0"
	CCMajor, CCMinor  int
	SMs               int
	TotalMemoryBytes  uint64
	ClockRateKHz      int
	MemoryClockKHz    int
	MemoryBusWidthBit int
	// L2CacheBytes is CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE (0: none reported).
	L2CacheBytes int
	// MaxThreadsPerSM is CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR
	// (0: 2048).
	MaxThreadsPerSM int
	// ComputeMode is CU_DEVICE_ATTRIBUTE_COMPUTE_MODE (gpuprobe.ComputeMode*;
	// 0: DEFAULT). In PROHIBITED mode cuCtxCreate fails with
	// CUDA_ERROR_DEVICE_UNAVAILABLE; in EXCLUSIVE_PROCESS mode it does while
	// OtherContexts says another process holds a context on the device.
	ComputeMode int
	// OtherContexts is how many other processes hold a context on the
	// device at t (nil: none).
	OtherContexts func(t time.Time) int
	// ContextMemoryBytes is the device memory each context of ours takes
	// on creation (the driver's own per-context allocations), counted in
	// MemGetInfo's free and in what allocations can get; cuCtxCreate fails
	// with CUDA_ERROR_OUT_OF_MEMORY when it does not fit.
	ContextMemoryBytes uint64

	H2DBytesPerSecond        float64
	D2HBytesPerSecond        float64
	DeviceCopyBytesPerSecond float64
	FP32FLOPS                float64
	FP16TensorFLOPS          float64 // 0 with CCMajor < 8: the tensor module fails to load
	BF16TensorFLOPS          float64
	LaunchLatency            time.Duration // empty kernel round trip
	TimerResolution          time.Duration // %globaltimer step

	// UsedByOthers is device memory held by other contexts at t (nil: none);
	// it lowers MemGetInfo's free and what allocations can get.
	UsedByOthers func(t time.Time) uint64
	// Slowdown is the fraction (0,1] of the figures delivered at t (a
	// throttled GPU); nil: 1.
	Slowdown func(t time.Time) float64
	// Neighbour is another context time-sliced with ours at t: the share of
	// GPU time it takes (0 none) and the length of its time slice. Our
	// kernels are stretched by 1/(1-share) and the stolen-time kernel sees
	// gaps of length slice; nil: none.
	Neighbour func(t time.Time) (share float64, slice time.Duration)
	// Context, when set, is told when a context is created on the device
	// (open) and destroyed, at the driver's virtual time: a simulated fleet
	// lists the process holding it in NVML meanwhile, as a real driver
	// does. It must not call the Driver.
	Context func(open bool, at time.Time)
	// Kernel, when set, is told each kernel's run on the device, from the
	// time it starts to the time it ends on the driver's virtual clock
	// (launch latency and the queue before it excluded; an empty kernel,
	// which takes no time, is not reported): a simulated fleet shows our
	// context busy then, time-sliced with the other busy contexts, as the
	// driver's per-process utilisation does. It must not call the Driver.
	Kernel func(start, end time.Time)
}

// Options configure a Driver.
type Options struct {
	// Now is the base clock; the driver's virtual clock never runs behind
	// it less the time spent inside the driver's calls while a context is
	// live (see Driver), and advances by the simulated duration of every
	// call. Nil: time.Now.
	Now  func() time.Time
	Seed int64
	// DriverVersion is what DriverVersion reports, CUDA's encoding (12040
	// for 12.4); 0: 12040.
	DriverVersion int
	// VisibleDevices is CUDA_VISIBLE_DEVICES: a comma-separated list of
	// device UUIDs ("GPU-…", "MIG-…") or indices into the devices given to
	// New, in the order CUDA enumerates them; "" shows every device.
	// Whatever it says, a process sees at most one MIG device, the first
	// visible one, as CUDA enumerates a single MIG instance per process.
	VisibleDevices string
	// Lag, when set, is told the driver's lag each time it changes: the
	// base-clock time spent inside its own calls while a context is live,
	// which its virtual clock leaves out (see Driver); 0 once no context is
	// live. A kernel the driver queues later starts no earlier than the
	// base clock less this lag, so a simulated fleet that reports the
	// driver's kernels in NVML's per-process samples holds its periods back
	// by it while the probe's context is open (a driver reports a period
	// once it is over on the GPU's clock). It is called with the driver's
	// lock held and must not call the Driver.
	Lag func(lag time.Duration)
}
