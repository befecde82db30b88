package report

import (
	"math"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		name, got, want string
	}{
		{"Sig", Sig(12.345, 3), "12.3"}, {"Sig", Sig(1234.6, 3), "1235"}, {"Sig", Sig(0.000123456, 3), "0.000123"},
		{"Sig", Sig(-2.50, 3), "-2.5"}, {"Sig", Sig(0, 3), "0"}, {"Sig", Sig(math.NaN(), 3), "NaN"}, {"Sig", Sig(math.Inf(1), 3), "+Inf"},
		{"Num", Num(3.14159), "3.14"},
		{"Seconds", Seconds(0.1234), "123 ms"}, {"Seconds", Seconds(0.0000456), "45.6 µs"}, {"Seconds", Seconds(2.5), "2.5 s"},
		{"Seconds", Seconds(0), "0 s"}, {"Seconds", Seconds(-0.05), "-50 ms"},
		{"SecondsTick", SecondsTick(0), "0"}, {"SecondsTick", SecondsTick(0.0123), "12.3 ms"},
		{"Bytes", Bytes(1.5 * (1 << 30)), "1.5 GiB"}, {"Bytes", Bytes(40 * (1 << 30)), "40 GiB"}, {"Bytes", Bytes(512 << 20), "512 MiB"},
		{"Percent", Percent(0.4251), "42.5 %"},
		{"USD3", USD(0.0123, 3), "$0.0123"}, {"USD3", USD(12.345, 3), "$12.35"}, {"USD3", USD(0.8, 3), "$0.80"},
		{"USD3", USD(0.04, 3), "$0.04"}, {"USD3", USD(0, 3), "$0.00"}, {"USD3", USD(-0.5, 3), "$-0.50"},
		{"USD4", USD(0.12345, 4), "$0.1235"}, {"USD4", USD(0.0003, 4), "$0.0003"}, {"USD4", USD(1234.567, 4), "$1234.57"},
		{"USD4", USD(0.99999, 4), "$1.00"},
		{"USDTick", USDTick(0), "$0"}, {"USDTick", USDTick(3.6), "$3.60"}, {"USDTick", USDTick(0.000123456), "$0.000123"}, {"USDTick", USDTick(0.5), "$0.5"},
		{"Level", Level(true, 8), "8/s"}, {"Level", Level(false, 8), "c=8"}, {"Level", Level(true, 2.5), "2.5/s"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.name, tc.got, tc.want)
		}
	}
}
