package gpusim

import (
	"os"
	"strings"
	"time"
)

// How a device group's driver answers the per-process calls (the `nvml:`
// section of a device group), and in which PID namespace the process that
// simulates the fleet runs (the top-level `host.pid_namespace`).

type rawNVML struct {
	ProcessSamplePeriod string `yaml:"process_sample_period"`
	ProcessUtilization  string `yaml:"process_utilization"`
	RunningProcesses    string `yaml:"running_processes"`
}

// nvmlSpec is a device group's validated nvml section.
type nvmlSpec struct {
	// samplePeriod is the driver's process utilisation sample period, sim
	// seconds.
	samplePeriod float64
	// utilNotSupported: GetProcessUtilization answers ERROR_NOT_SUPPORTED
	// (as in some vGPU guests).
	utilNotSupported bool
	// listNotFound: the running-process lists answer ERROR_NOT_FOUND
	// whatever runs (as some vGPU guests do on a busy GPU).
	listNotFound bool
}

// The driver's process utilisation sample period: about 1/6 s on the
// drivers documented, longer on some; NVML does not fix it. The default is
// 1/6 s exactly, so that six periods end on every whole second of sim
// time; their µs timestamps are then 166666 or 166667 µs apart.
const (
	defaultSamplePeriod = 1.0 / 6
	minSamplePeriod     = 10 * time.Millisecond
	maxSamplePeriod     = 5 * time.Second
)

var processUtilizations = map[string]bool{"supported": false, "not_supported": true}
var runningProcessLists = map[string]bool{"listed": false, "not_found": true}

func validateNVML(l *errList, path string, r *rawNVML) nvmlSpec {
	ns := nvmlSpec{samplePeriod: defaultSamplePeriod}
	if r == nil {
		return ns
	}
	if r.ProcessSamplePeriod != "" {
		before := len(l.errs)
		p := parseDuration(l, path+".process_sample_period", r.ProcessSamplePeriod, 0)
		if len(l.errs) == before {
			if p < minSamplePeriod || p > maxSamplePeriod {
				l.add(path+".process_sample_period", "process_sample_period %s must be between %s and %s", r.ProcessSamplePeriod, minSamplePeriod, maxSamplePeriod)
			} else {
				ns.samplePeriod = p.Seconds()
			}
		}
	}
	if r.ProcessUtilization != "" {
		v, ok := processUtilizations[r.ProcessUtilization]
		if !ok {
			l.add(path+".process_utilization", "unknown process_utilization %q (one of %s)", r.ProcessUtilization, strings.Join(sortedKeys(processUtilizations), ", "))
		}
		ns.utilNotSupported = v
	}
	if r.RunningProcesses != "" {
		v, ok := runningProcessLists[r.RunningProcesses]
		if !ok {
			l.add(path+".running_processes", "unknown running_processes %q (one of %s)", r.RunningProcesses, strings.Join(sortedKeys(runningProcessLists), ", "))
		}
		ns.listNotFound = v
	}
	return ns
}

// PID namespaces of the process that simulates the fleet (the exporter, or
// gpulens-verify, whose probe holds the CUDA contexts).
const (
	PIDNamespaceHost      = "host"
	PIDNamespaceContainer = "container"
)

// defaultSelfHostPID is the host PID NVML gives this process's contexts in
// a container without the host's PID namespace, unless host.self_host_pid
// sets it: a high PID, as a busy host's are.
const defaultSelfHostPID = 3_141_593

// maxPID is Linux's largest pid_max (2^22).
const maxPID = 1 << 22

// validatePIDNamespace reads host.pid_namespace and host.self_host_pid.
func validatePIDNamespace(l *errList, r *rawHost, h *hostSpec) {
	h.pidNamespace = PIDNamespaceHost
	switch r.PIDNamespace {
	case "", PIDNamespaceHost:
	case PIDNamespaceContainer:
		h.pidNamespace = PIDNamespaceContainer
	default:
		l.add("host.pid_namespace", "unknown pid_namespace %q (one of container, host)", r.PIDNamespace)
	}
	if r.SelfHostPID == nil {
		return
	}
	switch p := *r.SelfHostPID; {
	case h.pidNamespace != PIDNamespaceContainer:
		l.add("host.self_host_pid", "self_host_pid needs pid_namespace: container (in the host's namespace NVML lists this process's own PID)")
	case p < 1 || p > maxPID:
		l.add("host.self_host_pid", "self_host_pid %d must be between 1 and %d", p, maxPID)
	default:
		h.selfHostPID = uint32(p)
	}
}

// PIDNamespace is the PID namespace the scenario puts the process that
// simulates the fleet in: PIDNamespaceHost (the default) or
// PIDNamespaceContainer (a container without the host's PID namespace).
func (f *Fleet) PIDNamespace() string {
	if f.sc.host == nil || f.sc.host.pidNamespace == "" {
		return PIDNamespaceHost
	}
	return f.sc.host.pidNamespace
}

// SelfPID is the PID NVML lists for this process's own CUDA contexts (the
// probe's, made through ProbeDriver): os.Getpid() in the host's PID
// namespace; in a container (host.pid_namespace: container) the host PID
// of this process, which getpid() and the container's /proc/self do not
// tell: host.self_host_pid, by default 3141593 (one more should that be
// os.Getpid()). Tenants' PIDs are host PIDs in either case.
func (f *Fleet) SelfPID() uint32 {
	self := uint32(os.Getpid())
	if f.PIDNamespace() != PIDNamespaceContainer {
		return self
	}
	p := f.sc.host.selfHostPID
	if p == 0 {
		p = defaultSelfHostPID
		if p == self {
			p++
		}
	}
	return p
}
