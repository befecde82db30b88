package verify

import (
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

var byteUnits = map[string]float64{
	"b":  1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40, // binary, as nvidia-smi's MiB
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]+)$`)

// ParseBytes parses a size with a unit: "80GiB", "80GB" (decimal), "512MiB",
// "1.5 GiB". A unit is required; the size must be positive.
func ParseBytes(s string) (uint64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size (use e.g. 80GiB, 80GB or 512MiB)", s)
	}
	unit, ok := byteUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("%q has an unknown unit %q (use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB)", s, m[2])
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a size: %v", s, err)
	}
	b := v * unit
	if b < 1 {
		return 0, fmt.Errorf("%q must be positive", s)
	}
	if b >= math.MaxUint64 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return uint64(b), nil
}

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
