package collector

import (
	"sync/atomic"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpulens/gpulens/internal/nvmlret"
)

// ErrorRecorder counts failed NVML calls by call name and error.
type ErrorRecorder interface {
	RecordError(call, errName string)
}

// Reader wraps the NVML calls of one device during one sampler cycle. It
// records failures, treats ERROR_NOT_SUPPORTED as "metric absent", remembers
// a lost GPU (no further calls are made once the device is lost), and exposes
// the call in progress so a watchdog can name a call that hangs.
type Reader struct {
	Device nvml.Device

	errs     ErrorRecorder
	current  *atomic.Pointer[string]
	lost     bool
	failures int
	success  int
}

// Lost reports whether the GPU returned ERROR_GPU_IS_LOST during this cycle.
func (r *Reader) Lost() bool { return r.lost }

// Call runs one NVML call, recording its name while it runs. It returns false
// when the value must not be used: the call failed (the failure is counted),
// the call is not supported on this device (not counted), or the GPU is lost.
func Call[T any](r *Reader, name string, f func() (T, nvml.Return)) (T, bool) {
	v, ret := callRet(r, name, f)
	return v, ret == nvml.SUCCESS
}

// callRet is Call for callers that act on the return code themselves (to
// fall back to another call when one is unsupported). It counts failures like
// Call.
func callRet[T any](r *Reader, name string, f func() (T, nvml.Return)) (T, nvml.Return) {
	var zero T
	if r.lost {
		return zero, nvml.ERROR_GPU_IS_LOST
	}
	r.current.Store(&name)
	v, ret := f()
	r.current.Store(nil)
	r.check(name, ret)
	return v, ret
}

// check classifies a return code (nvmlret.Classify): a value that is
// absent (ERROR_NOT_SUPPORTED; ERROR_FUNCTION_NOT_FOUND, an older driver
// without the symbol) is not a failure; see Call.
func (r *Reader) check(name string, ret nvml.Return) bool {
	switch nvmlret.Classify(ret) {
	case nvmlret.OK:
		r.success++
		return true
	case nvmlret.Absent:
		return false
	case nvmlret.Lost:
		r.lost = true
	}
	r.failures++
	if r.errs != nil {
		r.errs.RecordError(name, nvmlret.Label(ret))
	}
	return false
}

// Emitter collects the const metrics of one device for the next snapshot.
// Every metric gets the device's identifying labels (gpu, uuid) first.
type Emitter struct {
	labels  []string
	metrics []prometheus.Metric
	scratch []string
}

func newEmitter(gpu, uuid string, capacity int) *Emitter {
	return &Emitter{labels: []string{gpu, uuid}, metrics: make([]prometheus.Metric, 0, capacity)}
}

func (e *Emitter) emit(desc *prometheus.Desc, typ prometheus.ValueType, v float64, extra []string) {
	lv := e.labels
	if len(extra) > 0 {
		e.scratch = append(append(e.scratch[:0], e.labels...), extra...)
		lv = e.scratch
	}
	e.metrics = append(e.metrics, prometheus.MustNewConstMetric(desc, typ, v, lv...))
}

// Gauge emits a gauge with the device labels followed by extra label values.
func (e *Emitter) Gauge(desc *prometheus.Desc, v float64, extra ...string) {
	e.emit(desc, prometheus.GaugeValue, v, extra)
}

// Counter emits a counter with the device labels followed by extra label values.
func (e *Emitter) Counter(desc *prometheus.Desc, v float64, extra ...string) {
	e.emit(desc, prometheus.CounterValue, v, extra)
}

// Bool emits 1 for true and 0 for false as a gauge.
func (e *Emitter) Bool(desc *prometheus.Desc, v bool, extra ...string) {
	f := 0.0
	if v {
		f = 1
	}
	e.Gauge(desc, f, extra...)
}
