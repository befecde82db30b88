package rxstamp

import (
	"io"
	"net"
	"os"
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
