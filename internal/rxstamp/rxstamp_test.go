package rxstamp

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// wrappers are the two ways a connection is wrapped: each read a wait of
// its own in Go's poller (Wrap), and reads through one held wait
// (WrapStream, the load generator's).
var wrappers = []struct {
	name string
	wrap func(net.Conn) *Conn
}{
	{"Wrap", Wrap},
	{"WrapStream", WrapStream},
}

// eachWrapper runs f once per wrapper, with pair wrapping that way.
func eachWrapper(t *testing.T, f func(t *testing.T, pair func(*testing.T) (*Conn, net.Conn))) {
	for _, w := range wrappers {
		t.Run(w.name, func(t *testing.T) {
			f(t, func(t *testing.T) (*Conn, net.Conn) { return pairWith(t, w.wrap) })
		})
	}
}

// pairWith returns a client connection wrapped by wrap and the server's
// end of a loopback TCP connection.
func pairWith(t *testing.T, wrap func(net.Conn) *Conn) (*Conn, net.Conn) {
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
	c := wrap(nc)
	t.Cleanup(func() { c.Close(); srv.Close() })
	return c, srv
}

func TestReadErrorsKeepNetConnSemantics(t *testing.T) {
	eachWrapper(t, func(t *testing.T, pair func(*testing.T) (*Conn, net.Conn)) {
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
		if n, err := c.Read(make([]byte, 8)); n != 0 || !errors.Is(err, io.EOF) {
			t.Fatalf("read after EOF = %d, %v", n, err)
		}
	})
}

// A deadline that has passed fails the next read even when data is waiting
// in the socket, as with net.Conn: the load generator cancels a stream by
// setting one, and a server that keeps sending must not keep it reading.
func TestPassedDeadlineFailsAReadWithDataWaiting(t *testing.T) {
	eachWrapper(t, func(t *testing.T, pair func(*testing.T) (*Conn, net.Conn)) {
		c, srv := pair(t)
		if _, err := srv.Write([]byte("abcdef")); err != nil {
			t.Fatal(err)
		}
		// The first read leaves data behind; so does each that follows.
		for range 2 {
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.SetReadDeadline(time.Now().Add(-time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := c.Read(make([]byte, 1))
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("read past the deadline with data waiting = %d, %v; want a timeout", n, err)
		}
	})
}

func TestResetIsAnOpErrorWithErrno(t *testing.T) {
	eachWrapper(t, func(t *testing.T, pair func(*testing.T) (*Conn, net.Conn)) {
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
	})
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
	eachWrapper(t, func(t *testing.T, pair func(*testing.T) (*Conn, net.Conn)) {
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
	})
}
