package collector

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// What NVML showed of a GPU's processes over the last activityKeep, kept
// for the probe's unexplained stolen time (probe_unexplained.go,
// gpuprobe.EstimateUnexplained): NVML's per-process samples as read (every
// process's, the probe's own included), when they were last read, the MPS
// clients listed, and whether NVML has per-process utilisation on the GPU
// at all.

// activityKeep is how much of the per-process samples a GPU keeps for the
// probe: longer than a probe run over every device and the wait for its
// samples.
const activityKeep = 30 * time.Second

// ActivitySource tells what NVML showed of a GPU's (its gpu label)
// processes around [from, to]: its samples, or why it cannot tell
// (unknown, one of gpuprobe.UnknownReasons), or, with raw, that NVML has no
// per-process utilisation on the GPU (NOT_SUPPORTED, as in a vGPU guest).
type ActivitySource interface {
	NVMLActivity(gpu string, from, to time.Time) (a gpuprobe.NVMLActivity, unknown string, raw bool)
}

// activityLog is one GPU's recent per-process samples, written by its
// sampler goroutine and read by the probe's.
type activityLog struct {
	// wanted: a probe reads the log (Sampler.KeepActivity); until then
	// nothing is kept.
	wanted atomic.Bool

	mu      sync.Mutex
	samples []gpuprobe.ProcessSample // by time, roughly
	readAt  time.Time                // the last cycle that read the samples
	mps     []uint32                 // the MPS clients last listed
	state   activityState
}

// activityState is what the last cycle found of the GPU's per-process
// utilisation.
type activityState int

const (
	activityNone        activityState = iota // never read
	activityRead                             // samples read (or NOT_FOUND: none newer)
	activityUnsupported                      // NOT_SUPPORTED
	activityFailed                           // another error
	activityMIG                              // MIG mode: no per-process utilisation
)

// record adds a cycle's samples read at now with ret (SUCCESS, or NOT_FOUND
// read as none newer), the MPS clients listed, and forgets those older than
// activityKeep.
func (l *activityLog) record(samples []nvml.ProcessUtilizationSample, ret nvml.Return, mps []uint32, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch ret {
	case nvml.SUCCESS:
		l.state, l.readAt = activityRead, now
		// A sample read twice (a read of the whole buffer) is kept once.
		type key struct {
			pid uint32
			ts  time.Time
		}
		have := make(map[key]bool, len(l.samples))
		for _, s := range l.samples {
			have[key{s.PID, s.Time}] = true
		}
		for _, s := range samples {
			ps := gpuprobe.NVMLSample(s.Pid, s.TimeStamp, s.SmUtil)
			if k := (key{ps.PID, ps.Time}); !have[k] {
				have[k] = true
				l.samples = append(l.samples, ps)
			}
		}
	case nvml.ERROR_NOT_SUPPORTED:
		l.state = activityUnsupported
	default:
		l.state = activityFailed
	}
	l.mps = mps
	horizon := now.Add(-activityKeep)
	l.samples = slices.DeleteFunc(l.samples, func(s gpuprobe.ProcessSample) bool { return s.Time.Before(horizon) })
}

// recordMIG notes a cycle in MIG mode.
func (l *activityLog) recordMIG() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.state, l.samples = activityMIG, nil
}

// activity implements ActivitySource for one GPU: the samples from one
// activityKeep before from on (the sample period is inferred from them).
func (l *activityLog) activity(from, _ time.Time) (gpuprobe.NVMLActivity, string, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch l.state {
	case activityNone:
		return gpuprobe.NVMLActivity{}, gpuprobe.UnknownNoProcessUtilization, false
	case activityUnsupported:
		return gpuprobe.NVMLActivity{}, "", true
	case activityFailed:
		return gpuprobe.NVMLActivity{}, gpuprobe.UnknownUtilizationFailed, false
	case activityMIG:
		return gpuprobe.NVMLActivity{}, gpuprobe.UnknownMIG, false
	}
	horizon := from.Add(-activityKeep)
	a := gpuprobe.NVMLActivity{ReadUpTo: l.readAt, MPSClients: slices.Clone(l.mps)}
	for _, s := range l.samples {
		if !s.Time.Before(horizon) {
			a.Samples = append(a.Samples, s)
		}
	}
	return a, "", false
}

// KeepActivity makes every GPU keep its per-process samples for the probe
// (ActivitySource); call it before Run.
func (s *Sampler) KeepActivity() {
	for _, w := range s.workers {
		w.activity.wanted.Store(true)
	}
}

// NVMLActivity implements ActivitySource: the GPU with label gpu.
func (s *Sampler) NVMLActivity(gpu string, from, to time.Time) (gpuprobe.NVMLActivity, string, bool) {
	for _, w := range s.workers {
		if w.gpu == gpu {
			return w.activity.activity(from, to)
		}
	}
	return gpuprobe.NVMLActivity{}, gpuprobe.UnknownNoProcessUtilization, false
}

// SelfPID is the exporter's PID as NVML reports it, until its probe has
// found it in NVML's process list (Sampler.SetProbePID): NVML lists host
// PIDs, and procfs's self link under procRoot (the host's /proc in a
// container run with hostPID) names the process in that procfs's PID
// namespace; else os.Getpid(). In a container without the host's PID
// namespace both are the container's PID, not NVML's.
func SelfPID(procRoot string) uint32 {
	if procRoot != "" {
		if target, err := os.Readlink(filepath.Join(procRoot, "self")); err == nil {
			if pid, err := strconv.ParseUint(filepath.Base(target), 10, 32); err == nil && pid > 0 {
				return uint32(pid)
			}
		}
	}
	return uint32(os.Getpid())
}
