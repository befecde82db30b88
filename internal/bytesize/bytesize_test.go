package bytesize

import (
	"math"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]uint64{
		// Every size the docs, scripts and tests write today.
		"2GiB": 2 << 30, "1280MiB": 1280 << 20, "80GiB": 80 << 30, "80GB": 80e9, "40GiB": 40 << 30,
		"1GiB": 1 << 30, "512MiB": 512 << 20, "256MiB": 256 << 20, "16MiB": 16 << 20, "1KiB": 1 << 10,
		"0": 0,
		// The grammar: fractions, a space, any case, every unit.
		"1.5GiB": 3 << 29, " 16 MiB ": 16 << 20, "80 gib": 80 << 30, "2gib": 2 << 30, "1TB": 1e12,
		"500MB": 500e6, "64KiB": 64 << 10, "3kb": 3000, "4096B": 4096, "1TiB": 1 << 40, "0GiB": 0,
		"0.5B": 0, "1.1GB": 1_100_000_000, "0.1KiB": 102,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"":            "is not a byte size",
		"lots":        `"lots" is not a byte size (use e.g. 512MiB, 2GiB or 80GB)`,
		"GiB":         "is not a byte size",
		"-1GiB":       "is not a byte size",
		"1e9":         "is not a byte size",
		"2048":        `"2048" has no unit: write 2048B for bytes, or a unit such as 2048MiB`,
		"80G":         `the unit "G" is ambiguous: write 80GiB (binary) or 80GB (decimal)`,
		"24g":         `write 24GiB (binary) or 24GB (decimal)`,
		"1k":          `write 1KiB (binary) or 1KB (decimal)`,
		"80 pcs":      `unknown unit "pcs"`,
		"1ZiB":        `unknown unit "ZiB"`,
		"20EB":        `unknown unit`,
		"1e30":        "is not a byte size",
		"99999999TiB": "is too large",
	} {
		if got, err := Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %d, %v; want an error containing %q", in, got, err, want)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0B", 1000: "1000B", 3 << 10: "3KiB", 256 << 20: "256MiB", 1168 << 20: "1168MiB", 1 << 30: "1GiB",
		2 << 30: "2GiB", 3 << 29: "1536MiB", 80e9: "78125000KiB", 1 << 40: "1TiB", 1<<30 + 1: "1073741825B",
	} {
		got := Format(n)
		if got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
		if back, err := Parse(got); err != nil || back != n {
			t.Errorf("Parse(Format(%d)) = %d, %v", n, back, err)
		}
	}
	if got := RoundUp(1168<<20+1, MiB); got != 1169<<20 {
		t.Errorf("RoundUp = %d, want %d", got, 1169<<20)
	}
	if got := RoundUp(2<<30, MiB); got != 2<<30 {
		t.Errorf("RoundUp of a whole size = %d", got)
	}
}

func TestHuman(t *testing.T) {
	const gib = 1 << 30
	for _, tc := range []struct {
		b    float64
		want string
	}{
		{79.6 * gib, "79.6 GiB"}, {20 * gib, "20 GiB"}, {140.4 * gib, "140 GiB"}, {2 * gib, "2 GiB"},
		{1168 << 20, "1.14 GiB"}, {1936 << 20, "1.89 GiB"}, {768 << 20, "768 MiB"}, {126 << 20, "126 MiB"},
		{1.5 * gib, "1.5 GiB"}, {9.999 * gib, "10 GiB"}, {99.97 * gib, "100 GiB"}, {512 << 10, "512 KiB"},
		{900, "900 B"}, {0, "0 B"}, {-3 * gib, "-3 GiB"}, {1 << 40, "1 TiB"}, {math.NaN(), "NaN B"},
	} {
		if got := Human(tc.b); got != tc.want {
			t.Errorf("Human(%v) = %q, want %q", tc.b, got, tc.want)
		}
	}
}
