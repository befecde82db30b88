package gpusim

import (
	"fmt"
	"math"
	"sync"
)

// The host beside the GPUs: what procfs would tell of a tenant process (CPU
// time, threads, resident memory, storage I/O) and of the host (CPU count,
// pressure stall information). A tenant's `host` section and the scenario's
// top-level `host` section describe them with signals; the counters are
// their integrals. Counters advance with the fleet's clock, not with sim
// time: at Speed 40 a tenant using one core adds one CPU second per second
// of the clock, as the exporter's own counters (busy seconds) do, so that
// rates per second equal the signals at any speed.

// Signal kinds of the host view.
var (
	coresKind      = sigKind{0, 1024, "cores"}
	residentKind   = sigKind{0, 1 << 24, "MiB"}
	throughputKind = sigKind{0, 1 << 20, "MiB/s"}
)

const (
	defaultSystemShare = 0.1
	defaultResidentMiB = 1024
	maxThreads         = 1_000_000
)

// Noise streams of the host signals.
const (
	streamHostCPU = 11 + iota
	streamHostRSS
	streamHostRead
	streamHostWrite
	streamPressure // + 2*resource + kind
)

type rawTenantHost struct {
	CPU            *rawSignal `yaml:"cpu"`
	CPUSystemShare *float64   `yaml:"cpu_system_share"`
	Threads        *int       `yaml:"threads"`
	ResidentMemory *rawSignal `yaml:"resident_memory"`
	IORead         *rawSignal `yaml:"io_read"`
	IOWrite        *rawSignal `yaml:"io_write"`
	IOReadable     *bool      `yaml:"io_readable"`
}

// tenantHost is a tenant's validated host view.
type tenantHost struct {
	cpu, rss, ioRead, ioWrite *signal
	systemShare               float64
	threads                   int
	ioReadable                bool

	// counters holds the integrals of one fleet's device (by device key):
	// a scenario may run in several fleets, and the integrals are pure
	// functions of the key and the time, so fleets with the same key may
	// share them.
	counters sync.Map // uint64 → *tenantCounters
}

type tenantCounters struct {
	cpu, read, write *integrator // core-seconds, MiB
}

func validateTenantHost(l *errList, path string, r *rawTenantHost) *tenantHost {
	if r == nil {
		return nil
	}
	h := &tenantHost{systemShare: defaultSystemShare, ioReadable: true}
	if r.CPU == nil {
		l.add(path+".cpu", "missing cpu (the cores the process uses, a signal)")
	}
	h.cpu = validateSignal(l, path+".cpu", r.CPU, coresKind)
	if s := r.CPUSystemShare; s != nil {
		if !finite(*s) || *s < 0 || *s > 1 {
			l.add(path+".cpu_system_share", "cpu_system_share %v must be between 0 and 1", *s)
		} else {
			h.systemShare = *s
		}
	}
	peak := 0.0
	if h.cpu != nil {
		peak = math.Max(h.cpu.value, h.cpu.max)
	}
	h.threads = max(1, int(math.Ceil(peak)))
	if r.Threads != nil {
		switch t := *r.Threads; {
		case t < 1 || t > maxThreads:
			l.add(path+".threads", "threads %d must be between 1 and %d", t, maxThreads)
		case float64(t) < peak:
			l.add(path+".threads", "threads %d cannot use the %g cores of cpu: give at least %d", t, peak, int(math.Ceil(peak)))
		default:
			h.threads = t
		}
	}
	h.rss = validateSignal(l, path+".resident_memory", r.ResidentMemory, residentKind)
	if h.rss == nil {
		h.rss = &signal{shape: shapeConstant, value: defaultResidentMiB, lo: residentKind.lo, hi: residentKind.hi}
	}
	h.ioRead = validateSignal(l, path+".io_read", r.IORead, throughputKind)
	h.ioWrite = validateSignal(l, path+".io_write", r.IOWrite, throughputKind)
	if r.IOReadable != nil {
		h.ioReadable = *r.IOReadable
	}
	return h
}

func (h *tenantHost) countersFor(devKey, k uint64) *tenantCounters {
	if c, ok := h.counters.Load(devKey); ok {
		return c.(*tenantCounters)
	}
	threads := float64(h.threads)
	c := &tenantCounters{
		cpu:   &integrator{f: func(t float64) float64 { return math.Min(h.cpu.at(t, hashN(k, streamHostCPU)), threads) }},
		read:  &integrator{f: signalOrZero(h.ioRead, hashN(k, streamHostRead))},
		write: &integrator{f: signalOrZero(h.ioWrite, hashN(k, streamHostWrite))},
	}
	actual, _ := h.counters.LoadOrStore(devKey, c)
	return actual.(*tenantCounters)
}

func signalOrZero(s *signal, key uint64) func(float64) float64 {
	if s == nil {
		return func(float64) float64 { return 0 }
	}
	return func(t float64) float64 { return s.at(t, key) }
}

// ProcessUsage is what the simulated host tells of a tenant process, as
// procfs would (/proc/PID/stat and /proc/PID/io). Times and bytes count
// from the process's (re)start, in the fleet's clock (see the file
// comment).
type ProcessUsage struct {
	UserSeconds, SystemSeconds float64
	Threads                    int
	ResidentBytes              uint64
	// IOReadable is false for a tenant with io_readable: false (a process
	// whose /proc/PID/io the exporter may not read).
	IOReadable              bool
	ReadBytes, WrittenBytes uint64
}

// ProcessUsage returns the host's view of the running tenant process pid;
// false when no running tenant has that pid or its tenant has no host
// section, and always in a container without the host's PID namespace
// (host.pid_namespace: container), whose /proc shows none of the host's
// processes.
func (f *Fleet) ProcessUsage(pid uint32) (ProcessUsage, bool) {
	if f.PIDNamespace() == PIDNamespaceContainer {
		return ProcessUsage{}, false
	}
	t := f.elapsed()
	for _, d := range f.devices {
		if t >= d.lostAt {
			continue
		}
		for _, ts := range d.spec.tenants {
			if ts.host == nil {
				continue
			}
			active, local, gen := ts.state(t)
			if !active || ts.pid+uint32(gen)*7 != pid {
				continue
			}
			return ts.host.usage(d.key, hashN(d.key, hashString(ts.name)), local, f.speed), true
		}
	}
	return ProcessUsage{}, false
}

func (h *tenantHost) usage(devKey, k uint64, local, speed float64) ProcessUsage {
	c := h.countersFor(devKey, k)
	cpu := c.cpu.at(local) / speed
	u := ProcessUsage{
		UserSeconds:   cpu * (1 - h.systemShare),
		SystemSeconds: cpu * h.systemShare,
		Threads:       h.threads,
		ResidentBytes: uint64(math.Round(h.rss.at(local, hashN(k, streamHostRSS)))) * mib,
		IOReadable:    h.ioReadable,
	}
	if h.ioReadable {
		u.ReadBytes = uint64(math.Round(c.read.at(local) / speed * float64(mib)))
		u.WrittenBytes = uint64(math.Round(c.write.at(local) / speed * float64(mib)))
	}
	return u
}

// ---- the host ----

// PressureResources are the resources of the host's pressure stall
// information, in the order HostPressure lists them.
var PressureResources = [...]string{"cpu", "io", "memory"}

type rawHost struct {
	CPUs     int          `yaml:"cpus"`
	Pressure *rawPressure `yaml:"pressure"`
	// PIDNamespace and SelfHostPID: nvmlsettings.go.
	PIDNamespace string `yaml:"pid_namespace"`
	SelfHostPID  *int   `yaml:"self_host_pid"`
}

type rawPressure struct {
	CPU    *rawStall `yaml:"cpu"`
	IO     *rawStall `yaml:"io"`
	Memory *rawStall `yaml:"memory"`
}

type rawStall struct {
	Some *rawSignal `yaml:"some"`
	Full *rawSignal `yaml:"full"`
}

// hostSpec is the scenario's validated host (every node's, each with its
// own noise).
type hostSpec struct {
	cpus     int
	pressure [len(PressureResources)][2]*signal // some, full: percent of time stalled; nil: absent

	counters sync.Map // fleet host key → *[3][2]*integrator

	pidNamespace string // PIDNamespaceHost or PIDNamespaceContainer
	selfHostPID  uint32 // 0: the default (Fleet.SelfPID)
}

const maxCPUs = 1 << 16

func validateHost(l *errList, r *rawHost) *hostSpec {
	if r == nil {
		return nil
	}
	h := &hostSpec{cpus: r.CPUs}
	validatePIDNamespace(l, r, h)
	if r.CPUs < 0 || r.CPUs > maxCPUs {
		l.add("host.cpus", "cpus %d must be between 1 and %d (or left out: unknown)", r.CPUs, maxCPUs)
		h.cpus = 0
	}
	if p := r.Pressure; p != nil {
		for i, st := range []*rawStall{p.CPU, p.IO, p.Memory} {
			if st == nil {
				continue
			}
			path := fmt.Sprintf("host.pressure.%s", PressureResources[i])
			if st.Some == nil && st.Full == nil {
				l.add(path, "give some and/or full (the percent of time tasks are stalled)")
			}
			h.pressure[i][0] = validateSignal(l, path+".some", st.Some, percentKind)
			h.pressure[i][1] = validateSignal(l, path+".full", st.Full, percentKind)
			if some, full := h.pressure[i][0], h.pressure[i][1]; some != nil && full != nil &&
				math.Max(full.value, full.max) > math.Max(some.value, some.max) {
				l.add(path+".full", "full (all tasks stalled) cannot exceed some (at least one task stalled)")
			}
		}
	}
	return h
}

// HostPressure is one resource's total stall time (Linux PSI's total), in
// seconds of the fleet's clock.
type HostPressure struct {
	Resource         string
	Some, Full       float64
	HasSome, HasFull bool
}

// HostCPUs is the simulated host's online CPU count; 0 when the scenario
// does not give it.
func (f *Fleet) HostCPUs() int {
	if f.sc.host == nil {
		return 0
	}
	return f.sc.host.cpus
}

// HostPressure returns the simulated host's pressure stall totals, one
// entry per resource of PressureResources; a resource or kind the scenario
// leaves out is absent (HasSome, HasFull false), as on a kernel without
// PSI.
func (f *Fleet) HostPressure() []HostPressure {
	out := make([]HostPressure, len(PressureResources))
	for i, res := range PressureResources {
		out[i].Resource = res
	}
	h := f.sc.host
	if h == nil {
		return out
	}
	key := hashN(f.seed, hashString(f.node), 0x4057)
	ins := h.integrators(key)
	t := f.elapsed()
	for i := range PressureResources {
		if ins[i][0] != nil {
			out[i].Some, out[i].HasSome = ins[i][0].at(t)/f.speed, true
		}
		if ins[i][1] != nil {
			out[i].Full, out[i].HasFull = ins[i][1].at(t)/f.speed, true
		}
	}
	return out
}

func (h *hostSpec) integrators(key uint64) *[len(PressureResources)][2]*integrator {
	if v, ok := h.counters.Load(key); ok {
		return v.(*[len(PressureResources)][2]*integrator)
	}
	var ins [len(PressureResources)][2]*integrator
	for i := range PressureResources {
		for kind, s := range h.pressure[i] {
			if s == nil {
				continue
			}
			k := hashN(key, streamPressure+uint64(2*i+kind))
			// A share of time: percent / 100 stalled seconds per second.
			ins[i][kind] = &integrator{f: func(t float64) float64 { return s.at(t, k) / 100 }}
		}
	}
	v, _ := h.counters.LoadOrStore(key, &ins)
	return v.(*[len(PressureResources)][2]*integrator)
}
