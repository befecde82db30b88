package rxstamp

import (
	"errors"
	"io"
	"iter"
	"net"
	"os"
	"sync"
	"syscall"
	"unsafe"
)

// sysConn reads a TCP socket with recvmsg through the runtime's poller.
type sysConn struct {
	nc  net.Conn
	rc  syscall.RawConn
	msg syscall.Msghdr
	iov syscall.Iovec
	oob [64]byte // room for one SCM_TIMESTAMPNS (32 bytes) and slack
	// results of the callback, kept here so that the closure does not
	// allocate per read
	n   int
	ts  int64
	err error
	fn  func(fd uintptr) bool
}

func newSysConn(nc net.Conn) *sysConn {
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return nil
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return nil
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1)
	}); err != nil || serr != nil {
		return nil
	}
	s := &sysConn{nc: nc, rc: rc}
	s.fn = s.recv
	return s
}

// recv is the RawConn.Read callback: one recvmsg; false asks the poller to
// wait for data.
func (s *sysConn) recv(fd uintptr) bool {
	s.msg.Control = &s.oob[0]
	s.msg.SetControllen(len(s.oob))
	s.msg.Iov = &s.iov
	s.msg.Iovlen = 1
	s.msg.Name = nil
	s.msg.Namelen = 0
	s.msg.Flags = 0
	r, _, e := syscall.Syscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&s.msg)), 0)
	if e == syscall.EAGAIN {
		return false
	}
	if e == syscall.EINTR {
		return s.recv(fd)
	}
	s.n, s.ts, s.err = int(r), -1, nil
	if e != 0 {
		s.n, s.err = 0, os.NewSyscallError("recvmsg", e)
		return true
	}
	s.ts = timestampNS(s.oob[:s.msg.Controllen])
	raceAcquire(fd)
	return true
}

func (s *sysConn) read(p []byte) (int, int64, error) {
	if len(p) == 0 {
		return 0, -1, nil
	}
	s.iov.Base = &p[0]
	s.iov.SetLen(len(p))
	err := s.rc.Read(s.fn)
	s.iov.Base = nil // do not keep p alive
	if err != nil {
		return 0, -1, s.opError(err)
	}
	if s.err != nil {
		return 0, -1, s.opError(s.err)
	}
	if s.n == 0 {
		return 0, -1, io.EOF
	}
	return s.n, s.ts, nil
}

// opError wraps err as net.Conn.Read would, so that callers can still test
// for timeouts (net.Error) and resets (*net.OpError with an errno).
func (s *sysConn) opError(err error) error {
	return &net.OpError{Op: "read", Net: "tcp", Source: s.nc.LocalAddr(), Addr: s.nc.RemoteAddr(), Err: err}
}

// timestampNS returns the SCM_TIMESTAMPNS time in oob (unix ns), or -1.
func timestampNS(oob []byte) int64 {
	const hdr = syscall.SizeofCmsghdr
	for len(oob) >= hdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return -1
		}
		if h.Level == syscall.SOL_SOCKET && h.Type == syscall.SCM_TIMESTAMPNS && l >= hdr+int(unsafe.Sizeof(syscall.Timespec{})) {
			ts := (*syscall.Timespec)(unsafe.Pointer(&oob[syscall.CmsgLen(0)]))
			return ts.Nano()
		}
		oob = oob[min(syscall.CmsgSpace(l-hdr), len(oob)):]
	}
	return -1
}

// tcpInq is TCP_INQ (linux/tcp.h, Linux 4.18): recvmsg then also returns,
// as a TCP_CM_INQ control message of the same number, how many bytes are
// left in the socket after the read (1 when none are but the peer has
// closed, so that the reader reads once more and sees the end).
const tcpInq = 36

// streamReader keeps one RawConn.Read open across the Conn's reads, run
// as a coroutine (iter.Pull): Go's poller resets a socket's readiness when
// a RawConn.Read begins, so a read that begins anew must make a recvmsg
// to learn whether data came meanwhile, and at one chunk per read half the
// calls find the socket empty. Held open, the poller keeps every readiness
// that came since it began: after a recvmsg that left the socket empty
// (TCP_INQ 0) the next read waits for it without a system call. Between
// reads the coroutine is suspended inside the callback, holding the
// socket's read lock; Close ends it first.
type streamReader struct {
	s *sysConn

	mu      sync.Mutex
	reading bool // a Read is in next
	closed  bool
	next    func() (struct{}, bool)
	stop    func()

	// between Read and the coroutine
	p     []byte
	n     int
	ts    int64
	err   error
	final bool // the coroutine delivered its last result and ended
	wait  bool // the last recvmsg left the socket empty: wait before the next
	// recvmsg calls, and those that found the socket empty (for tests)
	calls, empty int
}

func newStreamReader(s *sysConn) (*streamReader, error) {
	var serr error
	if err := s.rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_TCP, tcpInq, 1)
	}); err != nil || serr != nil {
		return nil, errors.Join(err, serr)
	}
	return &streamReader{s: s}, nil
}

// seq is the coroutine: one RawConn.Read that hands each recvmsg's result
// to the reader, until an error, the end of the stream or stop.
func (r *streamReader) seq(yield func(struct{}) bool) {
	s := r.s
	stopped, again := false, false
	f := func(fd uintptr) bool {
		for {
			if r.wait {
				r.wait = false
				return false // wait for the poller; an arrival since was kept
			}
			s.iov.Base = &r.p[0]
			s.iov.SetLen(len(r.p))
			s.msg.Control = &s.oob[0]
			s.msg.SetControllen(len(s.oob))
			s.msg.Iov = &s.iov
			s.msg.Iovlen = 1
			s.msg.Name = nil
			s.msg.Namelen = 0
			s.msg.Flags = 0
			n, _, e := syscall.Syscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&s.msg)), syscall.MSG_DONTWAIT)
			s.iov.Base = nil
			r.calls++
			switch e {
			case syscall.EINTR:
				continue
			case syscall.EAGAIN:
				r.empty++
				return false
			}
			r.n, r.ts, r.err = int(n), -1, nil
			if e != 0 {
				r.n, r.err = 0, os.NewSyscallError("recvmsg", e)
				return true
			}
			if n == 0 {
				r.err = io.EOF
				return true
			}
			oob := s.oob[:s.msg.Controllen]
			r.ts = timestampNS(oob)
			inq := tcpInqOf(oob)
			raceAcquire(fd)
			if !yield(struct{}{}) {
				stopped = true
				return true
			}
			if inq != 0 {
				// Data left (or unknown): read it in a new RawConn.Read,
				// which checks the deadline and a close first, as every
				// net.Conn read does.
				again = true
				return true
			}
			r.wait = true
		}
	}
	var err error
	for {
		r.wait, again = false, false // a new RawConn.Read: the poller knows nothing yet
		err = s.rc.Read(f)
		if stopped {
			return
		}
		if !again || err != nil {
			break
		}
	}
	if err != nil {
		r.n, r.ts, r.err = 0, -1, err
	}
	r.final = true
	yield(struct{}{})
}

// read is one Read through the coroutine.
func (r *streamReader) read(p []byte) (int, int64, error) {
	if len(p) == 0 {
		return 0, -1, nil
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return 0, -1, r.s.opError(net.ErrClosed)
	}
	if r.next == nil {
		r.final = false
		r.next, r.stop = iter.Pull(r.seq)
	}
	r.reading = true
	r.mu.Unlock()
	r.p = p
	_, ok := r.next()
	r.p = nil
	n, ts, err := r.n, r.ts, r.err
	r.mu.Lock()
	r.reading = false
	// Closed meanwhile: Close did not end the coroutine, which holds the
	// read lock that closing the socket waits for.
	if !ok || r.final || r.closed {
		r.stop()
		r.next, r.stop = nil, nil
	}
	r.mu.Unlock()
	switch {
	case !ok:
		return 0, -1, r.s.opError(net.ErrClosed)
	case errors.Is(err, io.EOF):
		return 0, -1, io.EOF
	case err != nil:
		return 0, -1, r.s.opError(err)
	}
	return n, ts, nil
}

// close ends a suspended coroutine, so that closing the socket does not
// wait for its read lock. A Read in progress ends when the socket closes.
func (r *streamReader) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if !r.reading && r.stop != nil {
		r.stop()
		r.next, r.stop = nil, nil
	}
}

// release ends the coroutine and closes the socket of a Conn that was
// dropped without Close (its cleanup).
func (r *streamReader) release() {
	r.close()
	r.s.nc.Close()
}

// tcpInqOf returns the TCP_CM_INQ count in oob, or -1.
func tcpInqOf(oob []byte) int {
	const hdr = syscall.SizeofCmsghdr
	for len(oob) >= hdr {
		h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < hdr || l > len(oob) {
			return -1
		}
		if h.Level == syscall.SOL_TCP && h.Type == tcpInq && l >= hdr+4 {
			return int(*(*int32)(unsafe.Pointer(&oob[syscall.CmsgLen(0)])))
		}
		oob = oob[min(syscall.CmsgSpace(l-hdr), len(oob)):]
	}
	return -1
}
