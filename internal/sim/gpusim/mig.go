package gpusim

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// migProfile is one GPU instance of a device's MIG layout.
type migProfile struct {
	name      string // 1g.10gb
	slices    int
	memoryMiB uint64
	sms       int // multiprocessors
}

// migProfilesOf names a model's GPU-instance profiles ("3g.40gb") from
// go-nvml's mock configuration.
func migProfilesOf(m *model) (map[string]migProfile, int) {
	out := map[string]migProfile{}
	maxSlices := 0
	for _, p := range m.cfg.MIGProfiles.GpuInstanceProfiles {
		name := fmt.Sprintf("%dg.%dgb", p.SliceCount, int(math.Round(float64(p.MemorySizeMB)/1024)))
		if _, dup := out[name]; !dup {
			out[name] = migProfile{name: name, slices: int(p.SliceCount), memoryMiB: p.MemorySizeMB, sms: int(p.MultiprocessorCount)}
		}
		maxSlices = max(maxSlices, int(p.SliceCount))
	}
	return out, maxSlices
}

func validateMig(l *errList, path string, names []string, m *model) []migProfile {
	if len(names) == 0 {
		return nil
	}
	profiles, maxSlices := migProfilesOf(m)
	var known []string
	for k := range profiles {
		known = append(known, k)
	}
	sort.Strings(known)
	var out []migProfile
	slices := 0
	for i, n := range names {
		p, ok := profiles[n]
		if !ok {
			l.add(fmt.Sprintf("%s[%d]", path, i), "unknown MIG profile %q for %s (one of %s)", n, m.key, strings.Join(known, ", "))
			continue
		}
		slices += p.slices
		out = append(out, p)
	}
	if slices > maxSlices {
		l.add(path, "the layout uses %d slices; %s has %d", slices, m.key, maxSlices)
	}
	return out
}

// migDevice is the handle of one MIG instance (one GPU instance with one
// compute instance). Methods it does not implement panic like the mock.
type migDevice struct {
	*mock.Device
	parent *device
	idx    int
	giID   int
	prof   migProfile
	uuid   string
}

var _ nvml.Device = (*migDevice)(nil)

func newMigDevices(d *device) []*migDevice {
	var out []*migDevice
	for i, p := range d.spec.mig {
		hi, lo := hashN(d.key, 0x4d49, uint64(i)), hashN(d.key, 0x4d4a, uint64(i))
		hi = hi&^(0xf<<12) | 0x4<<12
		lo = lo&^(0x3<<62) | 0x2<<62
		out = append(out, &migDevice{
			Device: &mock.Device{},
			parent: d, idx: i, giID: i + 1, prof: p,
			uuid: fmt.Sprintf("MIG-%08x-%04x-%04x-%04x-%012x", hi>>32, (hi>>16)&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff),
		})
	}
	return out
}

func (m *migDevice) GetUUID() (string, nvml.Return) {
	if _, r := m.parent.enter("GetUUID"); r != nvml.SUCCESS {
		return "", r
	}
	return m.uuid, nvml.SUCCESS
}

func (m *migDevice) GetName() (string, nvml.Return) {
	if _, r := m.parent.enter("GetName"); r != nvml.SUCCESS {
		return "", r
	}
	return m.parent.spec.model.cfg.Name + " MIG " + m.prof.name, nvml.SUCCESS
}

func (m *migDevice) GetGpuInstanceId() (int, nvml.Return) {
	if _, r := m.parent.enter("GetGpuInstanceId"); r != nvml.SUCCESS {
		return 0, r
	}
	return m.giID, nvml.SUCCESS
}

func (m *migDevice) GetComputeInstanceId() (int, nvml.Return) {
	if _, r := m.parent.enter("GetComputeInstanceId"); r != nvml.SUCCESS {
		return 0, r
	}
	return 0, nvml.SUCCESS
}

func (m *migDevice) IsMigDeviceHandle() (bool, nvml.Return) { return true, nvml.SUCCESS }

func (m *migDevice) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	if _, r := m.parent.enter("GetDeviceHandleFromMigDeviceHandle"); r != nvml.SUCCESS {
		return nil, r
	}
	return m.parent, nvml.SUCCESS
}

func (m *migDevice) memory(t float64) nvml.Memory_v2 {
	total := m.prof.memoryMiB * mib
	_, _, used := m.parent.tenantLoad(t, m.idx)
	used = min(used, total)
	return nvml.Memory_v2{Version: nvml.STRUCT_VERSION(nvml.Memory_v2{}, 2), Total: total, Used: used, Free: total - used}
}

func (m *migDevice) GetMemoryInfo_v2() (nvml.Memory_v2, nvml.Return) {
	t, r := m.parent.enter("GetMemoryInfo_v2")
	if r != nvml.SUCCESS {
		return nvml.Memory_v2{}, r
	}
	return m.memory(t), nvml.SUCCESS
}

func (m *migDevice) GetMemoryInfo() (nvml.Memory, nvml.Return) {
	t, r := m.parent.enter("GetMemoryInfo")
	if r != nvml.SUCCESS {
		return nvml.Memory{}, r
	}
	v := m.memory(t)
	return nvml.Memory{Total: v.Total, Used: v.Used, Free: v.Free}, nvml.SUCCESS
}

// GetUtilizationRates is not available per MIG instance, as on real GPUs.
func (m *migDevice) GetUtilizationRates() (nvml.Utilization, nvml.Return) {
	if _, r := m.parent.enter("GetUtilizationRates"); r != nvml.SUCCESS {
		return nvml.Utilization{}, r
	}
	return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
}

// ---- parent device MIG calls ----

func (d *device) migEnabled() bool { return len(d.spec.mig) > 0 }

func (d *device) GetMigMode() (int, int, nvml.Return) {
	if _, r := d.enter("GetMigMode"); r != nvml.SUCCESS {
		return 0, 0, r
	}
	if d.migEnabled() {
		return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS
	}
	return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_DISABLE, nvml.SUCCESS
}

func (d *device) GetMaxMigDeviceCount() (int, nvml.Return) {
	if _, r := d.enter("GetMaxMigDeviceCount"); r != nvml.SUCCESS {
		return 0, r
	}
	_, maxSlices := migProfilesOf(d.spec.model)
	return maxSlices, nvml.SUCCESS
}

func (d *device) GetMigDeviceHandleByIndex(i int) (nvml.Device, nvml.Return) {
	if _, r := d.enter("GetMigDeviceHandleByIndex"); r != nvml.SUCCESS {
		return nil, r
	}
	if _, maxSlices := migProfilesOf(d.spec.model); i < 0 || i >= maxSlices {
		return nil, nvml.ERROR_INVALID_ARGUMENT
	}
	if i >= len(d.migDevices) {
		return nil, nvml.ERROR_NOT_FOUND
	}
	return d.migDevices[i], nvml.SUCCESS
}

func (d *device) IsMigDeviceHandle() (bool, nvml.Return) {
	if _, r := d.enter("IsMigDeviceHandle"); r != nvml.SUCCESS {
		return false, r
	}
	return false, nvml.SUCCESS
}

func (d *device) GetGpuInstanceId() (int, nvml.Return) {
	if _, r := d.enter("GetGpuInstanceId"); r != nvml.SUCCESS {
		return 0, r
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *device) GetComputeInstanceId() (int, nvml.Return) {
	if _, r := d.enter("GetComputeInstanceId"); r != nvml.SUCCESS {
		return 0, r
	}
	return 0, nvml.ERROR_INVALID_ARGUMENT
}

func (d *device) GetDeviceHandleFromMigDeviceHandle() (nvml.Device, nvml.Return) {
	if _, r := d.enter("GetDeviceHandleFromMigDeviceHandle"); r != nvml.SUCCESS {
		return nil, r
	}
	return nil, nvml.ERROR_INVALID_ARGUMENT
}
