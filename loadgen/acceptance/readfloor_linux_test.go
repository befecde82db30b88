package acceptance

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/gpulens/gpulens/internal/rxstamp"
	"github.com/gpulens/gpulens/internal/testenv"
)

// writerEnv, when set to N, makes the test binary a chunk writer: it logs
// the address it listens on (testenv.ListenAddress's line), accepts N
// connections on 127.0.0.1 and writes one 206-byte HTTP chunk (an SSE
// content event) to each every 5 ms, staggered, until it is killed
// (testenv's Stop: SIGTERM) or a connection closes.
const writerEnv = "GPULENS_ACCEPTANCE_CHUNK_WRITER"

// floorChunk is a vLLM-style content event as one HTTP chunk (206 bytes).
var floorChunk = []byte("c8\r\ndata: {\"id\":\"chatcmpl-sim-1\",\"object\":\"chat.completion.chunk\",\"created\":1796037634," +
	"\"model\":\"gpulens-sim\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" word\"},\"finish_reason\":null}]}\n\n\r\n")

func init() {
	if n := os.Getenv(writerEnv); n != "" {
		streams, _ := strconv.Atoi(n)
		os.Exit(writeChunks(streams))
	}
}

func writeChunks(streams int) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	slog.New(slog.NewTextHandler(os.Stdout, nil)).Info("Listening on", "address", ln.Addr().String())
	conns := make([]net.Conn, 0, streams)
	for len(conns) < streams {
		c, err := ln.Accept()
		if err != nil {
			return 2
		}
		conns = append(conns, c)
	}
	const period = 5 * time.Millisecond
	start := time.Now()
	next := make([]time.Time, len(conns))
	for i := range next {
		next[i] = start.Add(period * time.Duration(i) / time.Duration(len(conns)))
	}
	// The next round's time: a timer, not a sleep in the loop (the pacing
	// is the writer's job, not a wait for a condition).
	tick := time.NewTimer(0)
	defer tick.Stop()
	for {
		<-tick.C
		now := time.Now()
		soonest := now.Add(period)
		for i, c := range conns {
			if !now.Before(next[i]) {
				if _, err := c.Write(floorChunk); err != nil {
					return 0
				}
				next[i] = next[i].Add(period)
			}
			if next[i].Before(soonest) {
				soonest = next[i]
			}
		}
		tick.Reset(time.Until(soonest))
	}
}

// BenchmarkReadFloor measures what merely reading 512 streams costs on this
// machine, without parsing, timing or bookkeeping: each stream receives one
// 206-byte chunk every 5 ms (102,400 chunks/s) from a writer process on the
// same cores. "goroutines" reads each connection on its own goroutine
// through Go's poller (net.Conn.Read); "rxstamp" the same with the
// kernel's receive timestamps (internal/rxstamp's Wrap: each read a wait
// of its own); "stream" with the timestamps through one held wait
// (internal/rxstamp's WrapStream, as the load generator reads); "epoll" is
// one goroutine with its own epoll loop and one recvmsg with a receive
// timestamp per ready socket. It is the floor under the load generator's
// CPU per token over TCP.
func BenchmarkReadFloor(b *testing.B) {
	const streams = 512
	for _, mode := range []string{"goroutines", "rxstamp", "stream", "epoll"} {
		b.Run(mode, func(b *testing.B) {
			writer := testenv.RunEnv(b, []string{writerEnv + "=" + strconv.Itoa(streams)}, os.Args[0], "-test.run=^$")
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			addr := writer.MustAddress(ctx, b)
			conns := make([]net.Conn, streams)
			for i := range conns {
				var err error
				if conns[i], err = net.Dial("tcp", addr); err != nil {
					b.Fatal(err)
				}
				switch mode {
				case "rxstamp":
					conns[i] = rxstamp.Wrap(conns[i])
				case "stream":
					conns[i] = rxstamp.WrapStream(conns[i])
				}
				defer conns[i].Close()
			}
			time.Sleep(200 * time.Millisecond) // not a wait: the writer's first rounds before measuring
			var bytes, reads int64
			var used time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c0 := cpuTime()
				var n, r int64
				if mode == "epoll" {
					n, r = readEpoll(b, conns, 2*time.Second)
				} else {
					n, r = readGoroutines(conns, 2*time.Second)
				}
				used += cpuTime() - c0
				bytes += n
				reads += r
			}
			b.StopTimer()
			chunks := float64(bytes) / float64(len(floorChunk))
			b.ReportMetric(float64(used.Nanoseconds())/1e3/chunks, "cpu-µs/chunk")
			b.ReportMetric(float64(reads)/chunks, "reads/chunk")
		})
	}
}

func readGoroutines(conns []net.Conn, d time.Duration) (bytes, reads int64) {
	type count struct{ n, r int64 }
	done := make(chan count, len(conns))
	stop := time.Now().Add(d)
	for _, c := range conns {
		go func(c net.Conn) {
			buf := make([]byte, 16<<10)
			var k count
			c.SetReadDeadline(stop)
			for {
				n, err := c.Read(buf)
				if err != nil {
					break
				}
				k.n += int64(n)
				k.r++
			}
			c.SetReadDeadline(time.Time{})
			done <- k
		}(c)
	}
	for range conns {
		k := <-done
		bytes += k.n
		reads += k.r
	}
	return bytes, reads
}

func readEpoll(b *testing.B, conns []net.Conn, d time.Duration) (bytes, reads int64) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	defer syscall.Close(epfd)
	for _, c := range conns {
		rc, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			b.Fatal(err)
		}
		var cerr error
		rc.Control(func(fd uintptr) {
			if cerr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1); cerr != nil {
				return
			}
			ev := syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(fd)}
			cerr = syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, int(fd), &ev)
		})
		if cerr != nil {
			b.Fatal(cerr)
		}
	}
	events := make([]syscall.EpollEvent, 256)
	buf := make([]byte, 16<<10)
	oob := make([]byte, 64)
	var msg syscall.Msghdr
	iov := syscall.Iovec{Base: &buf[0]}
	iov.SetLen(len(buf))
	for stop := time.Now().Add(d); time.Now().Before(stop); {
		n, err := syscall.EpollWait(epfd, events, 100)
		if err != nil && err != syscall.EINTR {
			b.Fatal(err)
		}
		for _, ev := range events[:max(n, 0)] {
			msg.Iov, msg.Iovlen, msg.Control = &iov, 1, &oob[0]
			msg.SetControllen(len(oob))
			r, _, e := syscall.Syscall(syscall.SYS_RECVMSG, uintptr(ev.Fd), uintptr(unsafe.Pointer(&msg)), syscall.MSG_DONTWAIT)
			if e == 0 {
				bytes += int64(r)
				reads++
			}
		}
	}
	return bytes, reads
}
