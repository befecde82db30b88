package simdriver

import "github.com/gpulens/gpulens/internal/gpuprobe"

// CUresult codes the simulator returns besides gpuprobe's.
const (
	errInvalidValue   = 1
	errInvalidContext = 201
	errNoBinaryForGPU = 209
	errInvalidHandle  = 400
	errNotFound       = 500
	errNotReady       = 600
	errIllegalAddress = 700
	errNotSupported   = 801
)

// cuResults names the CUresult codes (cuda.h) with cuGetErrorString's text,
// so that a simulated failure reads like a real one.
var cuResults = map[int]struct{ name, msg string }{
	1:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	2:   {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	3:   {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	4:   {"CUDA_ERROR_DEINITIALIZED", "driver shutting down"},
	46:  {"CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"},
	100: {"CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	101: {"CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	201: {"CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	209: {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
	218: {"CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	222: {"CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"},
	304: {"CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"},
	400: {"CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	500: {"CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	600: {"CUDA_ERROR_NOT_READY", "device not ready"},
	700: {"CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"},
	702: {"CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"},
	719: {"CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"},
	801: {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
	999: {"CUDA_ERROR_UNKNOWN", "unknown error"},
}

// cudaError builds the *gpuprobe.CUDAError a real driver would return;
// detail, when set, replaces cuGetErrorString's text (the JIT log of a
// module load, or what the simulator found wrong).
func cudaError(call string, code int, detail string) *gpuprobe.CUDAError {
	e := &gpuprobe.CUDAError{Call: call, Code: code, Name: "CUDA_ERROR_UNKNOWN", Msg: detail}
	if r, ok := cuResults[code]; ok {
		e.Name = r.name
		if detail == "" {
			e.Msg = r.msg
		}
	}
	return e
}
