package simdriver

import (
	"fmt"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

type allocation struct {
	base gpuprobe.DevicePtr
	size uint64
	data []byte // nil beyond backedLimit
}

// usedBy is what our contexts hold on a device, their own memory included.
func (d *Driver) usedBy(dev int) uint64 {
	var used uint64
	for _, c := range d.ctxs {
		if c.dev != dev {
			continue
		}
		used += d.devs[dev].ContextMemoryBytes
		for _, a := range c.allocs {
			used += a.size
		}
	}
	return used
}

func (d *Driver) others(dev *Device) uint64 {
	if dev.UsedByOthers == nil {
		return 0
	}
	return dev.UsedByOthers(d.clock())
}

func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	err = d.enter(CallMemGetInfo)
	defer d.leave()
	if err != nil {
		return 0, 0, err
	}
	c, err := d.ctx(CallMemGetInfo)
	if err != nil {
		return 0, 0, err
	}
	dev := &d.devs[c.dev]
	total = dev.TotalMemoryBytes
	used := d.usedBy(c.dev) + d.others(dev)
	if used < total {
		free = total - used
	}
	return free, total, nil
}

func (d *Driver) MemAlloc(bytes uint64) (gpuprobe.DevicePtr, error) {
	err := d.enter(CallMemAlloc)
	defer d.leave()
	if err != nil {
		return 0, err
	}
	c, err := d.ctx(CallMemAlloc)
	if err != nil {
		return 0, err
	}
	if bytes == 0 {
		return 0, cudaError(CallMemAlloc, errInvalidValue, "")
	}
	dev := &d.devs[c.dev]
	used := d.usedBy(c.dev) + d.others(dev)
	if used > dev.TotalMemoryBytes || bytes > dev.TotalMemoryBytes-used {
		return 0, cudaError(CallMemAlloc, gpuprobe.CUDAErrOutOfMemory, "")
	}
	a := &allocation{base: gpuprobe.DevicePtr(d.nextPtr), size: bytes}
	if bytes <= backedLimit {
		a.data = make([]byte, bytes)
	}
	const align = 2 << 20
	d.nextPtr += (bytes+align-1)/align*align + align
	c.allocs[a.base] = a
	return a.base, nil
}

func (d *Driver) MemFree(p gpuprobe.DevicePtr) error {
	err := d.enter(CallMemFree)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallMemFree)
	if err != nil {
		return err
	}
	if c.allocs[p] == nil {
		return cudaError(CallMemFree, errInvalidValue, fmt.Sprintf("%#x is not an allocation of this context", uint64(p)))
	}
	d.sync()
	delete(c.allocs, p)
	return nil
}

// span finds the allocation holding [p, p+n) in context c.
func (c *simContext) span(p gpuprobe.DevicePtr, n uint64) (*allocation, uint64, bool) {
	for _, a := range c.allocs {
		if p >= a.base && uint64(p-a.base) <= a.size && n <= a.size-uint64(p-a.base) {
			return a, uint64(p - a.base), true
		}
	}
	return nil, 0, false
}

func (d *Driver) MemsetD8(dst gpuprobe.DevicePtr, value byte, n uint64) error {
	err := d.enter(CallMemsetD8)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(CallMemsetD8)
	if err != nil {
		return err
	}
	a, off, ok := c.span(dst, n)
	if !ok {
		return cudaError(CallMemsetD8, errInvalidValue, "range outside any allocation")
	}
	if a.data != nil {
		region := a.data[off : off+n]
		for i := range region {
			region[i] = value
		}
	}
	dev := &d.devs[c.dev]
	if rate := dev.DeviceCopyBytesPerSecond; rate > 0 {
		d.sync()
		d.blocking(d.transfer(dev, n, rate))
	}
	return nil
}

func (d *Driver) MemAllocHost(bytes uint64) ([]byte, error) {
	err := d.enter(CallMemAllocHost)
	defer d.leave()
	if err != nil {
		return nil, err
	}
	if _, err := d.ctx(CallMemAllocHost); err != nil {
		return nil, err
	}
	if bytes == 0 {
		return nil, cudaError(CallMemAllocHost, errInvalidValue, "")
	}
	if bytes > hostLimit {
		return nil, cudaError(CallMemAllocHost, gpuprobe.CUDAErrOutOfMemory, "")
	}
	b := d.spare
	if uint64(len(b)) == bytes {
		d.spare = nil
	} else {
		b = make([]byte, bytes)
	}
	d.host[&b[0]] = len(b)
	return b, nil
}

func (d *Driver) MemFreeHost(b []byte) error {
	err := d.enter(CallMemFreeHost)
	defer d.leave()
	if err != nil {
		return err
	}
	d.sync()
	if err := d.requireInit(CallMemFreeHost); err != nil {
		return err
	}
	if len(b) == 0 || d.host[&b[0]] == 0 {
		return cudaError(CallMemFreeHost, errInvalidValue, "not a pinned host allocation")
	}
	n := d.host[&b[0]]
	delete(d.host, &b[0])
	if cap(b) >= n {
		d.spare = b[:n]
	}
	return nil
}

func (d *Driver) memcpy(call string, p gpuprobe.DevicePtr, host []byte, toDevice bool) error {
	err := d.enter(call)
	defer d.leave()
	if err != nil {
		return err
	}
	c, err := d.ctx(call)
	if err != nil {
		return err
	}
	n := uint64(len(host))
	a, off, ok := c.span(p, n)
	if !ok {
		return cudaError(call, errInvalidValue, "range outside any allocation")
	}
	// Unbacked (large) allocations have no bytes: writes to them are
	// dropped and reads leave the host buffer as it was.
	if a.data != nil {
		if toDevice {
			copy(a.data[off:off+n], host)
		} else {
			copy(host, a.data[off:off+n])
		}
	}
	dev := &d.devs[c.dev]
	rate := dev.H2DBytesPerSecond
	if !toDevice {
		rate = dev.D2HBytesPerSecond
	}
	if rate <= 0 {
		return cudaError(call, errNotSupported, "the simulated device has no bandwidth figure for this direction")
	}
	d.sync()
	d.blocking(d.transfer(dev, n, rate))
	return nil
}

func (d *Driver) MemcpyHtoD(dst gpuprobe.DevicePtr, src []byte) error {
	return d.memcpy(CallMemcpyHtoD, dst, src, true)
}

func (d *Driver) MemcpyDtoH(dst []byte, src gpuprobe.DevicePtr) error {
	return d.memcpy(CallMemcpyDtoH, src, dst, false)
}
