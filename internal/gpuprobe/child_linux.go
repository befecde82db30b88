package gpuprobe

import (
	"os"
	"os/exec"
	"syscall"
)

// setChildAttrs makes the kernel kill a probe child when the thread that
// started it ends (the caller holds that thread locked until the child has
// been waited for, so only the parent's death ends it early).
func setChildAttrs(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// childUsage reads a child's CPU time and peak resident memory (ru_maxrss
// is in KiB on Linux).
func childUsage(ps *os.ProcessState) ChildUsage {
	var u ChildUsage
	if ps == nil {
		return u
	}
	u.UserCPU, u.SystemCPU = ps.UserTime(), ps.SystemTime()
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok && ru != nil {
		u.MaxRSSBytes = uint64(ru.Maxrss) * 1024
	}
	return u
}
