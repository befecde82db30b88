package rxstamp

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gpulens/gpulens/internal/testenv"
)

// The arrival of data that waited in the socket is when it arrived, not
// when it was read: the stamp comes before the read started. A stamp taken
// when the read returns could not pass this.
func TestArrivalIsBeforeALateRead(t *testing.T) {
	eachWrapper(t, func(t *testing.T, pair func(*testing.T) (*Conn, net.Conn)) {
		c, srv := pair(t)
		// The kernel turns receive timestamping on in the background (a
		// deferred static key) when the first socket asks for it: segments
		// received before that carry no stamp. Exchanges go on until one is
		// stamped, however long the kernel takes on a busy machine; the
		// deadline only stops a broken test from hanging.
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		exchanges := 0
		testenv.Eventually(ctx, t, time.Millisecond, "a kernel receive timestamp", func() (bool, string) {
			if _, err := srv.Write([]byte("warmup")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, len("warmup"))); err != nil {
				t.Fatal(err)
			}
			exchanges++
			return c.Kernel(), fmt.Sprintf("%d exchanges, none stamped", exchanges)
		})
		for i, msg := range []string{"first", "second"} {
			written := time.Now()
			if _, err := srv.Write([]byte(msg)); err != nil {
				t.Fatal(err)
			}
			// Wait until the kernel holds the bytes in the socket: they have
			// arrived, and been stamped, before the read starts.
			waitQueued(t, c, len(msg))
			// Not a wait for a condition: the bytes must sit queued for a
			// known time (sleeps only overrun).
			time.Sleep(10 * time.Millisecond)
			readStart := time.Now()
			buf := make([]byte, 64)
			n, err := c.Read(buf)
			if err != nil || string(buf[:n]) != msg {
				t.Fatalf("read %d: %q, %v", i, buf[:n], err)
			}
			if !c.Kernel() {
				t.Fatalf("read %d: no kernel timestamp", i)
			}
			at := c.LastArrival()
			if !at.After(written) || !at.Before(readStart) {
				t.Errorf("read %d: arrival %v is not between the write (%v) and the start of the read (%v)",
					i, at.Format(time.StampNano), written.Format(time.StampNano), readStart.Format(time.StampNano))
			}
			if readStart.Sub(at) < 10*time.Millisecond {
				// The bytes were queued, then waited at least 10 ms.
				t.Errorf("read %d: arrival %v before the read, want ≥ 10 ms", i, readStart.Sub(at))
			}
		}
	})
}

// waitQueued polls until the connection's receive queue holds n bytes.
func waitQueued(t *testing.T, c *Conn, n int) {
	t.Helper()
	rc, err := c.Conn.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	testenv.Eventually(ctx, t, time.Millisecond, fmt.Sprintf("%d bytes in the receive queue", n), func() (bool, string) {
		var queued int32
		rc.Control(func(fd uintptr) {
			syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TIOCINQ, uintptr(unsafe.Pointer(&queued)))
		})
		return int(queued) >= n, fmt.Sprintf("%d bytes queued", queued)
	})
}
