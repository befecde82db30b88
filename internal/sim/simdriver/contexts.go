package simdriver

import (
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

type simContext struct {
	dev     int
	allocs  map[gpuprobe.DevicePtr]*allocation
	modules map[gpuprobe.Module][]string
	funcs   map[gpuprobe.Function]string
	events  map[gpuprobe.Event]*event
}

func (d *Driver) CtxCreate(ordinal int) (gpuprobe.Context, error) {
	err := d.enter(CallCtxCreate)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	dev, err := d.device(CallCtxCreate, ordinal)
	if err != nil {
		return 0, err
	}
	switch dev.ComputeMode {
	case gpuprobe.ComputeModeProhibited:
		return 0, cudaError(CallCtxCreate, gpuprobe.CUDAErrDeviceUnavail, "CUDA-capable device(s) is/are busy or unavailable (compute mode PROHIBITED)")
	case gpuprobe.ComputeModeExclusiveProcess, gpuprobe.ComputeModeExclusiveThread:
		if dev.OtherContexts != nil && dev.OtherContexts(d.clock()) > 0 {
			return 0, cudaError(CallCtxCreate, gpuprobe.CUDAErrDeviceUnavail, "CUDA-capable device(s) is/are busy or unavailable (compute mode EXCLUSIVE_PROCESS, another process holds a context)")
		}
	}
	if used := d.usedBy(ordinal) + d.others(dev); used > dev.TotalMemoryBytes || dev.ContextMemoryBytes > dev.TotalMemoryBytes-used {
		return 0, cudaError(CallCtxCreate, gpuprobe.CUDAErrOutOfMemory, "")
	}
	h := gpuprobe.Context(d.nextHandle())
	d.ctxs[h] = &simContext{
		dev:     ordinal,
		allocs:  map[gpuprobe.DevicePtr]*allocation{},
		modules: map[gpuprobe.Module][]string{},
		funcs:   map[gpuprobe.Function]string{},
		events:  map[gpuprobe.Event]*event{},
	}
	d.current = h
	if f := d.devs[ordinal].Context; f != nil {
		d.clock()
		f(true, d.vt)
	}
	return h, nil
}

// CtxDestroy frees everything the context holds, as the real driver does.
func (d *Driver) CtxDestroy(c gpuprobe.Context) error {
	err := d.enter(CallCtxDestroy)
	defer d.leave()
	if err != nil {
		return err
	}
	if err := d.requireInit(CallCtxDestroy); err != nil {
		return err
	}
	if d.ctxs[c] == nil {
		return cudaError(CallCtxDestroy, errInvalidContext, "")
	}
	d.sync()
	if f := d.devs[d.ctxs[c].dev].Context; f != nil {
		f(false, d.vt)
	}
	delete(d.ctxs, c)
	if d.current == c {
		d.current = 0
	}
	return nil
}

// CtxSynchronize waits for the stream.
func (d *Driver) CtxSynchronize() error {
	err := d.enter(CallCtxSynchronize)
	defer d.leave()
	if err != nil {
		return err
	}
	if _, err = d.ctx(CallCtxSynchronize); err != nil {
		return err
	}
	d.sync()
	return nil
}
