// Package rxstamp reads TCP connections together with the time the kernel
// received the data (SO_TIMESTAMPNS), so that a busy process measures when
// bytes arrived rather than when it got round to reading them.
//
// A load generator that timestamps each read when the read returns adds its
// own scheduling delay to every time to first token and inter-token gap:
// with hundreds of streams on a few cores, a ready goroutine can wait
// milliseconds for a CPU. The kernel stamps each received segment when it
// is queued on the socket; recvmsg returns the stamp of the newest segment
// whose bytes it copied. That is the arrival time of the newest byte of the
// read, an upper bound for every byte in it, independent of how long the
// reader took to run. A segment that arrives while an earlier one still
// waits in the socket may be merged into it, keeping only the newer time:
// the stamps are exact for data read before more arrived.
//
// On systems or sockets without receive timestamps a Conn falls back to the
// clock when each read returns, and Kernel reports false. Linux turns
// timestamping on in the background when the first socket asks for it, so
// the first segments a process receives may carry no stamp either.
package rxstamp

import (
	"net"
	"runtime"
	"sync/atomic"
	"time"
)

// Conn is a net.Conn whose reads record when the data arrived. Read must
// not be called concurrently with itself; LastArrival and Kernel may be
// called from any goroutine.
type Conn struct {
	net.Conn
	base   time.Time     // monotonic origin of last
	last   atomic.Int64  // arrival of the newest byte read, ns since base; 0: none yet
	kernel atomic.Bool   // the newest read carried a kernel timestamp
	sys    *sysConn      // nil: plain reads
	sr     *streamReader // reads hold the socket between calls (WrapStream)
}

// Wrap returns nc reading with kernel receive timestamps when the platform
// and the connection support them, and with read-return times otherwise.
func Wrap(nc net.Conn) *Conn {
	c := &Conn{Conn: nc, base: time.Now()}
	c.sys = newSysConn(nc)
	return c
}

// WrapStream is Wrap for a connection that one goroutine reads (and
// closes) at a time, with every read made through the same wait on Go's
// poller, so that a read that follows one that emptied the socket waits
// for data without first making the system call that finds it empty (on
// Linux, with TCP_INQ). Close must be called (it ends that wait); a
// connection dropped without it is closed when the garbage collector
// reclaims it.
func WrapStream(nc net.Conn) *Conn {
	c := Wrap(nc)
	if c.sys == nil {
		return c
	}
	sr, err := newStreamReader(c.sys)
	if err != nil {
		return c
	}
	c.sr = sr
	runtime.AddCleanup(c, (*streamReader).release, sr)
	return c
}

// Close closes the connection.
func (c *Conn) Close() error {
	if c.sr != nil {
		c.sr.close()
	}
	return c.Conn.Close()
}

// Read reads from the connection and records the arrival of the data.
func (c *Conn) Read(p []byte) (int, error) {
	if c.sr != nil {
		n, ts, err := c.sr.read(p)
		if n > 0 {
			c.stamp(time.Now(), ts)
		}
		return n, err
	}
	if c.sys == nil {
		n, err := c.Conn.Read(p)
		if n > 0 {
			c.stamp(time.Now(), -1)
		}
		return n, err
	}
	n, ts, err := c.sys.read(p)
	if n > 0 {
		c.stamp(time.Now(), ts)
	}
	return n, err
}

// stamp records now, or the kernel time ts (unix ns; < 0 when absent) moved
// onto now's monotonic clock.
func (c *Conn) stamp(now time.Time, ts int64) {
	at := now
	if ts >= 0 && ts < c.base.UnixNano() {
		ts = -1 // not a stamp of this connection's data (no stamp was taken)
	}
	if ts >= 0 {
		if d := now.UnixNano() - ts; d > 0 {
			at = now.Add(-time.Duration(d))
		}
	}
	off := int64(at.Sub(c.base))
	if off <= 0 {
		off = 1
	}
	if off < c.last.Load() {
		off = c.last.Load() // arrivals never go backwards
	}
	c.last.Store(off)
	c.kernel.Store(ts >= 0)
}

// LastArrival is when the newest byte returned by Read arrived (zero before
// the first read returned data).
func (c *Conn) LastArrival() time.Time {
	off := c.last.Load()
	if off == 0 {
		return time.Time{}
	}
	return c.base.Add(time.Duration(off))
}

// Kernel reports whether the newest read's arrival came from the kernel.
func (c *Conn) Kernel() bool { return c.kernel.Load() }

// Listener wraps every accepted connection with Wrap.
type Listener struct{ net.Listener }

// Accept waits for the next connection and wraps it.
func (l Listener) Accept() (net.Conn, error) {
	nc, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(nc), nil
}
