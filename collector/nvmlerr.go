package collector

import (
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// returnNames gives NVML return codes stable, low-cardinality label values.
// nvml.Return.Error() cannot be used for labels: once the real library is
// loaded it returns free-form sentences that differ between driver versions.
var returnNames = map[nvml.Return]string{
	nvml.ERROR_UNINITIALIZED:             "uninitialized",
	nvml.ERROR_INVALID_ARGUMENT:          "invalid_argument",
	nvml.ERROR_NOT_SUPPORTED:             "not_supported",
	nvml.ERROR_NO_PERMISSION:             "no_permission",
	nvml.ERROR_NOT_FOUND:                 "not_found",
	nvml.ERROR_INSUFFICIENT_SIZE:         "insufficient_size",
	nvml.ERROR_INSUFFICIENT_POWER:        "insufficient_power",
	nvml.ERROR_DRIVER_NOT_LOADED:         "driver_not_loaded",
	nvml.ERROR_TIMEOUT:                   "timeout",
	nvml.ERROR_IRQ_ISSUE:                 "irq_issue",
	nvml.ERROR_LIBRARY_NOT_FOUND:         "library_not_found",
	nvml.ERROR_FUNCTION_NOT_FOUND:        "function_not_found",
	nvml.ERROR_CORRUPTED_INFOROM:         "corrupted_inforom",
	nvml.ERROR_GPU_IS_LOST:               "gpu_is_lost",
	nvml.ERROR_RESET_REQUIRED:            "reset_required",
	nvml.ERROR_OPERATING_SYSTEM:          "operating_system",
	nvml.ERROR_LIB_RM_VERSION_MISMATCH:   "lib_rm_version_mismatch",
	nvml.ERROR_IN_USE:                    "in_use",
	nvml.ERROR_MEMORY:                    "memory",
	nvml.ERROR_NO_DATA:                   "no_data",
	nvml.ERROR_INSUFFICIENT_RESOURCES:    "insufficient_resources",
	nvml.ERROR_ARGUMENT_VERSION_MISMATCH: "argument_version_mismatch",
	nvml.ERROR_DEPRECATED:                "deprecated",
	nvml.ERROR_NOT_READY:                 "not_ready",
	nvml.ERROR_GPU_NOT_FOUND:             "gpu_not_found",
	nvml.ERROR_INVALID_STATE:             "invalid_state",
	nvml.ERROR_UNKNOWN:                   "unknown",
}

// returnName is the label value for an NVML return code.
func returnName(r nvml.Return) string {
	if n, ok := returnNames[r]; ok {
		return n
	}
	return fmt.Sprintf("code_%d", int32(r))
}

// errDeadline is the error label used when a call did not return within the
// device deadline.
const errDeadline = "deadline_exceeded"
