package gpuprobe

import (
	"context"
	"time"
)

// Prober runs the probe on the CUDA devices it sees. *Probe implements it
// over any Driver (the real libcuda or simdriver); callers (gpulens-verify,
// the exporter's probe collector) depend on this interface only.
type Prober interface {
	// Devices lists the CUDA-visible devices (after CUDA_VISIBLE_DEVICES;
	// under MIG, the MIG instances CUDA exposes).
	Devices(ctx context.Context) ([]DeviceInfo, error)
	// Probe measures one device. It returns within ctx's deadline even if a
	// driver call hangs (the call is left running on its locked thread and
	// later probes of that Prober fail fast with ErrBusy until it returns).
	// A measurement that fails is recorded in Result.Errors and the others
	// still run; err is non-nil only when nothing could be measured.
	Probe(ctx context.Context, ordinal int, cfg Config) (Result, error)
}

// DeviceInfo is what CUDA says of a device, without creating a context.
type DeviceInfo struct {
	Ordinal           int    `json:"ordinal"`
	Name              string `json:"name"`
	UUID              string `json:"uuid"`
	PCIBusID          string `json:"pci_bus_id"`         // "00000000:18:00.0", NVML's format
	ComputeCapability string `json:"compute_capability"` // "9.0"
	SMs               int    `json:"sms"`
	TotalMemoryBytes  uint64 `json:"total_memory_bytes"`
	DriverVersion     int    `json:"cuda_driver_version"` // 12040 for 12.4
	// ComputeMode is CU_DEVICE_ATTRIBUTE_COMPUTE_MODE (ComputeMode*): the
	// probe creates a context only in ComputeModeDefault.
	ComputeMode int `json:"compute_mode"`
	// L2CacheBytes is CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: the device-copy
	// buffers must each be at least L2BufferFactor times larger.
	L2CacheBytes int `json:"l2_cache_bytes"`
	// MaxThreadsPerSM is CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
	// the copy kernel fills every SM to it.
	MaxThreadsPerSM int `json:"max_threads_per_sm"`
}

// Reasons a Probe creates no context (Result.Skipped), the reason label of
// gpulens_probe_skipped_total.
const (
	// SkipComputeModeExclusiveProcess: the device is in EXCLUSIVE_PROCESS
	// compute mode; a context of ours would make a job of the tenant's
	// starting meanwhile fail (CUDA_ERROR_DEVICE_UNAVAILABLE).
	SkipComputeModeExclusiveProcess = "compute_mode_exclusive_process"
	// SkipComputeModeExclusiveThread: the deprecated EXCLUSIVE_THREAD mode.
	SkipComputeModeExclusiveThread = "compute_mode_exclusive_thread"
	// SkipComputeModeProhibited: no context may be created on the device.
	SkipComputeModeProhibited = "compute_mode_prohibited"
	// SkipFreeMemoryLow: the device's free memory is below
	// Config.MaxMemoryBytes + Config.ContextReserveBytes.
	SkipFreeMemoryLow = "free_memory_low"
	// SkipMIGInstanceNotVisible: a MIG instance this process cannot see
	// (CUDA enumerates one MIG instance per process). Set by callers that
	// know the instances from NVML, never by Probe.
	SkipMIGInstanceNotVisible = "mig_instance_not_visible"
)

// SkipReasons lists every skip reason.
var SkipReasons = []string{SkipComputeModeExclusiveProcess, SkipComputeModeExclusiveThread, SkipComputeModeProhibited, SkipFreeMemoryLow, SkipMIGInstanceNotVisible}

// Skip says why a Probe left a device alone.
type Skip struct {
	Reason string `json:"reason"` // one of SkipReasons
	Detail string `json:"detail"` // the figures behind it, for people
}

// FreeMemoryFunc returns a device's free memory as NVML reports it, before
// the probe creates a context (CUDA cannot tell free memory without one),
// and whether it is known. It is called on the probe's locked thread and
// must return quickly.
type FreeMemoryFunc func(DeviceInfo) (free uint64, known bool)

// Measurement names, used in Config.Skip, Result.Errors and metric labels.
const (
	MeasureMemory     = "memory"      // cuMemGetInfo (+ the fill test when Config.Fill)
	MeasureH2D        = "h2d"         // pinned host to device copy
	MeasureD2H        = "d2h"         // device to pinned host copy
	MeasureDeviceCopy = "device_copy" // copy kernel
	MeasureFP32       = "fp32"        // FMA kernel
	MeasureFP16       = "fp16_tensor" // mma.sync f16
	MeasureBF16       = "bf16_tensor" // mma.sync bf16
	MeasureLaunch     = "launch"      // empty kernel round trip
	MeasureStolen     = "stolen"      // %globaltimer gap kernel
)

// Measurements lists every measurement in the order Probe runs them.
var Measurements = []string{MeasureMemory, MeasureH2D, MeasureD2H, MeasureDeviceCopy, MeasureFP32, MeasureFP16, MeasureBF16, MeasureLaunch, MeasureStolen}

// Config bounds one Probe call. The zero value is not valid; start from
// DefaultConfig (gpulens-verify) or ExporterConfig (the continuous probe).
type Config struct {
	// MaxMemoryBytes caps the device memory the probe takes, its context's
	// own memory included (the rest is for the measurement buffers), and the
	// pinned host memory the measurements (not the fill test) allocate.
	MaxMemoryBytes uint64
	// ContextReserveBytes is the margin for the context: the probe creates
	// no context unless free memory is at least MaxMemoryBytes +
	// ContextReserveBytes, and, while the context's own memory is unknown
	// (no free-memory figure before the context), assumes the context takes
	// this much of MaxMemoryBytes.
	ContextReserveBytes uint64
	// GPUTimeBudget caps the GPU time of the timed kernels and copies
	// together (the stolen-time window included); sizes are calibrated to it.
	GPUTimeBudget time.Duration
	// StolenWindow is how long the stolen-time kernel watches the timer in
	// all: StolenWindows windows of StolenWindow / StolenWindows each,
	// spread between the other measurements (see Result.Stolen).
	StolenWindow time.Duration
	// StolenWindows is how many windows StolenWindow is split into; 0
	// means 1 (one window after the other measurements).
	StolenWindows int
	// GapThreshold is the shortest timer step counted as a gap; raised to
	// 10x the measured timer resolution when that is coarser.
	GapThreshold time.Duration
	// MaxGaps is how many gaps each block keeps (the count and total are
	// exact beyond it).
	MaxGaps int
	// Fill enables the allocation test: allocate and touch FillStep-sized
	// chunks until allocation fails or FillLimitBytes is reached, then free.
	Fill           bool
	FillStep       uint64
	FillLimitBytes uint64 // 0: no limit beyond what the driver grants
	// Skip names measurements not to run.
	Skip []string
}

// Result is one Probe of one device. Zero figures mean "not measured"; see
// Errors for why.
type Result struct {
	Device   DeviceInfo    `json:"device"`
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"` // wall time of the whole probe
	GPUTime  time.Duration `json:"gpu_time_ns"` // timed kernels and copies

	// Skipped is set when the probe created no context (or destroyed it at
	// once) and measured nothing; Errors is then empty.
	Skipped *Skip `json:"skipped,omitempty"`
	// FreeBeforeBytes is the free memory Options.FreeMemory reported before
	// the context was created (0: unknown).
	FreeBeforeBytes uint64 `json:"free_before_bytes,omitempty"`
	// ContextMemoryBytes is the context's own memory: the drop in free
	// memory from FreeBeforeBytes to cuMemGetInfo's free right after the
	// context was created (0: unknown). It counts in MaxMemoryBytes.
	ContextMemoryBytes uint64 `json:"context_memory_bytes,omitempty"`
	// NVMLPID is this process as NVML reports it: the one PID NVML's
	// process lists gained when the probe created its context
	// (Options.Processes); 0 when not known (no lister, or none or
	// several PIDs appeared). Callers leave it out of the tenants; they
	// fall back to getpid() (or a host procfs's self link) only while it
	// is 0.
	NVMLPID uint32 `json:"nvml_pid,omitempty"`
	// BufferBudgetBytes is the device memory the measurement buffers may
	// take: what they need on this device (BufferNeed), at most what
	// MaxMemoryBytes leaves after ContextMemoryBytes, counted as at most
	// Config.ContextReserveBytes (and as that when unknown).
	BufferBudgetBytes uint64 `json:"buffer_budget_bytes,omitempty"`

	Memory *MemoryResult `json:"memory,omitempty"`

	H2DBytesPerSecond        float64 `json:"h2d_bytes_per_second,omitempty"`
	D2HBytesPerSecond        float64 `json:"d2h_bytes_per_second,omitempty"`
	DeviceCopyBytesPerSecond float64 `json:"device_copy_bytes_per_second,omitempty"` // read + written bytes

	FP32FLOPS       float64 `json:"fp32_flops,omitempty"`
	FP16TensorFLOPS float64 `json:"fp16_tensor_flops,omitempty"`
	BF16TensorFLOPS float64 `json:"bf16_tensor_flops,omitempty"`

	// LaunchLatency is the median round trip of an empty kernel
	// (cuLaunchKernel + cuCtxSynchronize); LaunchLatencyP99 its 99th
	// percentile over the launches of this probe.
	LaunchLatency    time.Duration `json:"launch_latency_ns,omitempty"`
	LaunchLatencyP99 time.Duration `json:"launch_latency_p99_ns,omitempty"`

	Stolen *StolenResult `json:"stolen,omitempty"`

	Errors []MeasurementError `json:"errors,omitempty"`
	// NotReported lists the measurements that ran into a limit of the
	// configuration rather than a failure (their figure is absent, and
	// they are not Errors): see NotReported* for the reasons.
	NotReported []NotReported `json:"not_reported,omitempty"`

	// Child is set when the probe ran in a child process of its own (a
	// MIG instance this process's CUDA does not show: ChildProber): what
	// that process cost.
	Child *ChildUsage `json:"child,omitempty"`
}

// Reasons a measurement is not reported (NotReported.Reason; the reason
// label of gpulens_probe_not_reported_total).
const (
	// NotReportedBufferBudgetBelowL2: the buffer budget (MaxMemoryBytes
	// less the context's memory) cannot hold two device-copy buffers of
	// L2BufferFactor × the L2 cache, so the copy would run from the L2 and
	// its figure would be the cache's.
	NotReportedBufferBudgetBelowL2 = "buffer_budget_below_l2"
)

// NotReportedReasons lists every NotReported reason.
var NotReportedReasons = []string{NotReportedBufferBudgetBelowL2}

// NotReported is a measurement the probe did not report for a reason of
// its configuration, not a failure.
type NotReported struct {
	Measurement string `json:"measurement"`
	Reason      string `json:"reason"` // one of NotReportedReasons
	Detail      string `json:"detail"` // the figures behind it, for people
}

// notReportedError is what a measurement returns when it is not reported.
type notReportedError struct{ reason, detail string }

func (e *notReportedError) Error() string { return "not reported: " + e.detail }

// MemoryResult is the memory a context sees.
type MemoryResult struct {
	FreeBytes  uint64 `json:"free_bytes"`  // cuMemGetInfo free, after our context exists
	TotalBytes uint64 `json:"total_bytes"` // cuMemGetInfo total
	// Fill test (Config.Fill): bytes allocated and touched before the
	// driver refused or the limit was reached.
	FillTested  bool   `json:"fill_tested"`
	UsableBytes uint64 `json:"usable_bytes,omitempty"`
	FillStopped string `json:"fill_stopped,omitempty"` // "out_of_memory", "limit", "deadline" or an error
}

// StolenResult is the stolen-time kernel's finding over all its windows
// (Config.StolenWindows launches spread over the probe; Windows lists each).
type StolenResult struct {
	// Window is the time watched: the sum over the windows of each one's
	// median observed window per block.
	Window time.Duration `json:"window_ns"`
	// WindowPlanned is the sum of the windows the kernel was launched
	// with: Config's StolenWindow, or less when the GPU-time budget left
	// was shorter (or a window failed).
	WindowPlanned   time.Duration `json:"window_planned_ns"`
	Threshold       time.Duration `json:"threshold_ns"`        // gap threshold used
	TimerResolution time.Duration `json:"timer_resolution_ns"` // smallest timer step seen
	Blocks          int           `json:"blocks"`
	// Ratio is the share of the watched time lost in gaps: the mean of
	// the windows' ratios weighted by their length. A window's ratio is
	// the median over blocks of (sum of gaps / covered window). ~0 on a
	// GPU that is ours alone. The covered window is the whole window,
	// except when the threshold had to be raised for a coarse timer and a
	// block saw more gaps than it kept: then it is from the first reading
	// to the end of the last kept gap (the part of the window the kept
	// gaps describe).
	Ratio float64 `json:"ratio"`
	// Coverage is the windows' median over blocks of covered window /
	// window, weighted by their length (1 unless the gap records ran out,
	// see Ratio).
	Coverage float64 `json:"coverage"`
	MaxRatio float64 `json:"max_ratio"` // the worst block of any window
	Gaps     int     `json:"gaps"`      // median number of gaps per block, summed over the windows
	// Gap lengths over the kept gaps of every block: the time slices the
	// GPU gave to others.
	GapMedian time.Duration `json:"gap_median_ns,omitempty"`
	GapP90    time.Duration `json:"gap_p90_ns,omitempty"`
	GapMax    time.Duration `json:"gap_max_ns,omitempty"`
	// Windows are the windows in the order they ran: when (host clock,
	// from just before the launch to just after the kernel was waited
	// for; NVML's sample timestamps are on the same clock) and the share
	// of each lost in gaps. The unexplained stolen time is worked out per
	// window (EstimateUnexplained).
	Windows []StolenWindow `json:"windows,omitempty"`
}

// StolenWindow is one window of the stolen-time kernel.
type StolenWindow struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Window is the median observed window per block (End - Start less
	// the launch and the wait).
	Window time.Duration `json:"window_ns"`
	Ratio  float64       `json:"ratio"`
}

// MeasurementError is a measurement that failed or was cut short.
type MeasurementError struct {
	Measurement string `json:"measurement"`
	Err         string `json:"error"`
	// Code is the CUresult when a CUDA call failed, else 0.
	Code int `json:"cuda_code,omitempty"`
}
