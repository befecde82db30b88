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
}

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
	// MaxMemoryBytes caps the device memory and the pinned host memory the
	// measurements (not the fill test) allocate.
	MaxMemoryBytes uint64
	// GPUTimeBudget caps the GPU time of the timed kernels and copies
	// together (the stolen-time window included); sizes are calibrated to it.
	GPUTimeBudget time.Duration
	// StolenWindow is how long the stolen-time kernel watches the timer.
	StolenWindow time.Duration
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
}

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

// StolenResult is the stolen-time kernel's finding.
type StolenResult struct {
	Window          time.Duration `json:"window_ns"`           // median observed window per block
	Threshold       time.Duration `json:"threshold_ns"`        // gap threshold used
	TimerResolution time.Duration `json:"timer_resolution_ns"` // smallest timer step seen
	Blocks          int           `json:"blocks"`
	// Ratio is the share of the window lost in gaps: the median over
	// blocks of (sum of gaps / window). ~0 on a GPU that is ours alone.
	Ratio    float64 `json:"ratio"`
	MaxRatio float64 `json:"max_ratio"` // the worst block
	Gaps     int     `json:"gaps"`      // median number of gaps per block
	// Gap lengths over the kept gaps of every block: the time slices the
	// GPU gave to others.
	GapMedian time.Duration `json:"gap_median_ns,omitempty"`
	GapP90    time.Duration `json:"gap_p90_ns,omitempty"`
	GapMax    time.Duration `json:"gap_max_ns,omitempty"`
}

// MeasurementError is a measurement that failed or was cut short.
type MeasurementError struct {
	Measurement string `json:"measurement"`
	Err         string `json:"error"`
	// Code is the CUresult when a CUDA call failed, else 0.
	Code int `json:"cuda_code,omitempty"`
}
