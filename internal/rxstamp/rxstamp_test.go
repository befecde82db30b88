package rxstamp

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"
)

// pair returns a wrapped client connection and the server's end of a
// loopback TCP connection.
func pair(t *testing.T) (*Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	nc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	srv, ok := <-accepted
	if !ok {
		t.Fatal("accept failed")
	}
	c := Wrap(nc)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, srv
}

// The arrival of data that waited in the socket is when it arrived, not
// when it was read: the stamp comes before the read started. A stamp taken
// when the read returns could not pass this.
func TestArrivalIsBeforeALateRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("kernel receive timestamps are implemented on Linux only")
	}
	c, srv := pair(t)
	// The kernel turns receive timestamping on in the background (a
	// deferred static key) when the first socket asks for it: segments
	// received before that carry no stamp. Exchanges go on until one is
	// stamped, however long the kernel takes on a busy machine; the
	// deadline only stops a broken test from hanging.
	for deadline := time.Now().Add(time.Minute); ; {
		if _, err := srv.Write([]byte("warmup")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, make([]byte, len("warmup"))); err != nil {
			t.Fatal(err)
		}
		if c.Kernel() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no kernel timestamp within a minute")
		}
		time.Sleep(time.Millisecond)
	}
	for i, msg := range []string{"first", "second"} {
		written := time.Now()
		if _, err := srv.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond) // the data waits in the socket (at least this long: sleeps only overrun)
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
		if at.Sub(written) < 0 || readStart.Sub(at) < 10*time.Millisecond {
			// The data sat in the socket for about 30 ms.
			t.Errorf("read %d: arrival %v after the write, %v before the read", i, at.Sub(written), readStart.Sub(at))
		}
	}
}

func TestReadErrorsKeepNetConnSemantics(t *testing.T) {
	c, srv := pair(t)

	// A deadline is a net.Error timeout.
	if err := c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	_, err := c.Read(make([]byte, 8))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v, want a timeout", err)
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}

	// Data, then a clean close: the data and then io.EOF.
	if _, err := srv.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	b, err := io.ReadAll(c)
	if err != nil || string(b) != "bye" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	if n, err := c.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Fatalf("read after EOF = %d, %v", n, err)
	}
}

func TestResetIsAnOpErrorWithErrno(t *testing.T) {
	c, srv := pair(t)
	// SO_LINGER 0: close sends a reset.
	if err := srv.(*net.TCPConn).SetLinger(0); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	var err error
	for err == nil {
		_, err = c.Read(make([]byte, 8))
	}
	var op *net.OpError
	if !errors.As(err, &op) || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read after a reset: %v (%T), want *net.OpError wrapping ECONNRESET", err, err)
	}
}

// Connections that are not TCP (here a pipe) fall back to the time the
// read returned.
func TestFallbackStampsWhenReadReturns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := Wrap(a)
	if !c.LastArrival().IsZero() {
		t.Fatal("arrival before any read")
	}
	go b.Write([]byte("x"))
	buf := make([]byte, 4)
	n, err := c.Read(buf)
	after := time.Now()
	if n != 1 || err != nil {
		t.Fatalf("read = %d, %v", n, err)
	}
	if c.Kernel() {
		t.Error("a pipe read reported a kernel timestamp")
	}
	if at := c.LastArrival(); at.IsZero() || at.After(after) {
		t.Errorf("arrival %v, read returned before %v", at, after)
	}
}

func TestListenerWrapsAcceptedConnections(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := Listener{ln}
	defer l.Close()
	go func() {
		nc, err := net.Dial("tcp", ln.Addr().String())
		if err == nil {
			nc.Write([]byte("hello"))
			nc.Close()
		}
	}()
	nc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	c, ok := nc.(*Conn)
	if !ok {
		t.Fatalf("Accept returned %T", nc)
	}
	if b, err := io.ReadAll(c); err != nil || string(b) != "hello" {
		t.Fatalf("ReadAll = %q, %v", b, err)
	}
	if c.LastArrival().IsZero() {
		t.Error("no arrival recorded")
	}
}

// What a writer did before writing happened before the read that returns
// its bytes, as with net.Conn: under -race this test fails unless the
// reads tell the race detector so.
func TestReadOrdersAfterTheWrite(t *testing.T) {
	c, srv := pair(t)
	var shared int
	go func() {
		shared = 42
		srv.Write([]byte("x"))
	}()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	if shared != 42 {
		t.Fatalf("shared = %d", shared)
	}
}
