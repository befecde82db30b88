package simdriver

import (
	"fmt"
	"regexp"
	"strconv"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

var (
	entryRE  = regexp.MustCompile(`\.entry\s+([A-Za-z_$][A-Za-z0-9_$]*)`)
	targetRE = regexp.MustCompile(`\.target\s+sm_(\d+)`)
	mmaRE    = regexp.MustCompile(`\bmma\.sync`)
)

// ModuleLoadData "JIT-compiles" PTX: it finds the .entry names and checks
// the module's needs against the device: a .target sm_XY above the device's
// compute capability, or mma.sync (the tensor kernels) below 8.0, fails with
// CUDA_ERROR_INVALID_PTX and a JIT-like log.
func (d *Driver) ModuleLoadData(ptx string) (gpuprobe.Module, error) {
	err := d.enter(CallModuleLoadData)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallModuleLoadData)
	if err != nil {
		return 0, err
	}
	dev := &d.devs[c.dev]
	cc := dev.CCMajor*10 + dev.CCMinor
	var entries []string
	tensor := false
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		entries = append(entries, m[1])
		if m[1] == gpuprobe.KernelMMAF16 || m[1] == gpuprobe.KernelMMABF16 {
			tensor = true
		}
	}
	if len(entries) == 0 {
		return 0, cudaError(CallModuleLoadData, gpuprobe.CUDAErrInvalidPTX, "ptxas fatal: no .entry in the PTX text")
	}
	if m := targetRE.FindStringSubmatch(ptx); m != nil {
		if sm, _ := strconv.Atoi(m[1]); sm > cc {
			return 0, cudaError(CallModuleLoadData, gpuprobe.CUDAErrInvalidPTX,
				fmt.Sprintf("ptxas fatal: SM version specified by .target (sm_%d) is higher than the device's (sm_%d)", sm, cc))
		}
	}
	if (tensor || mmaRE.MatchString(ptx)) && dev.CCMajor < 8 {
		return 0, cudaError(CallModuleLoadData, gpuprobe.CUDAErrInvalidPTX,
			fmt.Sprintf("ptxas error: mma.sync with .f16/.bf16 inputs requires sm_80 or higher (device is sm_%d)", cc))
	}
	h := gpuprobe.Module(d.nextHandle())
	c.modules[h] = entries
	return h, nil
}

func (d *Driver) ModuleUnload(m gpuprobe.Module) error {
	err := d.enter(CallModuleUnload)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallModuleUnload)
	if err != nil {
		return err
	}
	if c.modules[m] == nil {
		return cudaError(CallModuleUnload, errInvalidHandle, "")
	}
	delete(c.modules, m)
	return nil
}

func (d *Driver) ModuleGetFunction(m gpuprobe.Module, name string) (gpuprobe.Function, error) {
	err := d.enter(CallModuleGetFunction)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallModuleGetFunction)
	if err != nil {
		return 0, err
	}
	entries := c.modules[m]
	if entries == nil {
		return 0, cudaError(CallModuleGetFunction, errInvalidHandle, "")
	}
	for _, e := range entries {
		if e == name {
			f := gpuprobe.Function(d.nextHandle())
			c.funcs[f] = name
			return f, nil
		}
	}
	return 0, cudaError(CallModuleGetFunction, errNotFound, fmt.Sprintf("no kernel %q in the module", name))
}
