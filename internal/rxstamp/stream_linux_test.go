package rxstamp

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

func readString(t *testing.T, c *Conn, size int) string {
	t.Helper()
	buf := make([]byte, size)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return string(buf[:n])
}

// A stream connection never makes the recvmsg that finds the socket
// empty: after a read that emptied it (TCP_INQ 0) the next read waits in
// Go's poller, which kept every arrival since the wait began; after one
// that left data it reads again at once. Wrap's reads make that empty
// call whenever a read begins before its data arrived.
func TestStreamReadsNeverFindTheSocketEmpty(t *testing.T) {
	c, srv := pairWith(t, WrapStream)
	if c.sr == nil {
		t.Fatal("not a stream connection")
	}
	write := func(s string) {
		t.Helper()
		if _, err := srv.Write([]byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	// Data queued before each read.
	for _, s := range []string{"a", "b"} {
		write(s)
		waitQueued(t, c, 1)
		if got := readString(t, c, 8); got != s {
			t.Fatalf("read %q, want %q", got, s)
		}
	}
	// A read that begins before its data arrives.
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 8)
		n, _ := c.Read(buf)
		got <- string(buf[:n])
	}()
	// Not a wait for a condition: the reader should be waiting when the
	// data comes (if it is not yet, the test only checks less).
	time.Sleep(20 * time.Millisecond)
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
	if c.sr.calls != 5 || c.sr.empty != 0 {
		t.Fatalf("5 reads made %d recvmsg calls, %d of them on an empty socket; want 5 and 0", c.sr.calls, c.sr.empty)
	}
}

// Between reads the connection's wait holds the socket's read lock: Close
// ends it first, or closing would wait for ever.
func TestStreamCloseBetweenReads(t *testing.T) {
	c, srv := pairWith(t, WrapStream)
	if _, err := srv.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if got := readString(t, c, 8); got != "x" {
		t.Fatalf("read %q", got)
	}
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Close did not return within a minute")
	}
	if _, err := c.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after Close: %v, want net.ErrClosed", err)
	}
}

// Close from another goroutine ends a read that waits for data, as with
// net.Conn.
func TestStreamCloseEndsAWaitingRead(t *testing.T) {
	c, _ := pairWith(t, WrapStream)
	if c.sr == nil {
		t.Fatal("not a stream connection")
	}
	errs := make(chan error, 1)
	go func() {
		_, err := c.Read(make([]byte, 8))
		errs <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case err := <-errs:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read on a closed connection: %v, want net.ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("the read did not return within a minute of Close")
	}
}
