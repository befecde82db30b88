//go:build !linux

package rxstamp

import (
	"net"
	"time"
)

type sysConn struct{}

func newSysConn(net.Conn) *sysConn { return nil }

func (*sysConn) read([]byte) (int, int64, error) { panic("unreachable") }

// Poller is Wrap where the platform has no epoll: see the Linux Poller.
type Poller struct{}

// NewPoller returns a Poller.
func NewPoller() *Poller { return &Poller{} }

// Wrap is Wrap(nc).
func (*Poller) Wrap(nc net.Conn) *Conn { return Wrap(nc) }

type pollConn struct{}

func (*pollConn) read([]byte) (int, int64, error) { panic("unreachable") }
func (*pollConn) setReadDeadline(time.Time)       { panic("unreachable") }
func (*pollConn) close()                          { panic("unreachable") }
