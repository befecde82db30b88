package gpuid

import (
	"strings"
	"testing"
)

func TestParseBusID(t *testing.T) {
	tests := []struct {
		in      string
		want    BusID
		errPart string // "" if valid
	}{
		{"00000000:18:00.0", BusID{Bus: 0x18}, ""}, // NVML: 8-digit domain, upper case
		{"0000:3b:00.0", BusID{Bus: 0x3b}, ""},     // CUDA/kernel: 4-digit domain, lower case
		{"0000:3B:00.0", BusID{Bus: 0x3b}, ""},     // 4-digit, upper case
		{"00000002:C1:1F.7", BusID{Domain: 2, Bus: 0xc1, Device: 0x1f, Function: 7}, ""},
		{"0001:c1:1f.7", BusID{Domain: 1, Bus: 0xc1, Device: 0x1f, Function: 7}, ""},
		{"0000FFFF:FF:1F.0", BusID{Domain: 0xffff, Bus: 0xff, Device: 0x1f}, ""},
		{" 00000000:18:00.0\n", BusID{Bus: 0x18}, ""}, // surrounding space
		{"", BusID{}, "not three colon-separated fields"},
		{"18:00.0", BusID{}, "not three colon-separated fields"},          // missing domain
		{"00000000:18:00", BusID{}, "no .FUNCTION"},                       // missing function
		{"0000:18:00", BusID{}, "no .FUNCTION"},                           // missing function, 4-digit domain
		{"00000000:18.00.0", BusID{}, "not three colon-separated fields"}, // dot for colon
		{"00000000:1G:00.0", BusID{}, `field "1G" is not a 8-bit hex number`},
		{"0000:zz:00.0", BusID{}, `field "zz" is not a 8-bit hex number`},
		{"00000000:100:00.0", BusID{}, `field "100" is not a 8-bit hex number`},
		{"00000000:18:20.0", BusID{}, `field "20" is not a 5-bit hex number`},
		{"00000000:18:00.8", BusID{}, `field "8" is not a 3-bit hex number`},
		{"100000000:18:00.0", BusID{}, `field "100000000" is not a 32-bit hex number`},
		{"00000000::00.0", BusID{}, "empty field"},
		{"00000000:18:00.", BusID{}, "empty field"},
	}
	for _, tc := range tests {
		got, err := ParseBusID(tc.in)
		if tc.errPart != "" {
			if err == nil || !strings.Contains(err.Error(), tc.errPart) || !strings.Contains(err.Error(), "PCI bus id") {
				t.Errorf("ParseBusID(%q) = %v, %v; want an error containing %q", tc.in, got, err, tc.errPart)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseBusID(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestBusIDString(t *testing.T) {
	tests := []struct {
		b    BusID
		want string
	}{
		{BusID{Bus: 0x18}, "00000000:18:00.0"},
		{BusID{Bus: 0xb3}, "00000000:B3:00.0"},
		{BusID{Domain: 1, Bus: 0x04, Device: 0x1f}, "00000001:04:1F.0"},
		{BusID{Domain: 0xffff, Bus: 0xff, Device: 0x1f, Function: 7}, "0000FFFF:FF:1F.7"},
	}
	for _, tc := range tests {
		got := tc.b.String()
		if got != tc.want {
			t.Errorf("%+v.String() = %s, want %s", tc.b, got, tc.want)
		}
		if back, err := ParseBusID(got); err != nil || back != tc.b {
			t.Errorf("ParseBusID(%s) = %+v, %v; want %+v", got, back, err, tc.b)
		}
	}
}

func TestSameBusID(t *testing.T) {
	tests := []struct {
		a, b string
		want bool
	}{
		{"00000000:18:00.0", "0000:18:00.0", true},     // NVML vs CUDA
		{"00000001:2A:00.0", "0001:2a:00.0", true},     // case
		{"00000000:18:00.0", "00000000:18:00.0", true}, // identical
		{"00000000:18:00.0", "0000:18:00.1", false},    // function differs
		{"00000000:18:00.0", "0001:18:00.0", false},    // domain differs
		{"00000000:18:00.0", "0000:19:00.0", false},    // bus differs
		{"", "", false},                     // empty ids match nothing
		{"garbage", "garbage", false},       // nor malformed ones
		{"0000:18:00", "0000:18:00", false}, // missing function
	}
	for _, tc := range tests {
		if got := SameBusID(tc.a, tc.b); got != tc.want {
			t.Errorf("SameBusID(%q, %q) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestMatchCUDA(t *testing.T) {
	gpus := []GPU{
		{UUID: "GPU-aaaaaaaa-0000-0000-0000-000000000000", BusID: "00000000:18:00.0"},
		{UUID: "GPU-bbbbbbbb-0000-0000-0000-000000000000", BusID: "00000000:2A:00.0",
			MIGUUIDs: []string{"MIG-11111111-0000-0000-0000-000000000000", "MIG-22222222-0000-0000-0000-000000000000"}},
		{UUID: "GPU-cccccccc-0000-0000-0000-000000000000"}, // bus id not read
	}
	tests := []struct {
		name        string
		uuid, busID string
		gpus        []GPU
		want        Match
		ok          bool
	}{
		{"by UUID", gpus[1].UUID, "00000000:18:00.0", gpus, Match{GPU: 1, MIG: -1, By: ByUUID}, true},
		{"UUID wins over bus id", gpus[0].UUID, "0000:2a:00.0", gpus, Match{GPU: 0, MIG: -1, By: ByUUID}, true},
		{"UUID case differs", strings.ToUpper(gpus[2].UUID), "", gpus, Match{GPU: 2, MIG: -1, By: ByUUID}, true},
		{"by MIG UUID", "MIG-22222222-0000-0000-0000-000000000000", "", gpus, Match{GPU: 1, MIG: 1, By: ByMIGUUID}, true},
		{"by bus id, CUDA form", "GPU-99999999-9999-9999-9999-999999999999", "0000:2a:00.0", gpus, Match{GPU: 1, MIG: -1, By: ByBusID}, true},
		{"by bus id, NVML form", "", "00000000:18:00.0", gpus, Match{GPU: 0, MIG: -1, By: ByBusID}, true},
		{"MIG UUID not listed, bus id", "MIG-abc", "0000:18:00.0", gpus, Match{GPU: 0, MIG: -1, By: ByBusID}, true},
		{"unknown device", "GPU-unknown", "0000:99:00.0", gpus, Match{GPU: -1, MIG: -1}, false},
		{"malformed bus id", "GPU-unknown", "18:00.0", gpus, Match{GPU: -1, MIG: -1}, false},
		{"no UUID, no bus id", "", "", gpus, Match{GPU: -1, MIG: -1}, false},
		{"no GPUs", gpus[0].UUID, "0000:18:00.0", nil, Match{GPU: -1, MIG: -1}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := MatchCUDA(tc.uuid, tc.busID, tc.gpus)
			if got != tc.want || ok != tc.ok {
				t.Errorf("MatchCUDA(%q, %q) = %+v, %v; want %+v, %v", tc.uuid, tc.busID, got, ok, tc.want, tc.ok)
			}
		})
	}
}
