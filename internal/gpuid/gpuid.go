// Package gpuid is the identity of a GPU across the two views gpulens has of
// it: NVML's (the exporter's and verify's host side) and CUDA's (the probe's).
// It owns the PCI bus id, parsed from every form the two write, and the rule
// that matches a CUDA device to an NVML GPU.
package gpuid

import (
	"fmt"
	"strconv"
	"strings"
)

// BusID is a PCI address. Two bus ids of the same device compare equal
// whatever form they were read from (== on the struct).
type BusID struct {
	Domain   uint32
	Bus      uint8
	Device   uint8 // 5 bits
	Function uint8 // 3 bits
}

// ParseBusID reads "DOMAIN:BUS:DEVICE.FUNCTION" in hex: NVML's form, with an
// 8-digit domain ("00000000:18:00.0"), CUDA's and the kernel's 4-digit one
// ("0000:18:00.0"), upper or lower case, surrounding space ignored. Every
// field is required, the function too.
func ParseBusID(s string) (BusID, error) {
	bad := func(why string) (BusID, error) {
		return BusID{}, fmt.Errorf("PCI bus id %q: %s (want DOMAIN:BUS:DEVICE.FUNCTION in hex, e.g. 00000000:18:00.0)", s, why)
	}
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) != 3 {
		return bad("not three colon-separated fields")
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return bad("no .FUNCTION")
	}
	var v [4]uint64
	for i, f := range []struct {
		text string
		bits int
	}{{parts[0], 32}, {parts[1], 8}, {devFn[0], 5}, {devFn[1], 3}} {
		if f.text == "" {
			return bad("empty field")
		}
		n, err := strconv.ParseUint(f.text, 16, f.bits)
		if err != nil {
			return bad(fmt.Sprintf("field %q is not a %d-bit hex number", f.text, f.bits))
		}
		v[i] = n
	}
	return BusID{Domain: uint32(v[0]), Bus: uint8(v[1]), Device: uint8(v[2]), Function: uint8(v[3])}, nil
}

// String formats b as NVML's nvmlPciInfo_t.busId does: "00000000:18:00.0".
func (b BusID) String() string {
	return fmt.Sprintf("%08X:%02X:%02X.%X", b.Domain, b.Bus, b.Device, b.Function)
}

// SameBusID reports whether a and b are bus ids of one device. An empty or
// malformed id matches nothing.
func SameBusID(a, b string) bool {
	x, err := ParseBusID(a)
	if err != nil {
		return false
	}
	y, err := ParseBusID(b)
	return err == nil && x == y
}
