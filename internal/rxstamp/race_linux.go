//go:build race

package rxstamp

import "syscall"

// raceAcquire tells the race detector what a read through net.Conn tells
// it: that whatever the writer did before writing happened before this
// read (syscall.Read acquires the I/O synchronisation point that
// syscall.Write releases; recvmsg through RawConn does not). A zero-length
// read returns at once and consumes nothing. Race builds only.
func raceAcquire(fd uintptr) { _, _ = syscall.Read(int(fd), nil) }
