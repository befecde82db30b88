package verify

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/gpulens/gpulens/internal/bytesize"
)

// trim formats v with up to digits decimals, without trailing zeros.
func trim(v float64, digits int) string {
	s := strconv.FormatFloat(v, 'f', digits, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// fmtGiB writes bytes for people, as every gpulens program does
// (bytesize.Human): "79.6 GiB", "20 GiB", "512 MiB" below 1 GiB.
func fmtGiB(b float64) string { return bytesize.Human(b) }

// fmtRate formats bytes/s in decimal units: "52.1 GB/s", "2.95 TB/s".
func fmtRate(bps float64) string {
	switch {
	case bps >= 1e12:
		return trim(bps/1e12, 2) + " TB/s"
	case bps >= 1e9:
		return trim(bps/1e9, 1) + " GB/s"
	default:
		return trim(bps/1e6, 1) + " MB/s"
	}
}

// fmtFLOPS formats FLOP/s: "543 TFLOP/s", "53.6 TFLOP/s", "2.1 PFLOP/s".
func fmtFLOPS(f float64) string {
	t := f / 1e12
	switch {
	case t >= 1000:
		return trim(t/1000, 2) + " PFLOP/s"
	case t >= 100:
		return trim(t, 0) + " TFLOP/s"
	default:
		return trim(t, 1) + " TFLOP/s"
	}
}

// fmtSeconds formats a duration given in seconds: "8.2 µs", "2.1 ms".
func fmtSeconds(s float64) string {
	return fmtDuration(time.Duration(s * float64(time.Second)))
}

func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return trim(d.Seconds(), 2) + " s"
	case d >= time.Millisecond:
		return trim(float64(d)/float64(time.Millisecond), 1) + " ms"
	case d >= time.Microsecond:
		return trim(float64(d)/float64(time.Microsecond), 1) + " µs"
	default:
		return fmt.Sprintf("%d ns", d.Nanoseconds())
	}
}

// fmtPct formats a ratio as a percentage: 0.4812 → "48 %", 0.0012 → "0.1 %".
func fmtPct(r float64) string {
	p := r * 100
	if math.Abs(p) < 10 {
		return trim(p, 1) + " %"
	}
	return trim(p, 0) + " %"
}
