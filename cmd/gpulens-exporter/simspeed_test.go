package main

import (
	"io"
	"strings"
	"testing"
)

// TestSimSpeedFlag: --sim.speed reaches the fleet's options, and values
// outside (0, 1000] are refused naming the flag.
func TestSimSpeedFlag(t *testing.T) {
	t.Parallel()
	o, err := parseFlags([]string{"--sim.scenario=minimal", "--sim.speed=40"}, io.Discard)
	if err != nil || o.sim.Speed != 40 {
		t.Fatalf("--sim.speed=40: %+v, %v", o, err)
	}
	if o, err := parseFlags([]string{"--sim.scenario=minimal"}, io.Discard); err != nil || o.sim.Speed != 1 {
		t.Fatalf("default speed: %v, %v; want 1", o.sim.Speed, err)
	}
	for _, v := range []string{"0", "-2", "1001", "NaN"} {
		_, err := parseFlags([]string{"--sim.scenario=minimal", "--sim.speed=" + v}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--sim.speed must be above 0 and at most 1000") {
			t.Errorf("--sim.speed=%s: %v; want a refusal naming the flag", v, err)
		}
	}
}
