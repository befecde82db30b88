package collector

import (
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// What NVML showed of a GPU's visible processes over a span of time, kept
// for the probe (probe.go): the exporter's own processes are left out, so
// are MPS clients (they run inside the MPS server's context, which NVML
// lists as a process of its own, and never pause a time-sliced context).

// activityKeep is how much of the per-process sample timeline a GPU keeps
// for the probe: longer than a probe run over every device and the wait
// for its samples.
const activityKeep = 30 * time.Second

// activityWiden is how far around a probe's span the samples are looked for
// when none overlaps it (a sample period longer than the span), and how far
// back from the newest sample when none lies that near.
const activityWiden = time.Second

// VisibleActivity is what NVML showed on a GPU over a span of time.
type VisibleActivity struct {
	// SM is, per visible process with samples near the span, its
	// time-weighted mean SM utilisation (0-1) over the samples that
	// overlap the span.
	SM map[uint32]float64
}

// ActivitySource tells what NVML showed on a GPU (its gpu label) over
// [from, to]. known is false when the source cannot tell at all (no
// per-process utilisation on that GPU, or the process collectors are off);
// covered is false while NVML's samples have not been read up to to yet.
type ActivitySource interface {
	VisibleActivity(gpu string, from, to time.Time) (a VisibleActivity, known, covered bool)
}

// activityLog is one GPU's recent visible-process timeline, written by its
// sampler goroutine and read by the probe's.
type activityLog struct {
	// wanted: a probe reads the log (Sampler.KeepActivity); until then
	// nothing is kept.
	wanted atomic.Bool

	mu     sync.Mutex
	ivs    []interval // by end time, roughly
	readAt time.Time  // the last cycle that read the samples
	known  bool
}

// record appends a cycle's intervals (µs) read at now, less self's and
// MPS clients', and forgets those older than activityKeep.
func (l *activityLog) record(ivs []interval, skip func(pid uint32) bool, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, iv := range ivs {
		if !skip(iv.pid) {
			l.ivs = append(l.ivs, iv)
		}
	}
	horizon := uint64(now.Add(-activityKeep).UnixMicro())
	i := 0
	for i < len(l.ivs) && l.ivs[i].end < horizon {
		i++
	}
	l.ivs = slices.Delete(l.ivs, 0, i)
	l.readAt, l.known = now, true
}

// VisibleActivity implements ActivitySource for one GPU.
func (l *activityLog) activity(from, to time.Time) (VisibleActivity, bool, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.known {
		return VisibleActivity{}, false, false
	}
	a := VisibleActivity{SM: map[uint32]float64{}}
	// The span, else a second around it, else the last second of samples
	// before its end (a simulated driver's clock runs ahead of NVML's),
	// else the first second after its start (a simulated fleet whose time
	// has not started).
	var newest uint64
	earliest := uint64(math.MaxUint64)
	for _, iv := range l.ivs {
		if iv.end <= uint64(to.Add(activityWiden).UnixMicro()) {
			newest = max(newest, iv.end)
		}
		if iv.start >= uint64(from.UnixMicro()) {
			earliest = min(earliest, iv.start)
		}
	}
	spans := [][2]uint64{
		{uint64(from.UnixMicro()), uint64(to.UnixMicro())},
		{uint64(from.Add(-activityWiden).UnixMicro()), uint64(to.Add(activityWiden).UnixMicro())},
		{newest - min(newest, uint64(activityWiden.Microseconds())), newest},
		{earliest, earliest + uint64(activityWiden.Microseconds())},
	}
	for _, span := range spans {
		lo, hi := span[0], span[1]
		sums, covered := map[uint32]float64{}, map[uint32]float64{}
		for _, iv := range l.ivs {
			s, e := max(iv.start, lo), min(iv.end, hi)
			if e <= s {
				continue
			}
			sec := float64(e-s) / 1e6
			sums[iv.pid] += iv.sm * sec
			covered[iv.pid] += sec
		}
		for pid, c := range covered {
			a.SM[pid] = sums[pid] / c
		}
		if len(a.SM) > 0 {
			break
		}
	}
	return a, true, !l.readAt.Before(to)
}

// KeepActivity makes every GPU keep its visible-process timeline for the
// probe (ActivitySource); call it before Run.
func (s *Sampler) KeepActivity() {
	for _, w := range s.workers {
		w.activity.wanted.Store(true)
	}
}

// VisibleActivity implements ActivitySource: the GPU with label gpu.
func (s *Sampler) VisibleActivity(gpu string, from, to time.Time) (VisibleActivity, bool, bool) {
	for _, w := range s.workers {
		if w.gpu == gpu {
			return w.activity.activity(from, to)
		}
	}
	return VisibleActivity{}, false, false
}

// SelfPID is the exporter's PID as NVML reports it: NVML lists host PIDs,
// and procfs's self link under procRoot (the host's /proc in a container
// run with hostPID) names the process in that procfs's PID namespace; else
// os.Getpid().
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

// unexplainedStolen is gpuprobe.UnexplainedStolen over the visible
// processes' SM shares.
func unexplainedStolen(raw float64, visible map[uint32]float64) float64 {
	us := make([]float64, 0, len(visible))
	for _, u := range visible {
		us = append(us, u)
	}
	return gpuprobe.UnexplainedStolen(raw, us)
}
