package collector

// errDeadline is the error label used when a call did not return within the
// device deadline. Every other error label is an NVML return code's
// (nvmlret.Label).
const errDeadline = "deadline_exceeded"
