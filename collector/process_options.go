package collector

import (
	"fmt"
	"os"
	"time"
)

// DefaultMaxProcessesPerGPU is the default cardinality cap of the process
// collector (--collector.process.max-per-gpu).
const DefaultMaxProcessesPerGPU = 64

// ProcessOptions configure the process and contention collectors.
type ProcessOptions struct {
	// ProcRoot is the procfs mount point used for process names, command
	// lines, users and cgroups; empty means /proc.
	ProcRoot string
	// MaxPerGPU keeps the MaxPerGPU processes with the most memory per GPU
	// and folds the others into one pid="other" series; 0 means
	// DefaultMaxProcessesPerGPU.
	MaxPerGPU int
	// Attributor maps a process to its container and pod; nil: none.
	Attributor ProcessAttributor
	// Allocations lists the pods a GPU or MIG device is allocated to (the
	// kubelet pod-resources API); nil: none.
	Allocations AllocationSource
	// Usage reads the CPU time, threads, resident memory and I/O of a GPU
	// process; nil: /proc/PID/stat and /proc/PID/io under ProcRoot.
	Usage ProcessUsageSource
	// UsageInterval is how often a process's usage is read again (it is
	// read when first seen); 0 means DefaultUsageInterval. At or below the
	// sampler interval it is read every cycle.
	UsageInterval time.Duration
	// ClockTick is the unit of /proc/PID/stat's CPU times per second
	// (USER_HZ); 0 means DefaultClockTick.
	ClockTick int
	// PageSize is the unit of /proc/PID/stat's rss in bytes; 0 means the
	// host's page size.
	PageSize int
	// SelfPID is the exporter's own PID as NVML reports it (its probe's
	// context runs in it): left out of the process, sharing-mode,
	// contention, attribution and cost metrics. 0 means SelfPID(ProcRoot).
	SelfPID uint32
}

func (o ProcessOptions) validate() error {
	if o.MaxPerGPU < 0 {
		return fmt.Errorf("process collector: max processes per GPU must not be negative, got %d", o.MaxPerGPU)
	}
	if o.UsageInterval < 0 {
		return fmt.Errorf("process collector: usage interval must not be negative, got %s", o.UsageInterval)
	}
	if o.ClockTick < 0 || o.PageSize < 0 {
		return fmt.Errorf("process collector: clock tick (%d) and page size (%d) must not be negative", o.ClockTick, o.PageSize)
	}
	return nil
}

func (o ProcessOptions) withDefaults() ProcessOptions {
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.MaxPerGPU == 0 {
		o.MaxPerGPU = DefaultMaxProcessesPerGPU
	}
	if o.UsageInterval == 0 {
		o.UsageInterval = DefaultUsageInterval
	}
	if o.ClockTick == 0 {
		o.ClockTick = DefaultClockTick
	}
	if o.PageSize == 0 {
		o.PageSize = os.Getpagesize()
	}
	if o.SelfPID == 0 {
		o.SelfPID = SelfPID(o.ProcRoot)
	}
	return o
}

// ProcessAttributor tells which container (and pod, or batch job) a host
// process runs in, typically from /proc/<pid>/cgroup. It is called once per
// process (pid and start time) and must return quickly; an unknown process
// gets the zero Attribution.
type ProcessAttributor interface {
	Attribute(pid uint32) Attribution
}

// Attribution is what is known about a process's container.
type Attribution struct {
	ContainerID string
	Runtime     string // docker, containerd, cri-o, podman, systemd, slurm, "" (host)
	PodUID      string
	Namespace   string
	Pod         string
	Container   string
	JobID       string
	// ProcessName, Cmdline and User are used when procfs cannot tell them
	// (a simulated fleet's processes are not this host's).
	ProcessName, Cmdline, User string
}

// AllocationSource lists the pod containers a device is allocated to, by
// whole-GPU UUID (including time-sliced replicas of that GPU) or MIG device
// UUID. It must answer from a cache: it is called on every sampler cycle.
type AllocationSource interface {
	Lookup(deviceIDs ...string) []Allocation
}

// Allocation is one container holding a GPU or MIG device.
type Allocation struct {
	Namespace, Pod, Container string
	// DeviceID is the GPU UUID (for a time-sliced or MPS replica
	// "GPU-…::N", the part before "::") or the MIG device UUID.
	DeviceID string
}
