package collector

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/nvmlret"
)

var (
	xidDesc = desc("gpu", "xid_errors_total",
		"XID errors reported by the driver (NVML XID critical-error events), by XID code. See NVIDIA's XID catalogue for each code's meaning.", "xid")
	lastXIDDesc = desc("gpu", "last_xid_timestamp_seconds",
		"Unix time of the GPU's most recent XID event.")
)

// xidWaitMillis bounds one EventSet.Wait so the watcher notices cancellation.
const xidWaitMillis = 500

// xidWatcher receives XID critical-error events on its own goroutine and
// keeps counters per GPU and XID code.
type xidWatcher struct {
	lib    nvml.Interface
	count  int
	errs   ErrorRecorder
	logger *slog.Logger
	now    func() time.Time

	mu       sync.Mutex
	devices  []xidDevice
	counts   map[xidKey]float64
	last     map[int]time.Time // by device slot (-1: event without a device)
	lastCode map[string]uint64 // the most recent XID code, by GPU index
	rendered []prometheus.Metric
}

type xidDevice struct {
	handle nvml.Device
	gpu    string
	uuid   string
}

type xidKey struct {
	slot int
	xid  uint64
}

func newXIDWatcher(lib nvml.Interface, count int, errs ErrorRecorder, logger *slog.Logger, now func() time.Time) *xidWatcher {
	return &xidWatcher{lib: lib, count: count, errs: errs, logger: logger, now: now,
		counts: map[xidKey]float64{}, last: map[int]time.Time{}, lastCode: map[string]uint64{}}
}

func (x *xidWatcher) run(ctx context.Context) {
	set, ret := x.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		x.errs.RecordError("EventSetCreate", nvmlret.Label(ret))
		x.logger.Warn("XID events unavailable", "err", nvmlret.Describe(ret))
		return
	}
	defer set.Free()
	registered := 0
	for i := 0; i < x.count; i++ {
		if ctx.Err() != nil {
			return
		}
		if x.register(set, i) {
			registered++
		}
	}
	if registered == 0 {
		x.logger.Warn("no GPU supports XID events; the xid collector stays idle")
		<-ctx.Done()
		return
	}
	for ctx.Err() == nil {
		data, ret := set.Wait(xidWaitMillis)
		switch ret {
		case nvml.SUCCESS:
			if data.EventType&nvml.EventTypeXidCriticalError != 0 {
				x.record(data)
			}
		case nvml.ERROR_TIMEOUT:
		default:
			x.errs.RecordError("EventSetWait", nvmlret.Label(ret))
			select { // do not spin on a broken event set
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

func (x *xidWatcher) register(set nvml.EventSet, i int) bool {
	h, ret := x.lib.DeviceGetHandleByIndex(i)
	if ret != nvml.SUCCESS {
		x.errs.RecordError("DeviceGetHandleByIndex", nvmlret.Label(ret))
		return false
	}
	uuid, ret := h.GetUUID()
	if ret != nvml.SUCCESS {
		x.errs.RecordError("GetUUID", nvmlret.Label(ret))
		return false
	}
	supported, ret := h.GetSupportedEventTypes()
	if ret != nvml.SUCCESS {
		if ret != nvml.ERROR_NOT_SUPPORTED {
			x.errs.RecordError("GetSupportedEventTypes", nvmlret.Label(ret))
		}
		return false
	}
	if supported&nvml.EventTypeXidCriticalError == 0 {
		return false
	}
	if ret := h.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
		x.errs.RecordError("RegisterEvents", nvmlret.Label(ret))
		return false
	}
	x.mu.Lock()
	x.devices = append(x.devices, xidDevice{handle: h, gpu: strconv.Itoa(i), uuid: uuid})
	x.mu.Unlock()
	return true
}

func (x *xidWatcher) record(data nvml.EventData) {
	x.mu.Lock()
	defer x.mu.Unlock()
	slot := -1
	for i, d := range x.devices {
		if d.handle == data.Device {
			slot = i
			break
		}
	}
	x.counts[xidKey{slot, data.EventData}]++
	x.last[slot] = x.now()
	x.rendered = x.render()
	gpu := ""
	if slot >= 0 {
		gpu = x.devices[slot].gpu
		x.lastCode[gpu] = data.EventData
	}
	x.logger.Warn("XID error", "gpu", gpu, "xid", data.EventData)
}

// render builds the XID series; callers hold mu.
func (x *xidWatcher) render() []prometheus.Metric {
	label := func(slot int) (string, string) {
		if slot < 0 {
			return "", ""
		}
		return x.devices[slot].gpu, x.devices[slot].uuid
	}
	out := make([]prometheus.Metric, 0, len(x.counts)+len(x.last))
	for k, n := range x.counts {
		gpu, uuid := label(k.slot)
		out = append(out, prometheus.MustNewConstMetric(xidDesc, prometheus.CounterValue, n, gpu, uuid, strconv.FormatUint(k.xid, 10)))
	}
	for slot, t := range x.last {
		gpu, uuid := label(slot)
		out = append(out, prometheus.MustNewConstMetric(lastXIDDesc, prometheus.GaugeValue, float64(t.UnixNano())/1e9, gpu, uuid))
	}
	return out
}

// lastXID returns the code of the GPU's most recent XID event, if any.
func (x *xidWatcher) lastXID(gpu string) (uint64, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	code, ok := x.lastCode[gpu]
	return code, ok
}

// metrics returns the XID series rendered at the last event.
func (x *xidWatcher) metrics() []prometheus.Metric {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.rendered
}
