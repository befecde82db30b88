package rxstamp

import (
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// tcpInq is TCP_INQ (linux/tcp.h, Linux 4.18): recvmsg then returns, as a
// TCP_CM_INQ control message of the same number, how many bytes are left
// in the socket after the read (1 when none are but the peer has closed, so
// that the caller reads once more and sees the end).
const tcpInq = 36

// Poller tells its connections' readers when their sockets have data, from
// one epoll instance of its own, so that a reader that knows the socket is
// empty (TCP_INQ) waits for data without first making the recvmsg that
// would find it empty. Go's poller makes that call on every read that
// waits: at one chunk per read it is half the load generator's system
// calls. A Poller's goroutine runs only while it has connections: it
// parks in Go's poller on the epoll instance and, when sockets become
// readable, wakes their readers. Its zero value is not usable: NewPoller.
type Poller struct {
	mu    sync.Mutex
	epfd  int // -1: no connections, no epoll instance
	file  *os.File
	next  int32
	conns map[int32]*pollState
}

// NewPoller returns a Poller. It holds no resources until the first
// connection is wrapped and none after the last is closed.
func NewPoller() *Poller { return &Poller{epfd: -1, conns: make(map[int32]*pollState)} }

// pollState is what the Poller's goroutine and a connection's reader
// share (the Poller does not refer to the connection, which the garbage
// collector can then reclaim; a cleanup unregisters it).
type pollState struct {
	// ready: the socket became readable since the reader last looked;
	// waiting: the reader waits on wake and must be woken.
	state atomic.Int32
	// hup: the socket reported an error or the peer's close. It is never
	// cleared: a reader that consumed the data queued before a reset or an
	// end must not wait for another event.
	hup     atomic.Bool
	expired atomic.Bool // the read deadline passed
	closed  atomic.Bool
	dlGen   atomic.Uint64 // read deadline generation (stale timers)
	wake    chan struct{} // capacity 1
}

const (
	stIdle int32 = iota
	stReady
	stWaiting
)

func (s *pollState) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Wrap returns nc reading with kernel receive timestamps, waiting for data
// through p where it can (a TCP connection on Linux with SO_TIMESTAMPNS
// and TCP_INQ), and as Wrap does otherwise.
func (p *Poller) Wrap(nc net.Conn) *Conn {
	c := Wrap(nc)
	if c.sys == nil || p == nil {
		return c
	}
	var fd int
	var serr error
	if err := c.sys.rc.Control(func(f uintptr) {
		fd = int(f)
		serr = syscall.SetsockoptInt(fd, syscall.SOL_TCP, tcpInq, 1)
	}); err != nil || serr != nil {
		return c
	}
	st := &pollState{wake: make(chan struct{}, 1)}
	id, err := p.add(c.sys.rc, st)
	if err != nil {
		return c
	}
	pc := &pollConn{p: p, st: st, id: id, sys: c.sys, mustRead: true}
	pc.fn = pc.recvFD
	c.pc = pc
	// A connection dropped without Close (its net.Conn's own cleanup
	// closes the socket, which leaves the epoll instance by itself).
	runtime.AddCleanup(c, func(id int32) { p.remove(id, nil) }, id)
	return c
}

// add registers the socket of rc (edge-triggered) and starts the Poller's
// goroutine with its first connection.
func (p *Poller) add(rc syscall.RawConn, st *pollState) (int32, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.epfd < 0 {
		epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return 0, err
		}
		if err := syscall.SetNonblock(epfd, true); err != nil {
			syscall.Close(epfd)
			return 0, err
		}
		// Non-blocking: os.NewFile hands it to Go's poller, so the
		// goroutine waits for events without holding a thread.
		f := os.NewFile(uintptr(epfd), "epoll")
		frc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return 0, err
		}
		p.epfd, p.file = epfd, f
		go p.loop(epfd, frc)
	}
	p.next++
	id := p.next
	const events = syscall.EPOLLIN | syscall.EPOLLRDHUP | syscall.EPOLLET&0xffffffff
	ev := syscall.EpollEvent{Events: uint32(events), Fd: id}
	var cerr error
	if err := rc.Control(func(fd uintptr) { cerr = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev) }); err != nil || cerr != nil {
		p.closeIfIdle()
		return 0, errors.Join(err, cerr)
	}
	p.conns[id] = st
	return id, nil
}

// remove unregisters connection id (its socket too when rc is not nil) and
// ends the goroutine after the last connection.
func (p *Poller) remove(id int32, rc syscall.RawConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.conns[id]; !ok {
		return
	}
	delete(p.conns, id)
	if rc != nil && p.epfd >= 0 {
		_ = rc.Control(func(fd uintptr) { _ = syscall.EpollCtl(p.epfd, syscall.EPOLL_CTL_DEL, int(fd), nil) })
	}
	p.closeIfIdle()
}

func (p *Poller) closeIfIdle() {
	if len(p.conns) == 0 && p.file != nil {
		p.file.Close() // the goroutine's wait returns an error and it ends
		p.file, p.epfd = nil, -1
	}
}

// loop waits for events on epfd and passes them to the readers.
func (p *Poller) loop(epfd int, rc syscall.RawConn) {
	var (
		events [128]syscall.EpollEvent
		n      int
		werr   error
	)
	wait := func(uintptr) bool {
		n, werr = syscall.EpollWait(epfd, events[:], 0)
		if werr == syscall.EINTR {
			n, werr = 0, nil
		}
		return n > 0 || werr != nil
	}
	for {
		if err := rc.Read(wait); err != nil || werr != nil {
			return // closed with the last connection
		}
		p.mu.Lock()
		for i := range events[:n] {
			ev := &events[i]
			st := p.conns[ev.Fd]
			if st == nil {
				continue
			}
			if ev.Events&(syscall.EPOLLERR|syscall.EPOLLHUP|syscall.EPOLLRDHUP) != 0 {
				st.hup.Store(true)
			}
			if st.state.Swap(stReady) == stWaiting {
				st.notify()
			}
		}
		p.mu.Unlock()
	}
}

// pollConn is the reading side of a Conn wrapped by a Poller.
type pollConn struct {
	p   *Poller
	st  *pollState
	id  int32
	sys *sysConn
	// mustRead: the last read may have left data (TCP_INQ > 0, or no read
	// yet), so the next read calls recvmsg without waiting first.
	mustRead bool
	fn       func(fd uintptr) // recvFD, made once
	dlMu     sync.Mutex
	timer    *time.Timer
	// recvmsg calls, and those that found the socket empty (for tests;
	// the reader's goroutine only)
	calls, empty int
}

// read reads once: at once when data may be waiting, else after the
// Poller says the socket became readable.
func (c *pollConn) read(p []byte) (int, int64, error) {
	if len(p) == 0 {
		return 0, -1, nil
	}
	st := c.st
	for {
		if st.closed.Load() {
			return 0, -1, c.sys.opError(net.ErrClosed)
		}
		if st.expired.Load() {
			return 0, -1, c.sys.opError(os.ErrDeadlineExceeded)
		}
		if c.mustRead || st.hup.Load() || st.state.CompareAndSwap(stReady, stIdle) {
			n, ts, inq, err := c.recv(p)
			c.calls++
			if err == syscall.EAGAIN {
				c.empty++
				c.mustRead = false
				continue
			}
			if err != nil {
				return 0, -1, c.sys.opError(os.NewSyscallError("recvmsg", err))
			}
			if n == 0 {
				return 0, -1, io.EOF
			}
			c.mustRead = inq != 0
			return n, ts, nil
		}
		if st.state.CompareAndSwap(stIdle, stWaiting) || st.state.Load() == stWaiting {
			<-st.wake
		}
	}
}

// recv is one non-blocking recvmsg into p: bytes, kernel timestamp (-1:
// none), bytes left in the socket (-1: unknown).
func (c *pollConn) recv(p []byte) (n int, ts int64, inq int, err error) {
	s := c.sys
	s.iov.Base = &p[0]
	s.iov.SetLen(len(p))
	cerr := s.rc.Control(c.fn)
	s.iov.Base = nil // do not keep p alive
	if cerr != nil {
		return 0, -1, -1, cerr
	}
	return s.n, s.ts, s.inq, s.err
}

// recvFD is recv's callback (made once per connection as c.fn: a method
// value per call would allocate; sysConn keeps the results).
func (c *pollConn) recvFD(fd uintptr) {
	s := c.sys
	for {
		s.msg.Control = &s.oob[0]
		s.msg.SetControllen(len(s.oob))
		s.msg.Iov = &s.iov
		s.msg.Iovlen = 1
		s.msg.Name = nil
		s.msg.Namelen = 0
		s.msg.Flags = 0
		r, _, e := syscall.Syscall(syscall.SYS_RECVMSG, fd, uintptr(unsafe.Pointer(&s.msg)), syscall.MSG_DONTWAIT)
		if e == syscall.EINTR {
			continue
		}
		s.n, s.ts, s.inq, s.err = 0, -1, -1, nil
		if e != 0 {
			s.err = e
			return
		}
		s.n = int(r)
		oob := s.oob[:s.msg.Controllen]
		s.ts = timestampNS(oob)
		s.inq = tcpInqOf(oob)
		raceAcquire(fd)
		return
	}
}

// setReadDeadline makes a waiting or later read fail with
// os.ErrDeadlineExceeded once t has passed (zero: never).
func (c *pollConn) setReadDeadline(t time.Time) {
	c.dlMu.Lock()
	defer c.dlMu.Unlock()
	st := c.st
	gen := st.dlGen.Add(1)
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	st.expired.Store(false)
	if t.IsZero() {
		return
	}
	d := time.Until(t)
	if d <= 0 {
		st.expired.Store(true)
		st.notify()
		return
	}
	c.timer = time.AfterFunc(d, func() {
		if st.dlGen.Load() == gen {
			st.expired.Store(true)
			st.notify()
		}
	})
}

// close wakes a waiting read and unregisters the socket.
func (c *pollConn) close() {
	c.st.closed.Store(true)
	c.st.notify()
	c.dlMu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	c.dlMu.Unlock()
	c.p.remove(c.id, c.sys.rc)
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
