package verify

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

var pcieRE = regexp.MustCompile(`^gen\s*([1-6])(?:\s*x\s*(1|2|4|8|16|32))?$`)

// ParsePCIe parses "gen5x16", "Gen4 x8" or "gen5" (width not judged).
func ParsePCIe(s string) (gen, width int, err error) {
	m := pcieRE.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return 0, 0, fmt.Errorf("%q is not a PCIe link (use e.g. gen5x16, gen4x16 or gen5; generations 1–6, widths 1–32)", s)
	}
	gen, _ = strconv.Atoi(m[1])
	if m[2] != "" {
		width, _ = strconv.Atoi(m[2])
	}
	return gen, width, nil
}

// ParseShare parses a share as a percentage or a fraction: "5%", "2.5 %",
// "0.05". It must be between 0 and 1000 % (10).
func ParseShare(s string) (float64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	if rest, ok := strings.CutSuffix(t, "%"); ok {
		t, scale = strings.TrimSpace(rest), 0.01
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%q is not a share (use e.g. 5%% or 0.05)", s)
	}
	v *= scale
	if v < 0 || v > 10 {
		return 0, fmt.Errorf("%q must be between 0 and 1000%%", s)
	}
	return v, nil
}
