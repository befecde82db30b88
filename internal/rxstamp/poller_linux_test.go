package rxstamp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
)

// awaitState waits until the Poller's view of c is want (stReady: it saw
// the socket become readable; stWaiting: the reader waits for it).
func awaitState(t *testing.T, c *Conn, want int32) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	testenv.Eventually(ctx, t, time.Millisecond, fmt.Sprintf("poll state %d", want), func() (bool, string) {
		got := c.pc.st.state.Load()
		return got == want, fmt.Sprintf("state %d", got)
	})
}

func readString(t *testing.T, c *Conn, size int) string {
	t.Helper()
	buf := make([]byte, size)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf[:n])
}

// A reader on a Poller never makes the recvmsg that finds the socket
// empty: after a read that emptied it (TCP_INQ 0) it waits for the
// Poller, and after one that left data it reads again at once. Go's
// poller makes that empty call before every wait.
func TestPollerReadsNeverFindTheSocketEmpty(t *testing.T) {
	c, srv := pairWith(t, NewPoller().Wrap)
	if c.pc == nil {
		t.Fatal("not read through the Poller")
	}
	write := func(s string) {
		t.Helper()
		if _, err := srv.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// Data queued before the first read, then data the Poller saw arrive.
	write("a")
	waitQueued(t, c, 1)
	if got := readString(t, c, 8); got != "a" {
		t.Fatalf("read %q", got)
	}
	write("b")
	waitQueued(t, c, 1)
	awaitState(t, c, stReady)
	if got := readString(t, c, 8); got != "b" {
		t.Fatalf("read %q", got)
	}
	// A read that waits, woken by the data.
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 8)
		n, _ := c.Read(buf)
		got <- string(buf[:n])
	}()
	awaitState(t, c, stWaiting)
	write("c")
	if s := <-got; s != "c" {
		t.Fatalf("read %q", s)
	}
	// A read that leaves data: the next one reads without waiting.
	write("de")
	waitQueued(t, c, 2)
	if a, b := readString(t, c, 1), readString(t, c, 1); a+b != "de" {
		t.Fatalf("read %q, %q", a, b)
	}
	if c.pc.calls != 5 || c.pc.empty != 0 {
		t.Fatalf("5 reads made %d recvmsg calls, %d of them on an empty socket; want 5 and 0", c.pc.calls, c.pc.empty)
	}
}

// The peer's end (a close or a reset) that arrived with the last data is
// seen by the read after that data, although no event follows it: the
// Poller remembers that the socket reported an end.
func TestPollerSeesTheEndThatCameWithTheLastData(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			c, srv := pairWith(t, NewPoller().Wrap)
			if reset {
				// SO_LINGER 0: close sends a reset.
				if err := srv.(*net.TCPConn).SetLinger(0); err != nil {
					t.Fatal(err)
				}
			}
			// A first exchange: the reader then knows the socket empty.
			if _, err := srv.Write([]byte("first")); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, c, 8); got != "first" {
				t.Fatalf("read %q", got)
			}
			if _, err := srv.Write([]byte("last")); err != nil {
				t.Fatal(err)
			}
			waitQueued(t, c, 4)
			srv.Close()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			testenv.Eventually(ctx, t, time.Millisecond, "the Poller saw the end", func() (bool, string) {
				return c.pc.st.hup.Load(), "no end reported"
			})
			// A broken reader would wait for an event that never comes:
			// the deadline only keeps the test from hanging.
			if err := c.SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
				t.Fatal(err)
			}
			if got := readString(t, c, 8); got != "last" {
				t.Fatalf("read %q", got)
			}
			_, err := c.Read(make([]byte, 8))
			want := io.EOF
			if reset {
				want = syscall.ECONNRESET
			}
			if !errors.Is(err, want) {
				t.Fatalf("read after the end: %v, want %v", err, want)
			}
		})
	}
}

// A read waiting on the Poller returns when its deadline passes and when
// the connection is closed, as a read in Go's poller does.
func TestPollerDeadlineAndCloseEndAWaitingRead(t *testing.T) {
	c, srv := pairWith(t, NewPoller().Wrap)
	errs := make(chan error, 1)
	read := func() {
		_, err := c.Read(make([]byte, 8))
		errs <- err
	}
	go read()
	awaitState(t, c, stWaiting)
	if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	err := <-errs
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	// Cleared, the connection reads again.
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, c, 8); got != "x" {
		t.Fatalf("read %q", got)
	}
	go read()
	awaitState(t, c, stWaiting)
	c.Close()
	if err := <-errs; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
	}
}

// A Poller holds an epoll instance and a goroutine only while it has
// connections, and starts again with the next one.
func TestPollerStopsWithItsLastConnection(t *testing.T) {
	p := NewPoller()
	running := func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.file != nil
	}
	a, _ := pairWith(t, p.Wrap)
	b, _ := pairWith(t, p.Wrap)
	if !running() {
		t.Fatal("no epoll instance with two connections")
	}
	a.Close()
	if !running() {
		t.Fatal("stopped with a connection left")
	}
	b.Close()
	if running() {
		t.Fatal("still running without connections")
	}
	c, srv := pairWith(t, p.Wrap)
	if _, err := srv.Write([]byte("again")); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, c, 8); got != "again" {
		t.Fatalf("read %q", got)
	}
}
