// Package cgroup tells which container, Kubernetes pod, Slurm job or systemd
// unit a process belongs to, from the content of /proc/<pid>/cgroup.
//
// It understands cgroup v1 (one line per hierarchy, "12:pids:/…"), cgroup v2
// (a single "0::/…" line) and hybrid hosts (both), with the cgroupfs and the
// systemd cgroup drivers of Docker, containerd (CRI and nerdctl), CRI-O and
// Podman (rootful and rootless), Kubernetes pod cgroups of every QoS class,
// Slurm job steps and plain systemd services and scopes. Only the path text
// is used: nothing is looked up in /sys/fs/cgroup or asked of a runtime.
package cgroup

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Runtime names reported in Info.Runtime.
const (
	RuntimeDocker     = "docker"
	RuntimeContainerd = "containerd"
	RuntimeCRIO       = "cri-o"
	RuntimePodman     = "podman"
	RuntimeSystemd    = "systemd"
	RuntimeSlurm      = "slurm"
)

// Info is what a process's cgroup path says about who runs it. Empty fields
// are unknown; an Info with an empty Runtime is a host process.
type Info struct {
	// Runtime is the innermost owner of the process: "docker",
	// "containerd", "cri-o", "podman", "systemd", "slurm", or "" (host).
	Runtime string
	// ContainerID is the full 64-hex id of the innermost container.
	ContainerID string
	// PodUID is the Kubernetes pod UID, with the dashes that the systemd
	// driver turns into underscores restored.
	PodUID string
	// SlurmJobID is the Slurm job id (the N of job_N).
	SlurmJobID string
	// Unit is the systemd unit or scope when that is all there is (a
	// service, a login session, a user manager), or the monitor scope of a
	// container runtime (crio-conmon-…, libpod-conmon-…).
	Unit string
	// Path is the cgroup path the other fields were read from: the v2
	// "0::" line, else the most specific v1 line (see Parse).
	Path string
}

// maxFileSize bounds what is read of one cgroup file; real files are a few
// hundred bytes, a path is at most PATH_MAX per line.
const maxFileSize = 256 << 10

// ReadPID reads and parses <procRoot>/<pid>/cgroup. A process that does not
// exist, or exits while its file is read, gives an error that wraps
// fs.ErrNotExist.
func ReadPID(procRoot string, pid int) (Info, error) {
	path := filepath.Join(procRoot, strconv.Itoa(pid), "cgroup")
	f, err := os.Open(path)
	if err != nil {
		return Info{}, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	return parseFile(path, f)
}

// parseFile parses an opened cgroup file and names it in errors.
func parseFile(path string, r io.Reader) (Info, error) {
	info, err := Parse(io.LimitReader(r, maxFileSize))
	if err != nil {
		// The kernel answers a read of the cgroup file of a task that
		// exited after the open with ESRCH.
		if errors.Is(err, syscall.ESRCH) {
			return Info{}, fmt.Errorf("reading %s: process exited: %w", path, fs.ErrNotExist)
		}
		return Info{}, fmt.Errorf("reading %s: %w", path, err)
	}
	return info, nil
}

// Parse reads the content of a /proc/<pid>/cgroup file. Every line must be
// "hierarchy-ID:controller-list:path"; a malformed line is an error that names
// its line number.
//
// When the file has several distinct paths (cgroup v1, or a hybrid host) each
// is read and the most informative one wins: one naming a container, then a
// Slurm job, then a pod, then a systemd unit, then the deepest; on a tie the
// v2 "0::" line, then the earliest line. On a pure v2 host that is always
// the "0::" line.
func Parse(r io.Reader) (Info, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxFileSize)
	var (
		best     Info
		bestRank rank
		lines    int
		seen     = make(map[string]bool)
	)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		lines++
		hier, path, err := splitLine(line)
		if err != nil {
			return Info{}, fmt.Errorf("line %d: %w", n, err)
		}
		v2 := hier == 0
		if seen[path] && !v2 {
			continue
		}
		seen[path] = true
		info := parsePath(path)
		rk := rankOf(info, v2)
		if lines == 1 || rk.better(bestRank) {
			best, bestRank = info, rk
		}
	}
	if err := sc.Err(); err != nil {
		return Info{}, fmt.Errorf("line %d: %w", lines+1, err)
	}
	if lines == 0 {
		return Info{}, errors.New("no cgroup lines")
	}
	return best, nil
}

// splitLine checks one "hierarchy-ID:controllers:path" line. The path may
// itself contain colons (the systemd driver's "slice:prefix:id" form), so
// only the first two separate fields.
func splitLine(line string) (hier int, path string, err error) {
	id, rest, ok := strings.Cut(line, ":")
	if !ok {
		return 0, "", fmt.Errorf("want \"hierarchy-ID:controllers:path\", got %q", line)
	}
	controllers, path, ok := strings.Cut(rest, ":")
	if !ok {
		return 0, "", fmt.Errorf("want \"hierarchy-ID:controllers:path\", got %q", line)
	}
	hier, err = strconv.Atoi(id)
	if err != nil || hier < 0 {
		return 0, "", fmt.Errorf("hierarchy ID %q is not a non-negative integer", id)
	}
	if hier == 0 && controllers != "" {
		return 0, "", fmt.Errorf("hierarchy 0 (cgroup v2) with controllers %q", controllers)
	}
	// A v2 cgroup removed while a (zombie) task still points at it.
	path = strings.TrimSuffix(path, " (deleted)")
	if !strings.HasPrefix(path, "/") {
		return 0, "", fmt.Errorf("cgroup path %q is not absolute", path)
	}
	return hier, path, nil
}

type rank struct {
	container, slurm, pod, unit bool
	depth                       int
	v2                          bool
}

func rankOf(i Info, v2 bool) rank {
	return rank{
		container: i.ContainerID != "",
		slurm:     i.SlurmJobID != "",
		pod:       i.PodUID != "",
		unit:      i.Runtime != "" || i.Unit != "",
		depth:     strings.Count(strings.TrimSuffix(i.Path, "/"), "/"),
		v2:        v2,
	}
}

// better reports whether r should replace o; equal ranks keep o, the
// earlier line.
func (r rank) better(o rank) bool {
	for _, c := range [...][2]bool{{r.container, o.container}, {r.slurm, o.slurm}, {r.pod, o.pod}, {r.unit, o.unit}} {
		if c[0] != c[1] {
			return c[0]
		}
	}
	if r.depth != o.depth {
		return r.depth > o.depth
	}
	return r.v2 && !o.v2
}

// containerPrefixes maps the prefix of a systemd scope ("<prefix>-<id>.scope")
// or of the systemd driver's "slice:<prefix>:<id>" form to its runtime.
var containerPrefixes = map[string]string{
	"docker":         RuntimeDocker,
	"cri-containerd": RuntimeContainerd,
	"nerdctl":        RuntimeContainerd,
	"crio":           RuntimeCRIO,
	"libpod":         RuntimePodman,
}

// conmonPrefixes are runtime monitor scopes: they sit next to a container in
// the same pod or machine, but are not it.
var conmonPrefixes = map[string]string{
	"crio-conmon":   RuntimeCRIO,
	"libpod-conmon": RuntimePodman,
}

// parsePath reads one cgroup path, outermost component first; inner
// components override outer ones, so nested containers (Docker in Docker,
// Kubernetes in Docker) report the innermost container.
func parsePath(path string) Info {
	info := Info{Path: path}
	var (
		parent, unit          string
		conmon, conmonRuntime string
		inKube, inSlurm       bool
	)
	comps := strings.Split(strings.Trim(path, "/"), "/")
	if len(comps) == 1 && comps[0] == "" {
		comps = nil
	}
	setContainer := func(runtime, id string) {
		info.ContainerID, info.Runtime = id, runtime
		conmon, conmonRuntime = "", ""
	}
	for _, c := range comps {
		// The systemd driver's cgroupsPath "slice:prefix:id" shows up
		// verbatim when runc used it with the cgroupfs manager.
		if slice, rest, ok := strings.Cut(c, ":"); ok {
			if prefix, id, ok := strings.Cut(rest, ":"); ok {
				if uid, ok := podFromSlice(slice); ok {
					info.PodUID, inKube = uid, true
				}
				if rt, ok := containerPrefixes[prefix]; ok && isHex64(id) {
					setContainer(rt, id)
				}
				parent = c
				continue
			}
		}
		switch {
		case strings.Contains(c, "kubepods"):
			inKube = true
			if uid, ok := podFromSlice(c); ok {
				info.PodUID = uid
			}
		case inKube && strings.HasPrefix(c, "pod") && isPodUID(c[3:]):
			// cgroupfs driver: /kubepods/<qos>/pod<uid>/<id>.
			info.PodUID = c[3:]
		case isHex64(c):
			// A bare id: cgroupfs driver, named by its parent.
			switch {
			case parent == "docker":
				setContainer(RuntimeDocker, c)
			case inKube:
				// containerd's CRI plugin (and the retired
				// dockershim) use the bare id under the pod.
				setContainer(RuntimeContainerd, c)
			}
		case c == "slurm" || strings.HasPrefix(c, "slurm_") || strings.HasSuffix(c, "slurmstepd.scope"):
			// v1 /slurm[_<node>]/uid_U/job_J/step_S/task_T;
			// v2 /system.slice/[<node>_]slurmstepd.scope/job_J/step_S/user/task_T.
			inSlurm = true
			if strings.HasSuffix(c, ".scope") {
				unit = c
			}
		case inSlurm && strings.HasPrefix(c, "job_") && isDigits(c[4:]):
			info.SlurmJobID, info.Runtime = c[4:], RuntimeSlurm
		default:
			if rt, id, ok := runtimeScope(c); ok {
				setContainer(rt, id)
				break
			}
			if rt, ok := conmonScope(c); ok {
				conmon, conmonRuntime = c, rt
				break
			}
			if strings.HasSuffix(c, ".service") || (strings.HasSuffix(c, ".scope") && (c != "init.scope" || unit == "")) {
				unit = c
			}
		}
		parent = c
	}
	switch {
	case info.ContainerID != "" || info.SlurmJobID != "":
		// Components are read outermost first, so Runtime names the
		// innermost of the container and the job.
	case conmon != "":
		info.Runtime, info.Unit = conmonRuntime, conmon
	case info.PodUID != "":
		// A pod-level cgroup without a container: no runtime to name.
	case unit != "":
		info.Runtime, info.Unit = RuntimeSystemd, unit
	}
	return info
}

// runtimeScope matches "<prefix>-<64 hex>.scope" (systemd driver) and the
// cgroupfs forms "crio-<id>" and "libpod-<id>".
func runtimeScope(c string) (runtime, id string, ok bool) {
	name := strings.TrimSuffix(c, ".scope")
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return "", "", false
	}
	prefix, id := name[:i], name[i+1:]
	rt, known := containerPrefixes[prefix]
	if !known || !isHex64(id) {
		return "", "", false
	}
	if name == c && prefix != "crio" && prefix != "libpod" {
		// Only CRI-O and Podman use "<prefix>-<id>" without ".scope".
		return "", "", false
	}
	return rt, id, true
}

func conmonScope(c string) (runtime string, ok bool) {
	name, ok := strings.CutSuffix(c, ".scope")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(name, '-')
	if i < 0 || !isHex64(name[i+1:]) {
		return "", false
	}
	rt, ok := conmonPrefixes[name[:i]]
	return rt, ok
}

// podFromSlice reads the pod UID from a systemd driver slice such as
// "kubepods-burstable-pod1234_5678.slice" or, on kind nodes,
// "kubelet-kubepods-besteffort-pod1234_5678.slice".
func podFromSlice(c string) (string, bool) {
	name, ok := strings.CutSuffix(c, ".slice")
	if !ok || !strings.Contains(name, "kubepods") {
		return "", false
	}
	i := strings.LastIndex(name, "-pod")
	if i < 0 {
		return "", false
	}
	uid := strings.ReplaceAll(name[i+len("-pod"):], "_", "-")
	if !isPodUID(uid) {
		return "", false
	}
	return uid, true
}

// isPodUID accepts a dashed UUID (API pods) or 32 hex digits (the hash that
// names a static pod).
func isPodUID(s string) bool {
	switch len(s) {
	case 32:
		return isHex(s)
	case 36:
		for i := 0; i < len(s); i++ {
			if i == 8 || i == 13 || i == 18 || i == 23 {
				if s[i] != '-' {
					return false
				}
			} else if !isHexDigit(s[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func isHex64(s string) bool { return len(s) == 64 && isHex(s) }

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHexDigit(s[i]) {
			return false
		}
	}
	return s != ""
}

func isHexDigit(b byte) bool { return '0' <= b && b <= '9' || 'a' <= b && b <= 'f' }

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
