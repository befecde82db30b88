package verify

import (
	"time"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/humanfmt"
)

// trim formats v with up to digits decimals, without trailing zeros
// (humanfmt.Fixed).
func trim(v float64, digits int) string { return humanfmt.Fixed(v, digits) }

// fmtGiB writes bytes for people, as every gpulens program does
// (bytesize.Human): "79.6 GiB", "20 GiB", "512 MiB" below 1 GiB.
func fmtGiB(b float64) string { return bytesize.Human(b) }

// fmtRate formats bytes/s in decimal units, three significant digits
// (humanfmt.Sig): "52.1 GB/s", "2.95 TB/s", "725 GB/s".
func fmtRate(bps float64) string {
	switch {
	case bps >= 1e12:
		return humanfmt.Sig(bps/1e12, 3) + " TB/s"
	case bps >= 1e9:
		return humanfmt.Sig(bps/1e9, 3) + " GB/s"
	default:
		return humanfmt.Sig(bps/1e6, 3) + " MB/s"
	}
}

// fmtFLOPS formats FLOP/s, three significant digits: "544 TFLOP/s",
// "53.6 TFLOP/s", "2.25 PFLOP/s".
func fmtFLOPS(f float64) string {
	if t := f / 1e12; t < 1000 {
		return humanfmt.Sig(t, 3) + " TFLOP/s"
	}
	return humanfmt.Sig(f/1e15, 3) + " PFLOP/s"
}

// fmtSeconds formats a duration given in seconds (humanfmt.Seconds):
// "8.24 µs", "2.1 ms".
func fmtSeconds(s float64) string { return humanfmt.Seconds(s) }

func fmtDuration(d time.Duration) string { return humanfmt.Seconds(d.Seconds()) }

// fmtPct formats a measured share as a percentage, two significant digits
// (humanfmt.Percent): 0.4812 → "48 %", 0.0012 → "0.12 %".
func fmtPct(r float64) string { return humanfmt.Percent(r, 2) }
