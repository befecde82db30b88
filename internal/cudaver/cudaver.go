// Package cudaver is the one home of CUDA's version number: the driver
// API's encoding (cuDriverGetVersion, NVML's SystemGetCudaDriverVersion:
// 1000 × major + 10 × minor, 12040 for 12.4) and its text, "12.4". The
// exporter's gpu_info label, gpulens-verify's report and
// --expect.cuda-version, and the simulated fleet's cuda_version read and
// write it here.
package cudaver

import (
	"fmt"
	"strconv"
	"strings"
)

// Format writes an encoded version as MAJOR.MINOR: 12040 → "12.4", 13000
// → "13.0"; "" for 0 or less (no version).
func Format(v int) string {
	if v <= 0 {
		return ""
	}
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// Parse reads "12.4" (or "12", as 12.0) into the encoding, 12040: a major
// version from 1 to 99 and a minor from 0 to 99.
func Parse(s string) (int, error) {
	major, minor, hasMinor := strings.Cut(strings.TrimSpace(s), ".")
	ma, err := strconv.Atoi(major)
	if err != nil || ma < 1 || ma > 99 || strings.HasPrefix(major, "+") {
		return 0, fmt.Errorf("%q is not a CUDA version (MAJOR.MINOR, e.g. 12.4)", s)
	}
	mi := 0
	if hasMinor {
		mi, err = strconv.Atoi(minor)
		if err != nil || mi < 0 || mi > 99 || strings.HasPrefix(minor, "+") || strings.HasPrefix(minor, "-") {
			return 0, fmt.Errorf("%q is not a CUDA version (MAJOR.MINOR, e.g. 12.4)", s)
		}
	}
	return ma*1000 + mi*10, nil
}
