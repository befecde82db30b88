// Package format writes the load generator's figures for people: money,
// durations, sizes, plain numbers and run levels, in the one way every
// report (the console, compare's text, the HTML, the cost bill) shows
// them. Machine formats (JSON, CSV) keep full precision and do not use it.

package report

import (
	"math"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/humanfmt"
)

// Sig formats v with n significant digits (humanfmt.Sig, the rule every
// gpulens program writes numbers by): Sig(12.345, 3) is "12.3",
// Sig(1234.6, 3) "1235".
func Sig(v float64, n int) string { return humanfmt.Sig(v, n) }

// Num is a plain number with three significant digits: "12.3", "1235".
func Num(v float64) string { return humanfmt.Sig(v, 3) }

// Seconds is a duration given in seconds, in the unit that fits, three
// significant digits (humanfmt.Seconds): "45.6 µs", "123 ms", "2.5 s",
// "0 s".
func Seconds(v float64) string { return humanfmt.Seconds(v) }

// SecondsTick is Seconds for a chart's axis and tips, where zero is a
// bare "0".
func SecondsTick(v float64) string {
	if v == 0 {
		return "0"
	}
	return Seconds(v)
}

// Bytes is a number of bytes as every gpulens program writes it for
// people (bytesize.Human): three significant digits in the largest
// binary unit it reaches, "1.5 GiB", "40 GiB", "512 MiB".
func Bytes(bytes float64) string { return bytesize.Human(bytes) }

// Percent is a ratio as a percentage, three significant digits
// (humanfmt.Percent): "42.5 %".
func Percent(ratio float64) string { return humanfmt.Percent(ratio, 3) }

// USD is an amount of dollars: cents from $1 ("$12.35"), n significant
// digits below with at least two decimals ("$0.80", "$0.0123" for n = 3,
// "$0.1235" for n = 4: a cost per sample is often a fraction of a cent),
// "$0.00" for zero.
func USD(v float64, n int) string {
	if math.Abs(v) >= 1 {
		return "$" + strconv.FormatFloat(v, 'f', 2, 64)
	}
	s := Sig(v, n)
	if i := strings.IndexByte(s, '.'); i < 0 {
		s += ".00"
	} else if d := len(s) - i - 1; d < 2 {
		s += strings.Repeat("0", 2-d)
	}
	return "$" + s
}

// USDTick is an amount of dollars for a chart's axis and tips: cents from
// $1, otherwise three significant digits without padding ("$0.5",
// "$0.000123"), and a bare "$0" for zero.
func USDTick(v float64) string {
	switch a := math.Abs(v); {
	case a == 0:
		return "$0"
	case a >= 1:
		return "$" + strconv.FormatFloat(v, 'f', 2, 64)
	default:
		return "$" + Sig(v, 3)
	}
}

// Level is a run's level as the reports write it: "8/s" for an open loop
// (a rate of arrivals), "c=8" for a closed loop (a number of users).
func Level(open bool, level float64) string {
	l := strconv.FormatFloat(level, 'g', -1, 64)
	if open {
		return l + "/s"
	}
	return "c=" + l
}
