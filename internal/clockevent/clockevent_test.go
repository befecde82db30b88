package clockevent

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestTableMatchesNVML(t *testing.T) {
	want := map[string]uint64{
		"gpu_idle":                    nvml.ClocksEventReasonGpuIdle,
		"applications_clocks_setting": nvml.ClocksEventReasonApplicationsClocksSetting,
		"sw_power_cap":                nvml.ClocksEventReasonSwPowerCap,
		"hw_slowdown":                 nvml.ClocksThrottleReasonHwSlowdown,
		"sync_boost":                  nvml.ClocksEventReasonSyncBoost,
		"sw_thermal_slowdown":         nvml.ClocksEventReasonSwThermalSlowdown,
		"hw_thermal_slowdown":         nvml.ClocksThrottleReasonHwThermalSlowdown,
		"hw_power_brake_slowdown":     nvml.ClocksThrottleReasonHwPowerBrakeSlowdown,
		"display_clock_setting":       nvml.ClocksEventReasonDisplayClockSetting,
		"board_limit":                 nvml.ClocksEventReasonBoardLimit,
		"reliability":                 nvml.ClocksEventReasonReliability,
	}
	var all uint64
	prev := uint64(0)
	for _, r := range All() {
		if w, ok := want[r.Name]; !ok || w != r.Bit {
			t.Errorf("%s: bit %#x, NVML's is %#x (known: %v)", r.Name, r.Bit, w, ok)
		}
		if r.Bit <= prev {
			t.Errorf("%s: not in bit order", r.Name)
		}
		prev = r.Bit
		all |= r.Bit
		if (r.Kind == KindNone) != (r.Words == "") {
			t.Errorf("%s: kind %d with words %q: benign reasons have no words, the others must", r.Name, r.Kind, r.Words)
		}
	}
	if len(All()) != len(want) || all != nvml.ClocksEventReasonAll {
		t.Errorf("%d reasons covering %#x, NVML has %d covering %#x", len(All()), all, len(want), uint64(nvml.ClocksEventReasonAll))
	}
}

func TestNamesAndLookup(t *testing.T) {
	for _, tc := range []struct {
		bits uint64
		want []string
	}{
		{0, nil},
		{GpuIdle, []string{"gpu_idle"}},
		{SwPowerCap | HwThermalSlowdown | 0x800, []string{"sw_power_cap", "hw_thermal_slowdown"}},
		{Reliability | GpuIdle, []string{"gpu_idle", "reliability"}},
	} {
		if got := Names(tc.bits); !slices.Equal(got, tc.want) {
			t.Errorf("Names(%#x) = %v, want %v", tc.bits, got, tc.want)
		}
	}
	if r, ok := Lookup("hw_power_brake_slowdown"); !ok || r.Bit != HwPowerBrake || !r.Hardware || r.Kind != KindPower {
		t.Errorf("Lookup(hw_power_brake_slowdown) = %+v, %v", r, ok)
	}
	if _, ok := Lookup("idle"); ok {
		t.Error(`Lookup("idle") found a reason: the label value is "gpu_idle"`)
	}
	if got := HardwareBits(); got != HwSlowdown|HwThermalSlowdown|HwPowerBrake {
		t.Errorf("HardwareBits() = %#x", got)
	}
	if got, want := Regex(Reason.Slowdown), "sw_power_cap|hw_slowdown|sw_thermal_slowdown|hw_thermal_slowdown|hw_power_brake_slowdown"; got != want {
		t.Errorf("Regex(Slowdown) = %q, want %q", got, want)
	}
}

// TestRulesUseTableNames checks every reason label value the shipped rules
// and their tests name against the table, so that a rename here cannot
// leave an alert matching nothing.
func TestRulesUseTableNames(t *testing.T) {
	files, err := filepath.Glob("../../alerts/*.rules.yml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no rule files found (%v)", err)
	}
	tests, _ := filepath.Glob("../../alerts/tests/*.test.yml")
	files = append(files, tests...)
	// reason="x" or reason=~"x|y" on a clock-event series.
	re := regexp.MustCompile(`clock_event_active[^{]*\{[^}]*reason=~?"([^"]*)"`)
	seen := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			for _, name := range strings.Split(m[1], "|") {
				seen++
				if _, ok := Lookup(name); !ok {
					t.Errorf("%s: reason %q is not a clock-event reason (%v)", filepath.Base(f), name, Matching(func(Reason) bool { return true }))
				}
			}
		}
	}
	if seen == 0 {
		t.Error("no clock-event reason found in the rule files: the pattern no longer matches them")
	}
}
