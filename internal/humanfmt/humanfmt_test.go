package humanfmt

import (
	"math"
	"testing"
)

func TestFormats(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{Sig(12.345, 3), "12.3"}, {Sig(1234.6, 3), "1235"}, {Sig(0.000123, 3), "0.000123"}, {Sig(9.9996, 3), "10"},
		{Sig(-0.5, 3), "-0.5"}, {Sig(0, 3), "0"}, {Sig(math.NaN(), 3), "NaN"}, {Sig(math.Inf(1), 3), "+Inf"},
		{Fixed(700, 0), "700"}, {Fixed(2.50, 2), "2.5"}, {Fixed(2.999, 2), "3"}, {Fixed(0.1234, 3), "0.123"},
		{Seconds(300e-9), "300 ns"}, {Seconds(8.24e-6), "8.24 µs"}, {Seconds(0.123), "123 ms"}, {Seconds(2.5), "2.5 s"},
		{Seconds(0), "0 s"}, {Seconds(-0.002), "-2 ms"},
		{Percent(0.4251, 3), "42.5 %"}, {Percent(0.4251, 2), "43 %"}, {Percent(0.0012, 2), "0.12 %"}, {Percent(1, 2), "100 %"},
		{Percent(0.502, 2), "50 %"}, {Percent(0.048, 2), "4.8 %"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}
