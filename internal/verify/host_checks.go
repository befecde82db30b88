package verify

import (
	"fmt"
	"strings"

	"github.com/gpulens/gpulens/internal/cudaver"
)

// hostChecks judges the host as a whole.
func hostChecks(rep *Report, o Options) []Check {
	h := rep.Host
	var cs []Check
	if h.NVML != nil {
		c := check(CheckNVML, "NVML", StatusPass, "NVML read: %d GPU(s)", h.NVML.DeviceCount)
		if len(h.NVML.Errors) > 0 {
			c.Status = StatusWarn
			c.Reason += fmt.Sprintf("; %d call(s) failed, first %s: %s", len(h.NVML.Errors), h.NVML.Errors[0].Call, h.NVML.Errors[0].Err)
		}
		cs = append(cs, c)
	} else {
		cs = append(cs, notMeasured(CheckNVML, "NVML", "NVML: "+h.NVMLError))
	}
	if h.CUDAError == "" {
		cs = append(cs, check(CheckCUDA, "CUDA", StatusPass, "the CUDA driver answered: %d device(s)", len(h.CUDADevices)))
	} else {
		cs = append(cs, notMeasured(CheckCUDA, "CUDA", "CUDA: "+h.CUDAError))
	}
	if len(rep.Devices) == 0 {
		cs = append(cs, check(CheckGPUsSeen, "GPUs seen", StatusFail, "no GPU to verify: %s", noGPUWhy(rep)))
	} else {
		cs = append(cs, check(CheckGPUsSeen, "GPUs seen", StatusPass, "%d device(s) verified", len(rep.Devices)))
	}
	cs = append(cs, deviceCount(rep, o), driverVersion(rep, o), cudaVersion(rep, o))
	return cs
}

func noGPUWhy(rep *Report) string {
	var why []string
	if rep.Host.NVML == nil {
		why = append(why, "NVML: "+rep.Host.NVMLError)
	} else {
		why = append(why, fmt.Sprintf("NVML lists %d", rep.Host.NVML.DeviceCount))
	}
	if rep.Host.CUDAError != "" {
		why = append(why, "CUDA: "+rep.Host.CUDAError)
	} else {
		why = append(why, fmt.Sprintf("CUDA sees %d", len(rep.Host.CUDADevices)))
	}
	return strings.Join(why, "; ")
}

// nvmlUnits counts what CUDA should see by NVML's account: a GPU, or its
// MIG devices when MIG is on.
func nvmlUnits(h *NVMLHost) int {
	n := 0
	for _, g := range h.GPUs {
		if g.MIGEnabled != nil && *g.MIGEnabled && len(g.MIGInstances) > 0 {
			n += len(g.MIGInstances)
		} else {
			n++
		}
	}
	if n == 0 {
		n = h.DeviceCount
	}
	return n
}

func deviceCount(rep *Report, o Options) Check {
	const id, title = CheckDeviceCount, "Device count"
	h := rep.Host
	haveCUDA, haveNVML := h.CUDAError == "", h.NVML != nil
	var visible int
	var who string
	switch {
	case haveCUDA:
		// With the MIG instances reached by probe children (one MIG
		// instance per process).
		visible, who = len(h.CUDADevices)+childDevices(rep.Devices), "CUDA"
	case haveNVML:
		visible, who = h.NVML.DeviceCount, "NVML"
	default:
		return notMeasured(id, title, "neither NVML nor CUDA could be used")
	}
	if o.Expect.Devices > 0 {
		if visible != o.Expect.Devices {
			return check(id, title, StatusFail, "%s sees %d device(s); you expect %d", who, visible, o.Expect.Devices)
		}
		return check(id, title, StatusPass, "%s sees %d device(s), as you expect", who, visible)
	}
	if haveCUDA && haveNVML {
		units := nvmlUnits(h.NVML)
		switch {
		case visible < units:
			return check(id, title, StatusPass, "CUDA sees %d of the %d GPU(s) or MIG devices NVML lists: CUDA_VISIBLE_DEVICES or the container limits it", visible, units)
		case visible > units:
			return check(id, title, StatusWarn, "CUDA sees %d device(s) but NVML lists %d: the two views disagree", visible, units)
		}
		return check(id, title, StatusPass, "CUDA and NVML both see %d", visible)
	}
	return check(id, title, StatusPass, "%s sees %d device(s)", who, visible)
}

func driverVersion(rep *Report, o Options) Check {
	const id, title = CheckDriver, "Driver version"
	h := rep.Host
	if h.NVML == nil || h.NVML.DriverVersion == "" {
		why := "NVML: " + h.NVMLError
		if h.NVML != nil {
			why = "NVML gave no driver version"
		}
		return notMeasured(id, title, why)
	}
	got := h.NVML.DriverVersion
	if o.Expect.Driver == "" {
		return check(id, title, StatusPass, "driver %s", got)
	}
	c, err := CompareVersions(got, o.Expect.Driver)
	if err != nil {
		return check(id, title, StatusWarn, "driver %s cannot be compared with %s: %v", got, o.Expect.Driver, err)
	}
	if c < 0 {
		return check(id, title, StatusFail, "driver %s is older than the %s you need", got, o.Expect.Driver)
	}
	return check(id, title, StatusPass, "driver %s (you need %s or newer)", got, o.Expect.Driver)
}

// cudaDriverVersion is the CUDA version the driver supports: CUDA's own
// answer, else NVML's.
func cudaDriverVersion(h Host) (int, string) {
	if h.CUDADriverVersion > 0 {
		return h.CUDADriverVersion, "CUDA"
	}
	if h.NVML != nil && h.NVML.CUDADriverVersion > 0 {
		return h.NVML.CUDADriverVersion, "NVML"
	}
	return 0, ""
}

func cudaVersion(rep *Report, o Options) Check {
	const id, title = CheckCUDAVersion, "CUDA version"
	v, _ := cudaDriverVersion(rep.Host)
	if v == 0 {
		return notMeasured(id, title, "neither CUDA nor NVML reported the CUDA driver version")
	}
	got := cudaver.Format(v)
	if o.Expect.CUDA == "" {
		return check(id, title, StatusPass, "the driver supports CUDA %s", got)
	}
	want, err := cudaver.Parse(o.Expect.CUDA)
	if err != nil {
		return check(id, title, StatusWarn, "cannot compare with %q: %v", o.Expect.CUDA, err)
	}
	if v < want {
		return check(id, title, StatusFail, "the driver supports CUDA %s, older than the %s you need", got, cudaver.Format(want))
	}
	return check(id, title, StatusPass, "the driver supports CUDA %s (you need %s or newer)", got, cudaver.Format(want))
}

func hostAnswers(rep *Report) []Answer {
	m := byID(rep.Checks)
	var parts []string
	for _, id := range []string{CheckDriver, CheckCUDAVersion} {
		parts = append(parts, m[id].Reason)
	}
	return []Answer{{ID: AnswerVersions, Question: questions[AnswerVersions], Status: worst(m, CheckDriver, CheckCUDAVersion),
		Answer: strings.Join(parts, "; ")}}
}
