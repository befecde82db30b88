package gpusim

import (
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/gpulens/gpulens/internal/gpuid"
)

// library is the simulated nvml.Interface. It embeds go-nvml's mock server;
// the methods below shadow it so that handles are the simulated devices and
// calls are not recorded.
type library struct {
	*server.Server
	f *Fleet
}

var _ nvml.Interface = (*library)(nil)

// Init may be called more than once; each call needs a matching Shutdown.
func (l *library) Init() nvml.Return {
	l.f.inits.Add(1)
	return nvml.SUCCESS
}

func (l *library) Shutdown() nvml.Return {
	for {
		n := l.f.inits.Load()
		if n == 0 {
			return nvml.ERROR_UNINITIALIZED
		}
		if l.f.inits.CompareAndSwap(n, n-1) {
			return nvml.SUCCESS
		}
	}
}

// ErrorString is go-nvml's own text, as the real library's would be.
func (l *library) ErrorString(r nvml.Return) string { return r.Error() } //nolint:forbidigo // implements nvml.Interface

func (l *library) SystemGetDriverVersion() (string, nvml.Return) {
	if !l.f.initialised() {
		return "", nvml.ERROR_UNINITIALIZED
	}
	return l.f.sc.driverVersion, nvml.SUCCESS
}

func (l *library) SystemGetNVMLVersion() (string, nvml.Return) {
	if !l.f.initialised() {
		return "", nvml.ERROR_UNINITIALIZED
	}
	return nvmlVersion(l.f.sc.driverVersion), nvml.SUCCESS
}

func (l *library) SystemGetCudaDriverVersion() (int, nvml.Return) {
	if !l.f.initialised() {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	return l.f.sc.cudaVersion, nvml.SUCCESS
}

func (l *library) SystemGetCudaDriverVersion_v2() (int, nvml.Return) {
	return l.SystemGetCudaDriverVersion()
}

func (l *library) DeviceGetCount() (int, nvml.Return) {
	if !l.f.initialised() {
		return 0, nvml.ERROR_UNINITIALIZED
	}
	return len(l.f.devices), nvml.SUCCESS
}

// DeviceGetHandleByIndex fails with ERROR_GPU_IS_LOST once the GPU has
// fallen off the bus, as the real library does.
func (l *library) DeviceGetHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if !l.f.initialised() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	if i < 0 || i >= len(l.f.devices) {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	return l.handle(l.f.devices[i])
}

func (l *library) handle(d *device) (nvml.Device, nvml.Return) {
	if l.f.elapsed() >= d.lostAt {
		return nil, nvml.ERROR_GPU_IS_LOST
	}
	return d, nvml.SUCCESS
}

func (l *library) DeviceGetHandleByUUID(uuid string) (nvml.Device, nvml.Return) {
	if !l.f.initialised() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	for _, d := range l.f.devices {
		if d.uuid == uuid {
			return l.handle(d)
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

// DeviceGetHandleByPciBusId accepts the full and the legacy (4-digit domain)
// form, in either case.
func (l *library) DeviceGetHandleByPciBusId(busID string) (nvml.Device, nvml.Return) {
	if !l.f.initialised() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	for _, d := range l.f.devices {
		if gpuid.SameBusID(d.busID, busID) {
			return l.handle(d)
		}
	}
	return nil, nvml.ERROR_NOT_FOUND
}

func (l *library) EventSetCreate() (nvml.EventSet, nvml.Return) {
	if !l.f.initialised() {
		return nil, nvml.ERROR_UNINITIALIZED
	}
	return newEventSet(l.f), nvml.SUCCESS
}

func (l *library) EventSetWait(set nvml.EventSet, timeoutMs uint32) (nvml.EventData, nvml.Return) {
	return set.Wait(timeoutMs)
}

func (l *library) EventSetFree(set nvml.EventSet) nvml.Return { return set.Free() }
