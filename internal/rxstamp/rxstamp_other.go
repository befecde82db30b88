//go:build !linux

package rxstamp

import "net"

type sysConn struct{}

func newSysConn(net.Conn) *sysConn { return nil }

func (*sysConn) read([]byte) (int, int64, error) { panic("unreachable") }

type streamReader struct{ s *sysConn }

func newStreamReader(*sysConn) (*streamReader, error) { panic("unreachable") }

func (*streamReader) read([]byte) (int, int64, error) { panic("unreachable") }
func (*streamReader) close()                          { panic("unreachable") }
func (*streamReader) release()                        { panic("unreachable") }
