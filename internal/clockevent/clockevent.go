// Package clockevent is the one table of NVML's clock-event (throttle)
// reasons (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*): their
// bits, the label values gpulens gives them everywhere (the exporter's
// gpulens_gpu_clock_event_active{reason}, gpulens-verify's reports, the
// dashboards and the alerts), and which of them slow the GPU down.
//
// The label value is NVML's constant name in snake case, without the
// prefix: nvmlClocksEventReasonGpuIdle is "gpu_idle".
package clockevent

import "strings"

// Reason bits, as NVML defines them. Some exist in go-nvml only as
// ClocksThrottleReason*.
const (
	GpuIdle             uint64 = 0x1
	ApplicationsClocks  uint64 = 0x2
	SwPowerCap          uint64 = 0x4
	HwSlowdown          uint64 = 0x8
	SyncBoost           uint64 = 0x10
	SwThermalSlowdown   uint64 = 0x20
	HwThermalSlowdown   uint64 = 0x40
	HwPowerBrake        uint64 = 0x80
	DisplayClockSetting uint64 = 0x100
	BoardLimit          uint64 = 0x200
	Reliability         uint64 = 0x400
)

// Kind groups reasons by what they say of the GPU.
type Kind int

const (
	// KindNone: the clocks are low for a reason that costs no work (idle,
	// a setting, sync boost, display clocks).
	KindNone Kind = iota
	// KindPower: a power limit (software cap or hardware brake) slows the GPU.
	KindPower
	// KindThermal: temperature slows the GPU.
	KindThermal
	// KindHardware: the hardware slowed the GPU (HW slowdown: power or
	// thermal, as the board decided).
	KindHardware
	// KindOther: a board or reliability limit.
	KindOther
)

// Reason is one clock-event reason.
type Reason struct {
	Bit  uint64
	Name string // the label value
	Kind Kind
	// Hardware is set for reasons the hardware itself raises (as opposed to
	// a software cap or a setting).
	Hardware bool
	// Words say what the reason means to a reader of a report; empty for
	// the benign reasons (KindNone).
	Words string
}

// Slowdown reports whether the reason lowers the clocks under work: power,
// thermal and hardware slowdowns.
func (r Reason) Slowdown() bool {
	return r.Kind == KindPower || r.Kind == KindThermal || r.Kind == KindHardware
}

var table = [...]Reason{
	{GpuIdle, "gpu_idle", KindNone, false, ""},
	{ApplicationsClocks, "applications_clocks_setting", KindNone, false, ""},
	{SwPowerCap, "sw_power_cap", KindPower, false, "power cap (the board's power limit)"},
	{HwSlowdown, "hw_slowdown", KindHardware, true, "hardware slowdown"},
	{SyncBoost, "sync_boost", KindNone, false, ""},
	{SwThermalSlowdown, "sw_thermal_slowdown", KindThermal, false, "thermal slowdown (the GPU is hot)"},
	{HwThermalSlowdown, "hw_thermal_slowdown", KindThermal, true, "hardware thermal slowdown (the GPU overheated)"},
	{HwPowerBrake, "hw_power_brake_slowdown", KindPower, true, "power brake (the host or PSU asked the GPU to slow down)"},
	{DisplayClockSetting, "display_clock_setting", KindNone, false, ""},
	{BoardLimit, "board_limit", KindOther, false, "board limit"},
	{Reliability, "reliability", KindOther, false, "reliability voltage limit"},
}

// All returns every reason, in bit order.
func All() []Reason { return table[:] }

// Names names the bits set in bits, in bit order. Bits NVML may add later
// are left out.
func Names(bits uint64) []string {
	var out []string
	for _, r := range table {
		if bits&r.Bit != 0 {
			out = append(out, r.Name)
		}
	}
	return out
}

// Lookup returns the reason named name.
func Lookup(name string) (Reason, bool) {
	for _, r := range table {
		if r.Name == name {
			return r, true
		}
	}
	return Reason{}, false
}

// HardwareBits is the OR of the reasons the hardware raises itself.
func HardwareBits() uint64 {
	var b uint64
	for _, r := range table {
		if r.Hardware {
			b |= r.Bit
		}
	}
	return b
}

// Matching returns the names of the reasons for which keep is true, in bit
// order.
func Matching(keep func(Reason) bool) []string {
	var out []string
	for _, r := range table {
		if keep(r) {
			out = append(out, r.Name)
		}
	}
	return out
}

// Regex is a PromQL regular expression matching exactly the names of the
// reasons for which keep is true (for reason=~"...").
func Regex(keep func(Reason) bool) string {
	return strings.Join(Matching(keep), "|")
}
