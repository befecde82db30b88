package gpusim

import (
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type rawTenant struct {
	Name         string     `yaml:"name"`
	GPU          *int       `yaml:"gpu"`
	MigInstance  *int       `yaml:"mig_instance"`
	PID          int        `yaml:"pid"`
	Process      string     `yaml:"process"`
	Type         string     `yaml:"type"`
	Container    string     `yaml:"container"`
	Pod          string     `yaml:"pod"`
	Namespace    string     `yaml:"namespace"`
	Start        string     `yaml:"start"`
	Stop         string     `yaml:"stop"`
	Every        string     `yaml:"every"`
	RestartEvery string     `yaml:"restart_every"`
	SmUtil       *rawSignal `yaml:"sm_util"`
	MemoryUtil   *rawSignal `yaml:"memory_util"`
	Memory       *rawSignal `yaml:"memory"`
	// Host is what procfs tells of the process (hoststats.go).
	Host *rawTenantHost `yaml:"host"`
}

// Process types as the scenario names them. ProcessMPS is an MPS client,
// ProcessMPSServer the MPS server's own process (nvidia-cuda-mps-server),
// whose context runs its clients' work.
const (
	ProcessCompute   = "compute"
	ProcessGraphics  = "graphics"
	ProcessMPS       = "mps"
	ProcessMPSServer = "mps-server"
)

// tenantSpec is a validated process running on one GPU (or MIG instance).
type tenantSpec struct {
	name, process, kind         string
	container, pod, namespace   string
	gpu                         int // scenario-wide device index
	migInstance                 int // index into the device's mig layout; -1: whole GPU
	pid                         uint32
	start, stop, every, restart float64
	smUtil, memUtil, memory     *signal
	host                        *tenantHost // nil: procfs knows nothing of it
}

var memoryMiBKind = sigKind{0, 1 << 21, "MiB"}

// state reports whether the tenant runs at sim time t, the time since its
// current (re)start, and how many times it has restarted.
func (ts *tenantSpec) state(t float64) (active bool, local float64, gen int64) {
	if t < ts.start {
		return false, 0, 0
	}
	local = t - ts.start
	if ts.every > 0 {
		gen = int64(local / ts.every)
		local -= float64(gen) * ts.every
		if ts.stop > 0 && local >= ts.stop-ts.start {
			return false, 0, gen
		}
	} else if ts.stop > 0 && t >= ts.stop {
		return false, 0, 0
	}
	if ts.restart > 0 {
		r := int64(local / ts.restart)
		local -= float64(r) * ts.restart
		gen += r
	}
	return true, local, gen
}

// sample is a tenant's activity at one instant.
type sample struct {
	pid            uint32
	sm, mem        float64 // percent
	memoryBytes    uint64
	active         bool
	restartCounter int64
}

func (ts *tenantSpec) at(t float64, key uint64) sample {
	active, local, gen := ts.state(t)
	if !active {
		return sample{}
	}
	k := hashN(key, hashString(ts.name))
	s := sample{pid: ts.pid + uint32(gen)*7, active: true, restartCounter: gen}
	if ts.smUtil != nil {
		s.sm = ts.smUtil.at(local, hashN(k, 1))
	}
	if ts.memUtil != nil {
		s.mem = ts.memUtil.at(local, hashN(k, 2))
	} else {
		s.mem = 0.6 * s.sm
	}
	if ts.memory != nil {
		s.memoryBytes = uint64(math.Round(ts.memory.at(local, hashN(k, 3)))) * mib
	}
	return s
}

var tenantTypes = map[string]bool{ProcessCompute: true, ProcessGraphics: true, ProcessMPS: true, ProcessMPSServer: true}

func validateTenants(l *errList, raws []rawTenant, sc *Scenario) {
	names := map[string]int{}
	for i := range raws {
		r := &raws[i]
		p := fmt.Sprintf("tenants[%d]", i)
		ts := &tenantSpec{name: r.Name, process: r.Process, kind: r.Type, container: r.Container,
			pod: r.Pod, namespace: r.Namespace, migInstance: -1}
		if r.Name == "" {
			l.add(p+".name", "missing name")
		} else if j, dup := names[r.Name]; dup {
			l.add(p+".name", "name %q is already used by tenants[%d]", r.Name, j)
		}
		names[r.Name] = i
		if ts.process == "" {
			ts.process = r.Name
		}
		if ts.kind == "" {
			ts.kind = ProcessCompute
		}
		if !tenantTypes[ts.kind] {
			l.add(p+".type", "unknown type %q (one of compute, graphics, mps, mps-server)", r.Type)
		}
		if ts.kind == ProcessMPSServer && (r.SmUtil != nil || r.MemoryUtil != nil) {
			l.add(p+".sm_util", "an mps-server's utilisation is its clients' (give the type: mps tenants sm_util and memory_util)")
		}
		var dev *deviceSpec
		switch {
		case r.GPU == nil:
			l.add(p+".gpu", "missing gpu index")
		case *r.GPU < 0 || *r.GPU >= len(sc.devices):
			l.add(p+".gpu", "gpu %d does not exist (the scenario has %d devices)", *r.GPU, len(sc.devices))
		default:
			ts.gpu = *r.GPU
			dev = sc.devices[ts.gpu]
		}
		if r.MigInstance != nil && dev != nil {
			if len(dev.mig) == 0 {
				l.add(p+".mig_instance", "gpu %d has no mig layout", ts.gpu)
			} else if *r.MigInstance < 0 || *r.MigInstance >= len(dev.mig) {
				l.add(p+".mig_instance", "mig_instance %d does not exist (gpu %d has %d instances)", *r.MigInstance, ts.gpu, len(dev.mig))
			} else {
				ts.migInstance = *r.MigInstance
			}
		} else if dev != nil && len(dev.mig) > 0 {
			l.add(p+".mig_instance", "gpu %d is in MIG mode: name the instance the tenant runs in", ts.gpu)
		}
		switch {
		case r.PID < 0 || r.PID > 4_000_000:
			l.add(p+".pid", "pid %d must be between 1 and 4000000", r.PID)
		case r.PID > 0:
			ts.pid = uint32(r.PID)
		default:
			ts.pid = uint32(2000 + hashString(r.Name)%60000)
		}
		ts.start = secs(parseDuration(l, p+".start", r.Start, 0))
		ts.stop = secs(parseDuration(l, p+".stop", r.Stop, 0))
		ts.every = secs(parseDuration(l, p+".every", r.Every, 0))
		ts.restart = secs(parseDuration(l, p+".restart_every", r.RestartEvery, 0))
		if r.Stop != "" && ts.stop <= ts.start {
			l.add(p+".stop", "stop %s must be after start %q", r.Stop, r.Start)
		}
		if r.Every != "" {
			if r.Stop == "" {
				l.add(p+".every", "every needs a stop: the tenant runs from start to stop, then again every period")
			} else if ts.every < ts.stop-ts.start || ts.every < 1 {
				l.add(p+".every", "every %s must be at least the run length stop - start (%gs)", r.Every, ts.stop-ts.start)
			}
		}
		if r.RestartEvery != "" && ts.restart < 1 {
			l.add(p+".restart_every", "restart_every %s must be at least 1s", r.RestartEvery)
		}
		ts.smUtil = validateSignal(l, p+".sm_util", r.SmUtil, percentKind)
		ts.memUtil = validateSignal(l, p+".memory_util", r.MemoryUtil, percentKind)
		ts.memory = validateSignal(l, p+".memory", r.Memory, memoryMiBKind)
		ts.host = validateTenantHost(l, p+".host", r.Host)
		if dev != nil {
			capMiB := float64(dev.totalMiB() - dev.reservedMiB())
			if ts.migInstance >= 0 {
				capMiB = float64(dev.mig[ts.migInstance].memoryMiB)
			}
			if ts.memory != nil && math.Max(ts.memory.max, ts.memory.value) > capMiB {
				l.add(p+".memory", "up to %g MiB does not fit in %g MiB", math.Max(ts.memory.max, ts.memory.value), capMiB)
			}
			if ts.kind == ProcessMPSServer {
				for _, o := range dev.tenants {
					if o.kind == ProcessMPSServer && o.migInstance == ts.migInstance {
						l.add(p+".type", "gpu %d already has an mps-server (tenants[%d]): one MPS server per GPU or MIG instance", ts.gpu, slices.Index(sc.tenants, o))
						break
					}
				}
			}
			dev.tenants = append(dev.tenants, ts)
		}
		sc.tenants = append(sc.tenants, ts)
	}
}

// ---- runtime ----

// deviceLoad sums the device's (or one MIG instance's, inst >= 0) active
// tenants at t.
func (d *device) tenantLoad(t float64, inst int) (sm, mem float64, memBytes uint64) {
	for _, ts := range d.spec.tenants {
		if inst >= 0 && ts.migInstance != inst {
			continue
		}
		s := ts.at(t, d.key)
		if !s.active {
			continue
		}
		sm += s.sm
		mem += s.mem
		memBytes += s.memoryBytes
	}
	return sm, mem, memBytes
}

// Process is a simulated tenant process running at the fleet's current time,
// with the metadata a container runtime would tell (for faking procfs and the
// kubelet pod-resources API in tests).
type Process struct {
	PID               uint32
	Name              string // executable name
	Tenant            string // scenario tenant name
	Type              string // compute, graphics, mps or mps-server
	Container         string
	Pod               string
	Namespace         string
	GPU               int    // index on this fleet (node)
	GPUUUID           string // the device's UUID (the MIG device's for MIG tenants)
	UsedMemoryBytes   uint64
	GpuInstanceID     uint32 // 0xFFFFFFFF outside MIG
	ComputeInstanceID uint32 // 0xFFFFFFFF outside MIG
	Restarts          int64
}

// Processes lists the tenant processes running now, by GPU then PID.
func (f *Fleet) Processes() []Process {
	t := f.elapsed()
	var out []Process
	for _, d := range f.devices {
		if t >= d.lostAt {
			continue
		}
		for _, ts := range d.spec.tenants {
			s := ts.at(t, d.key)
			if !s.active {
				continue
			}
			p := Process{
				PID: s.pid, Name: ts.process, Tenant: ts.name, Type: ts.kind,
				Container: ts.container, Pod: ts.pod, Namespace: ts.namespace,
				GPU: d.index, GPUUUID: d.uuid, UsedMemoryBytes: s.memoryBytes,
				GpuInstanceID: 0xFFFFFFFF, ComputeInstanceID: 0xFFFFFFFF, Restarts: s.restartCounter,
			}
			if ts.migInstance >= 0 {
				md := d.migDevices[ts.migInstance]
				p.GPUUUID = md.uuid
				p.GpuInstanceID, p.ComputeInstanceID = uint32(md.giID), 0
			}
			out = append(out, p)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].GPU != out[j].GPU {
			return out[i].GPU < out[j].GPU
		}
		return out[i].PID < out[j].PID
	})
	return out
}

// listedIn is which process list shows tenants of each kind: the compute
// list shows compute processes, the MPS server and, as recent drivers do
// (nvidia-smi's type M+C), the MPS clients; the MPS list the clients.
var listedIn = map[string][]string{
	ProcessCompute:  {ProcessCompute, ProcessMPSServer, ProcessMPS},
	ProcessGraphics: {ProcessGraphics},
	ProcessMPS:      {ProcessMPS},
}

func (d *device) runningProcesses(call, kind string) ([]nvml.ProcessInfo, nvml.Return) {
	t, r := d.enter(call)
	if r != nvml.SUCCESS {
		return nil, r
	}
	if d.spec.nvml.listNotFound {
		return nil, nvml.ERROR_NOT_FOUND // nvml.running_processes: not_found
	}
	var out []nvml.ProcessInfo
	for _, ts := range d.spec.tenants {
		if !slices.Contains(listedIn[kind], ts.kind) {
			continue
		}
		s := ts.at(t, d.key)
		if !s.active {
			continue
		}
		pi := nvml.ProcessInfo{Pid: s.pid, UsedGpuMemory: s.memoryBytes, GpuInstanceId: 0xFFFFFFFF, ComputeInstanceId: 0xFFFFFFFF}
		if ts.migInstance >= 0 {
			pi.GpuInstanceId, pi.ComputeInstanceId = uint32(d.migDevices[ts.migInstance].giID), 0
		}
		out = append(out, pi)
	}
	if kind == ProcessCompute {
		if pi, ok := d.probeProcess(t); ok {
			out = append(out, pi)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return out, nvml.SUCCESS
}

func (d *device) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.runningProcesses("GetComputeRunningProcesses", ProcessCompute)
}

func (d *device) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.runningProcesses("GetGraphicsRunningProcesses", ProcessGraphics)
}

func (d *device) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return d.runningProcesses("GetMPSComputeRunningProcesses", ProcessMPS)
}
