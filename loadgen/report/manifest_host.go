package report

import (
	"bufio"
	"os"
	"runtime"
	"strings"
)

// Host describes the machine the load generator runs on: the operating
// system and architecture it was built for, the kernel release
// (/proc/sys/kernel/osrelease, as uname -r prints it; empty where there is
// no /proc), the logical CPUs, the CPU model (/proc/cpuinfo) and the host
// name.
func Host() HostFacts {
	h := HostFacts{OS: runtime.GOOS, Arch: runtime.GOARCH, CPUs: runtime.NumCPU()}
	h.Hostname, _ = os.Hostname()
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		h.Kernel = strings.TrimSpace(string(b))
	}
	h.CPUModel = cpuModel("/proc/cpuinfo")
	return h
}

// cpuModel is the first "model name" (x86) or "Model" (Arm boards) of a
// cpuinfo file, or "".
func cpuModel(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		if k = strings.TrimSpace(k); k == "model name" || k == "Model" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
