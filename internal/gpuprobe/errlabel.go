package gpuprobe

import (
	"context"
	"errors"
	"strconv"
	"strings"
)

// Error label values: what failed probes are counted by (the exporter's
// gpulens_probe_errors_total{error}). Beyond these, a CUDA error is labelled
// with its CUresult name in lower case without CUDA_ERROR_ (CUDAErrorLabel).
const (
	LabelDeadline    = "deadline_exceeded" // the probe's deadline passed
	LabelBusy        = "busy"              // a previous call is still stuck in the driver (ErrBusy)
	LabelCanceled    = "canceled"          // the caller gave up (shutting down)
	LabelPanic       = "panic"             // the probe panicked (ErrPanic)
	LabelNoDevice    = "no_device"         // CUDA lists no device (ErrNoDevice, CUDA_ERROR_NO_DEVICE)
	LabelUnavailable = "unavailable"       // the CUDA library could not be loaded
	LabelChildFailed = "child_failed"      // a probe child (child.go) could not start, crashed or gave no response
	LabelOther       = "other"
)

var (
	// ErrPanic wraps a panic recovered from a probe call.
	ErrPanic = errors.New("probe panicked")
	// ErrNoDevice is a device listing that found none.
	ErrNoDevice = errors.New("CUDA lists no device")
)

// ErrorLabel is the label of a failed probe or device listing: a small fixed
// set, CUDA errors by name.
func ErrorLabel(err error) string {
	var ce *CUDAError
	var child *childError
	switch {
	case errors.As(err, &child) && child.info.Label != "":
		return child.info.Label // as the probe child labelled it
	case errors.Is(err, context.DeadlineExceeded):
		return LabelDeadline
	case errors.Is(err, ErrBusy):
		return LabelBusy
	case errors.Is(err, ErrPanic):
		return LabelPanic
	case errors.Is(err, ErrNoDevice):
		return LabelNoDevice
	case errors.Is(err, ErrChildFailed):
		return LabelChildFailed
	case errors.Is(err, context.Canceled):
		return LabelCanceled
	case errors.As(err, &ce):
		return CUDAErrorLabel(ce.Code, ce.Name)
	}
	return LabelOther
}

// MeasurementErrorLabel is the label of one failed measurement of a probe
// that otherwise ran.
func MeasurementErrorLabel(me MeasurementError) string {
	switch {
	case me.Code != 0:
		return CUDAErrorLabel(me.Code, "")
	case strings.Contains(me.Err, context.DeadlineExceeded.Error()):
		return LabelDeadline
	case strings.Contains(me.Err, context.Canceled.Error()):
		return LabelCanceled
	}
	return LabelOther
}

// cudaErrorLabels are the labels of the CUresult codes a probe can meet.
var cudaErrorLabels = map[int]string{
	1: "invalid_value", 2: "out_of_memory", 3: "not_initialized", 4: "deinitialized",
	34: "stub_library", 46: "devices_unavailable", 100: "no_device", 101: "invalid_device",
	200: "invalid_image", 201: "invalid_context", 209: "no_binary_for_gpu", 214: "ecc_uncorrectable",
	218: "invalid_ptx", 222: "unsupported_ptx_version", 304: "operating_system", 400: "invalid_handle",
	500: "not_found", 700: "illegal_address", 701: "launch_out_of_resources", 702: "launch_timeout",
	719: "launch_failed", 801: "not_supported", 802: "system_not_ready", 803: "system_driver_mismatch",
	804: "compat_not_supported_on_device", 999: "unknown",
}

// CUDAErrorLabel is the label of a CUresult: its CUDA_ERROR_ name in lower
// case without the prefix (from the table of the codes a probe can meet,
// else from name), else "cuda_error_" and the code.
func CUDAErrorLabel(code int, name string) string {
	if n, ok := cudaErrorLabels[code]; ok {
		return n
	}
	if rest, ok := strings.CutPrefix(name, "CUDA_ERROR_"); ok && rest != "" {
		return strings.ToLower(rest)
	}
	return "cuda_error_" + strconv.Itoa(code)
}
