// Package humanfmt is the one home of how gpulens writes a number for
// people: three significant digits without exponent or trailing zeros, in
// the unit that fits. The load generator's reports (loadgen/report, format.go),
// gpulens-verify's and the byte sizes of both (internal/bytesize) write
// numbers through it; machine formats (JSON, CSV, metrics) keep full
// precision and do not.
package humanfmt

import (
	"math"
	"strconv"
	"strings"
)

// Sig writes v with n significant digits (whole numbers from 10^n),
// without exponent or trailing zeros: Sig(12.345, 3) is "12.3",
// Sig(1234.6, 3) "1235", Sig(0.000123, 3) "0.000123".
func Sig(v float64, n int) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
	return Fixed(v, max(n-1-int(math.Floor(math.Log10(math.Abs(v)))), 0))
}

// Fixed writes v with at most decimals digits after the point, without
// trailing zeros: Fixed(700.0, 0) is "700", Fixed(2.50, 2) "2.5".
func Fixed(v float64, decimals int) string {
	s := strconv.FormatFloat(v, 'f', decimals, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Seconds writes a duration given in seconds in the unit that fits, with
// three significant digits: "300 ns", "45.6 µs", "123 ms", "2.5 s", "0 s".
func Seconds(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "0 s"
	case a < 1e-6:
		return Sig(v*1e9, 3) + " ns"
	case a < 1e-3:
		return Sig(v*1e6, 3) + " µs"
	case a < 1:
		return Sig(v*1e3, 3) + " ms"
	default:
		return Sig(v, 3) + " s"
	}
}

// Percent writes a ratio as a percentage with digits significant digits:
// Percent(0.4251, 3) is "42.5 %", Percent(0.4251, 2) "43 %",
// Percent(0.0012, 2) "0.12 %". Reports' tables give three; a sentence
// about a measured share whose runs differ by more than a tenth of a
// point (gpulens-verify's) gives two.
func Percent(ratio float64, digits int) string { return Sig(ratio*100, digits) + " %" }
