//go:build !linux

package gpuprobe

import (
	"fmt"
	"runtime"
)

// Open loads the CUDA driver library. The binding is Linux-only: elsewhere
// it returns an error.
func Open(libPath string) (*CUDA, error) {
	if libPath == "" {
		libPath = DefaultLibCUDA
	}
	return nil, fmt.Errorf("gpuprobe: loading the CUDA driver library (libcuda) %s: not supported on %s", libPath, runtime.GOOS)
}
