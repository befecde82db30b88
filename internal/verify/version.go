package verify

import (
	"fmt"
	"strconv"
	"strings"
)

// parseVersion splits a dotted version into numbers.
func parseVersion(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("empty version")
	}
	var out []int
	for _, p := range strings.Split(s, ".") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a dotted version (use e.g. 550.54.15 or 550)", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// CompareVersions compares dotted versions numerically: -1, 0 or 1. A
// shorter version compares as if padded with zeros ("550" = "550.0.0").
func CompareVersions(a, b string) (int, error) {
	va, err := parseVersion(a)
	if err != nil {
		return 0, err
	}
	vb, err := parseVersion(b)
	if err != nil {
		return 0, err
	}
	for i := 0; i < max(len(va), len(vb)); i++ {
		x, y := 0, 0
		if i < len(va) {
			x = va[i]
		}
		if i < len(vb) {
			y = vb[i]
		}
		if x != y {
			if x < y {
				return -1, nil
			}
			return 1, nil
		}
	}
	return 0, nil
}
