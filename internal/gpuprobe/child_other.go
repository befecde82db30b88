//go:build !linux

package gpuprobe

import (
	"os"
	"os/exec"
)

// setChildAttrs: no parent-death signal outside Linux.
func setChildAttrs(*exec.Cmd) {}

// childUsage reads a child's CPU time.
func childUsage(ps *os.ProcessState) ChildUsage {
	if ps == nil {
		return ChildUsage{}
	}
	return ChildUsage{UserCPU: ps.UserTime(), SystemCPU: ps.SystemTime()}
}
