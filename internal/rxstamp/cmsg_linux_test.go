package rxstamp

import (
	"encoding/binary"
	"syscall"
	"testing"
)

// cmsg builds one control message as the kernel lays it out on amd64 and
// arm64 (64-bit length, 32-bit level and type, data aligned to 8 bytes).
func cmsg(level, typ int32, data []byte) []byte {
	b := make([]byte, syscall.CmsgSpace(len(data)))
	binary.NativeEndian.PutUint64(b[0:], uint64(syscall.CmsgLen(len(data))))
	binary.NativeEndian.PutUint32(b[8:], uint32(level))
	binary.NativeEndian.PutUint32(b[12:], uint32(typ))
	copy(b[syscall.CmsgLen(0):], data)
	return b
}

func timespec(sec, nsec int64) []byte {
	b := make([]byte, 16)
	binary.NativeEndian.PutUint64(b[0:], uint64(sec))
	binary.NativeEndian.PutUint64(b[8:], uint64(nsec))
	return b
}

func TestTimestampNS(t *testing.T) {
	ts := cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, timespec(1_700_000_000, 123_456_789))
	other := cmsg(syscall.SOL_SOCKET, syscall.SCM_RIGHTS, []byte{1, 2, 3, 4})
	for _, tc := range []struct {
		name string
		oob  []byte
		want int64
	}{
		{"none", nil, -1},
		{"timestamp", ts, 1_700_000_000_123_456_789},
		{"after another message", append(append([]byte{}, other...), ts...), 1_700_000_000_123_456_789},
		{"only another message", other, -1},
		{"truncated data", ts[:20], -1},
		{"truncated header", ts[:8], -1},
		{"length below the header", cmsg(syscall.SOL_SOCKET, syscall.SCM_TIMESTAMPNS, nil)[:16], -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := timestampNS(tc.oob); got != tc.want {
				t.Errorf("timestampNS = %d, want %d", got, tc.want)
			}
		})
	}
}
