package collector

import (
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// gpuProcess is one process on a GPU (or MIG instance) in one cycle.
type gpuProcess struct {
	pid                       uint32
	gi, ci                    uint32 // noInstance outside MIG
	typ                       string // compute, graphics, mps
	memory                    uint64 // bytes
	info                      *procInfo
	migUUID                   string
	namespace, pod, container string

	hasUtil           bool // utilisation samples are available on this GPU
	sm, mem, enc, dec float64
	active            bool
	busyTotal         float64 // cumulative SM busy seconds
	attributed        float64 // busy seconds attributed this cycle
}

// processReading is a GPU's processes and their activity in one cycle.
type processReading struct {
	listed  bool // at least one process list was read
	procs   []*gpuProcess
	kept    []*gpuProcess // the top MaxPerGPU by memory
	folded  []*gpuProcess // the rest
	mps     bool          // an MPS process is running
	utilOK  bool          // per-process utilisation is available
	mig     *migReading
	allocs  []Allocation // pod allocations of the GPU and its MIG devices
	active  int          // processes with SM activity this cycle
	cycle   utilCycle
	otherSM float64 // cumulative busy seconds of folded processes

	contendedTotal float64
}

// processTracker reads the process lists and utilisation samples of one GPU
// and keeps what must survive between cycles.
type processTracker struct {
	opts      ProcessOptions
	uuid      string
	timeline  utilTimeline
	cache     *procCache
	busy      map[uint32]float64 // cumulative SM busy seconds by pid, while listed
	otherBusy float64
	contended float64
	series    map[procKey]*processSeries // label pairs of the listed processes
	// activity, when set, receives every cycle's per-process samples
	// (for the probe).
	activity *activityLog
	// probePID, when set and not 0, is the exporter's own PID as its probe
	// found it in NVML's process list: left out in place of opts.SelfPID.
	probePID *atomic.Uint32
}

// self is the exporter's own PID as NVML reports it: the one its probe
// found, else ProcessOptions.SelfPID.
func (t *processTracker) self() uint32 {
	if t.probePID != nil {
		if pid := t.probePID.Load(); pid != 0 {
			return pid
		}
	}
	return t.opts.SelfPID
}

// seriesOf returns the label pairs of a listed process.
func (t *processTracker) seriesOf(p *gpuProcess) *processSeries {
	k := procKey{p.pid, p.gi, p.ci}
	ps := t.series[k]
	if ps == nil {
		ps = &processSeries{}
		t.series[k] = ps
	}
	return ps
}

func newProcessTracker(uuid string, opts ProcessOptions) processTracker {
	return processTracker{opts: opts, uuid: uuid, cache: newProcCache(opts.ProcRoot, opts.Attributor), busy: map[uint32]float64{},
		series: map[procKey]*processSeries{}}
}

// typePriority orders the process lists: a process in several lists is
// reported once, with the first list's type.
var processLists = []struct {
	typ  string
	call string
	get  func(nvml.Device) ([]nvml.ProcessInfo, nvml.Return)
}{
	{"mps", "GetMPSComputeRunningProcesses", nvml.Device.GetMPSComputeRunningProcesses},
	{"compute", "GetComputeRunningProcesses", nvml.Device.GetComputeRunningProcesses},
	{"graphics", "GetGraphicsRunningProcesses", nvml.Device.GetGraphicsRunningProcesses},
}

type procKey struct{ pid, gi, ci uint32 }

func (t *processTracker) read(r *Reader, now time.Time, interval time.Duration, mig *migReading) *processReading {
	out := &processReading{mig: mig}
	self := t.self()
	byKey := map[procKey]*gpuProcess{}
	for _, l := range processLists {
		ps, ok := Call(r, l.call, func() ([]nvml.ProcessInfo, nvml.Return) { return l.get(r.Device) })
		if !ok {
			continue
		}
		out.listed = true
		for _, p := range ps {
			if p.Pid == self {
				continue // the exporter itself: its probe's context
			}
			k := procKey{p.Pid, p.GpuInstanceId, p.ComputeInstanceId}
			if gp := byKey[k]; gp != nil {
				gp.memory = max(gp.memory, p.UsedGpuMemory)
				continue
			}
			gp := &gpuProcess{pid: p.Pid, gi: p.GpuInstanceId, ci: p.ComputeInstanceId, typ: l.typ, memory: p.UsedGpuMemory}
			byKey[k] = gp
			out.procs = append(out.procs, gp)
			out.mps = out.mps || l.typ == "mps"
		}
	}
	live := map[uint32]bool{}
	for _, p := range out.procs {
		live[p.pid] = true
	}
	isLive := func(pid uint32) bool { return live[pid] }

	// Utilisation samples: unsupported in MIG mode.
	if mig == nil || !mig.enabled {
		t.timeline.maxCover = uint64(interval.Microseconds())
		since := t.timeline.lastSeen
		// The first read asks for NVML's whole buffer when the probe keeps
		// the samples (its first windows may precede the first cycle); the
		// timeline integrates only those of the last interval.
		ask := since
		if since == 0 {
			since = uint64(now.Add(-interval).UnixMicro())
			if t.activity == nil || !t.activity.wanted.Load() {
				ask = since
			}
		}
		samples, ret := callRet(r, "GetProcessUtilization", func() ([]nvml.ProcessUtilizationSample, nvml.Return) {
			s, ret := r.Device.GetProcessUtilization(ask)
			if ret == nvml.ERROR_NOT_FOUND {
				return nil, nvml.SUCCESS // no sample newer than lastSeen: nothing ran
			}
			return s, ret
		})
		if t.activity != nil && t.activity.wanted.Load() {
			// Every sample, the probe's own included: the probe leaves out
			// the PID it found for itself.
			var mps []uint32
			for _, p := range out.procs {
				if p.typ == "mps" && !slices.Contains(mps, p.pid) {
					mps = append(mps, p.pid)
				}
			}
			t.activity.record(samples, ret, mps, now)
		}
		if ret == nvml.SUCCESS {
			samples = slices.DeleteFunc(samples, func(s nvml.ProcessUtilizationSample) bool { return s.Pid == self })
			out.utilOK = true
			out.cycle = t.timeline.add(samples, since)
		}
	} else if t.activity != nil && t.activity.wanted.Load() {
		t.activity.recordMIG()
	}
	t.timeline.forget(isLive)
	t.cache.retain(isLive)
	for pid := range t.busy {
		if !live[pid] {
			delete(t.busy, pid)
		}
	}
	for k := range t.series {
		if _, ok := byKey[k]; !ok {
			delete(t.series, k)
		}
	}
	if out.utilOK {
		for _, u := range out.cycle.pids {
			if u.active {
				out.active++
			}
		}
		t.contended += out.cycle.contended
	}
	out.contendedTotal = t.contended

	// Identity, attribution, utilisation.
	ids := []string{t.uuid}
	if mig != nil {
		for _, in := range mig.instances {
			ids = append(ids, in.uuid)
		}
	}
	if t.opts.Allocations != nil {
		out.allocs = t.opts.Allocations.Lookup(ids...)
	}
	for _, p := range out.procs {
		p.info = t.cache.get(p.pid, now)
		devID := t.uuid
		if p.gi != noInstance && mig != nil {
			if in := mig.byIDs(p.gi, p.ci); in != nil {
				p.migUUID, devID = in.uuid, in.uuid
			}
		}
		p.namespace, p.pod, p.container = podOf(p.info.attr, out.allocs, devID)
		if out.utilOK {
			p.hasUtil = true
			if u := out.cycle.pids[p.pid]; u != nil {
				p.sm, p.mem, p.enc, p.dec = u.mean(u.sm), u.mean(u.mem), u.mean(u.enc), u.mean(u.dec)
				p.active, p.attributed = u.active, u.attributed
				t.busy[p.pid] += u.sm
			}
			p.busyTotal = t.busy[p.pid]
		}
	}

	// Cardinality cap: the top MaxPerGPU by memory, ties by pid.
	sort.Slice(out.procs, func(i, j int) bool {
		a, b := out.procs[i], out.procs[j]
		if a.memory != b.memory {
			return a.memory > b.memory
		}
		if a.pid != b.pid {
			return a.pid < b.pid
		}
		if a.gi != b.gi {
			return a.gi < b.gi
		}
		return a.ci < b.ci
	})
	n := min(len(out.procs), t.opts.MaxPerGPU)
	out.kept, out.folded = out.procs[:n], out.procs[n:]
	for _, p := range out.folded {
		if u := out.cycle.pids[p.pid]; u != nil && out.utilOK {
			t.otherBusy += u.sm
		}
	}
	out.otherSM = t.otherBusy
	return out
}

// podOf names the pod container of a process on device devID (a GPU or MIG
// UUID): what the attributor says, else the only pod container the device
// is allocated to. With several pods on one device (time-slicing, MPS) and
// an attributor that knows only the pod UID, the pod stays unknown: the
// pod-resources API does not give pod UIDs.
func podOf(a Attribution, allocs []Allocation, devID string) (ns, pod, container string) {
	if a.Pod != "" {
		return a.Namespace, a.Pod, a.Container
	}
	var found *Allocation
	for i := range allocs {
		al := &allocs[i]
		if al.DeviceID != devID {
			continue
		}
		if found != nil && (found.Namespace != al.Namespace || found.Pod != al.Pod) {
			return "", "", "" // several pods share the device
		}
		if found != nil && found.Container != al.Container {
			found = &Allocation{Namespace: al.Namespace, Pod: al.Pod, DeviceID: devID}
			continue
		}
		found = al
	}
	if found == nil {
		return "", "", ""
	}
	return found.Namespace, found.Pod, found.Container
}
