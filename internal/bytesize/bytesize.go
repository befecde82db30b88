// Package bytesize is gpulens's one rule for sizes in bytes: the grammar
// every byte-size flag reads (Parse), the exact form a flag's value and
// default are written in (Format), and the rounded form people read in
// reports, logs and messages (Human).
//
// The grammar: a non-negative decimal number, an optional space and a
// unit, the unit in any case:
//
//   - binary units: KiB, MiB, GiB, TiB (1024, 1024², 1024³, 1024⁴ bytes);
//   - decimal units: KB, MB, GB, TB (1000, 1000², …), and B for bytes.
//
// "2GiB", "1.5 GiB", "512mib", "80GB" and "4096B" are sizes; "0" (no
// unit) is zero. A number without a unit ("2048": bytes? MiB, as
// nvidia-smi writes?) and a one-letter unit ("80G": GiB or GB?) are
// ambiguous and rejected, saying how to write them. A fraction of a byte
// is rounded down.
package bytesize

import (
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"github.com/gpulens/gpulens/internal/humanfmt"
)

// Binary units.
const (
	KiB uint64 = 1 << (10 * (iota + 1))
	MiB
	GiB
	TiB
)

// units are the units Parse reads, by lower-case name.
var units = map[string]uint64{
	"b":   1,
	"kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
	"kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12,
}

// ambiguous are the one-letter units people write, with the binary and
// decimal units they could mean.
var ambiguous = map[string][2]string{
	"k": {"KiB", "KB"}, "m": {"MiB", "MB"}, "g": {"GiB", "GB"}, "t": {"TiB", "TB"},
}

var sizeRE = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)$`)

// Examples is how an error message suggests a size should be written.
const Examples = "e.g. 512MiB, 2GiB or 80GB"

// Parse reads a size in the package's grammar.
func Parse(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	m := sizeRE.FindStringSubmatch(t)
	if m == nil {
		return 0, fmt.Errorf("%q is not a byte size (use %s)", s, Examples)
	}
	num, unit := m[1], m[2]
	var v big.Rat
	if _, ok := v.SetString(num); !ok {
		return 0, fmt.Errorf("%q is not a byte size (use %s)", s, Examples)
	}
	if unit == "" {
		if v.Sign() == 0 {
			return 0, nil
		}
		return 0, fmt.Errorf("%q has no unit: write %sB for bytes, or a unit such as %sMiB", s, num, num)
	}
	mult, ok := units[strings.ToLower(unit)]
	if !ok {
		if both, ok := ambiguous[strings.ToLower(unit)]; ok {
			return 0, fmt.Errorf("%q: the unit %q is ambiguous: write %s%s (binary) or %s%s (decimal)", s, unit, num, both[0], num, both[1])
		}
		return 0, fmt.Errorf("%q has an unknown unit %q (use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB)", s, unit)
	}
	v.Mul(&v, new(big.Rat).SetUint64(mult))
	n := new(big.Int).Quo(v.Num(), v.Denom()) // rounded down to a whole byte
	if !n.IsUint64() {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n.Uint64(), nil
}

// ladder is the binary units from the largest.
var ladder = []struct {
	name string
	size uint64
}{{"TiB", TiB}, {"GiB", GiB}, {"MiB", MiB}, {"KiB", KiB}}

// Format writes n exactly, in the largest binary unit it is a whole
// number of: "2GiB", "1168MiB", "1000B", "0B". Parse reads it back to n:
// it is the form of a flag's default and of a size the user should copy.
func Format(n uint64) string {
	for _, u := range ladder {
		if n >= u.size && n%u.size == 0 {
			return strconv.FormatUint(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatUint(n, 10) + "B"
}

// RoundUp is n rounded up to a whole number of unit bytes, the least
// size at least n that Format writes in that unit: RoundUp(n, MiB) is a
// budget to ask for.
func RoundUp(n, unit uint64) uint64 {
	if r := n % unit; r != 0 {
		return n + unit - r
	}
	return n
}

// Human writes b for people, in the largest binary unit it reaches, with
// three significant digits: "79.6 GiB", "140 GiB", "1.14 GiB", "512 MiB",
// "900 B". Negative sizes (differences) keep their sign.
func Human(b float64) string {
	if math.IsNaN(b) || math.IsInf(b, 0) {
		return strconv.FormatFloat(b, 'g', -1, 64) + " B"
	}
	a, name, size := math.Abs(b), "B", 1.0
	for _, u := range ladder {
		if a >= float64(u.size) {
			name, size = u.name, float64(u.size)
			break
		}
	}
	v := b / size
	if name == "B" {
		return humanfmt.Fixed(v, 0) + " B"
	}
	return humanfmt.Sig(v, 3) + " " + name
}
