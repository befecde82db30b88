package client

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/testenv"
	"github.com/gpulens/gpulens/loadgen/report"
)

// rawServer accepts connections on 127.0.0.1 and answers every request on
// them with the next of answers (written piece by piece, 5 ms apart, so
// that chunk boundaries usually fall between reads). A piece "<close>"
// closes the connection and then signals closed; a piece "<wait>" waits
// for the test to send on proceed. Once an answer is written in full it
// signals answered. It counts the connections it accepted.
type rawServer struct {
	ln       net.Listener
	conns    atomic.Int32
	mu       sync.Mutex
	reqs     []string // request heads seen
	open     []net.Conn
	closed   chan struct{}
	answered chan struct{}
	proceed  chan struct{}
}

func newRawServer(t *testing.T, answers ...[]string) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{ln: ln, closed: make(chan struct{}, 64), answered: make(chan struct{}, 64), proceed: make(chan struct{})}
	quit := make(chan struct{})
	var next atomic.Int32
	var wg sync.WaitGroup
	t.Cleanup(func() {
		close(quit)
		ln.Close()
		s.mu.Lock()
		for _, nc := range s.open {
			nc.Close() // the client keeps idle connections
		}
		s.mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			s.conns.Add(1)
			s.mu.Lock()
			s.open = append(s.open, nc)
			s.mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					io.Copy(io.Discard, req.Body)
					s.mu.Lock()
					s.reqs = append(s.reqs, req.Method+" "+req.URL.Path+" "+req.Header.Get("Authorization")+" "+req.Header.Get("Accept"))
					s.mu.Unlock()
					i := int(next.Add(1) - 1)
					if i >= len(answers) {
						return
					}
					for j, p := range answers[i] {
						switch p {
						case "<close>":
							nc.Close()
							signal(s.closed)
							return
						case "<wait>":
							select {
							case <-s.proceed:
							case <-quit:
								return
							}
							continue
						}
						if j > 0 {
							time.Sleep(5 * time.Millisecond) // not a wait: the pieces' pacing
						}
						if _, err := io.WriteString(nc, p); err != nil {
							return
						}
					}
					signal(s.answered)
				}
			}()
		}
	}()
	return s
}

// signal sends on a buffered channel, dropping the signal if nobody
// collects them.
func signal(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// await receives a signal; the deadline only stops a broken test from
// hanging.
func await(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(time.Minute):
		t.Fatalf("no %s within a minute", what)
	}
}

func (s *rawServer) url() string { return "http://" + s.ln.Addr().String() }

// chunked frames each piece as one HTTP chunk.
func chunked(pieces ...string) []string {
	out := make([]string, 0, len(pieces)+1)
	for _, p := range pieces {
		out = append(out, fmt.Sprintf("%x\r\n%s\r\n", len(p), p))
	}
	return append(out, "0\r\n\r\n")
}

const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"

func TestH1Responses(t *testing.T) {
	stream := roleChunk + helloChunk + worldChunk + usageChunk + done
	for _, tc := range []struct {
		name   string
		answer []string
		class  string
		conns  int32 // connections for two requests
	}{
		{name: "chunked, one chunk per event",
			answer: append([]string{sseHead + "Transfer-Encoding: chunked\r\n\r\n"}, chunked(roleChunk, helloChunk, worldChunk, usageChunk, done)...),
			conns:  1},
		{name: "chunked, CRLF after the data in the next read, extension and trailer",
			answer: []string{sseHead + "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x;ext=1\r\n%s", len(stream), stream), "\r", "\n0\r\nX-Trailer: 1\r\n\r\n"},
			conns:  1},
		{name: "content-length",
			answer: []string{sseHead + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(stream)), stream[:40], stream[40:]},
			conns:  1},
		{name: "interim 100 Continue",
			answer: []string{"HTTP/1.1 100 Continue\r\n\r\n" + sseHead + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(stream)) + stream},
			conns:  1},
		{name: "connection close",
			answer: []string{sseHead + "Connection: close\r\n\r\n", stream, "<close>"},
			conns:  2},
		{name: "HTTP/1.0 body to EOF",
			answer: []string{"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + stream, "<close>"},
			conns:  2},
		{name: "bad chunk size", class: report.ErrStreamBroken,
			answer: []string{sseHead + "Transfer-Encoding: chunked\r\n\r\n", "zz\r\n" + stream + "\r\n"},
			conns:  2},
		{name: "chunk without CRLF", class: report.ErrStreamBroken,
			answer: []string{sseHead + "Transfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%sXY", len(roleChunk), roleChunk), helloChunk},
			conns:  2},
		{name: "truncated chunked body", class: report.ErrStreamBroken,
			answer: []string{sseHead + "Transfer-Encoding: chunked\r\n\r\n", fmt.Sprintf("%x\r\n%s", len(roleChunk+helloChunk)+10, roleChunk+helloChunk), "<close>"},
			conns:  2},
		{name: "malformed status line", class: report.ErrConnect,
			answer: []string{"HTTP/1.1 2000 OK\r\n\r\n"},
			conns:  2},
		{name: "unsupported transfer encoding", class: report.ErrConnect,
			answer: []string{sseHead + "Transfer-Encoding: gzip\r\n\r\n"},
			conns:  2},
		{name: "HTTP error status", class: report.ErrHTTP5xx,
			answer: []string{"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 30\r\n\r\n" + `{"error":{"message":"full"}}  `},
			conns:  1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newRawServer(t, tc.answer, tc.answer)
			c := newClient(t, srv.url(), EndpointChat, time.Minute)
			if c.h1 == nil {
				t.Fatal("plain-HTTP target does not use the direct client")
			}
			for i := range 2 {
				res := c.Do(context.Background(), Request{Index: i, Prompt: "x"}, time.Now(), time.Now())
				if res.ErrorClass != tc.class {
					t.Fatalf("request %d: class %q (%s), want %q", i, res.ErrorClass, res.Error, tc.class)
				}
				if tc.class != "" {
					continue
				}
				if res.OutputTokens != 4 || res.PromptTokens != 7 || len(res.ChunkOffsets) != 2 || res.Model != "served-m" {
					t.Errorf("request %d: tokens %d/%d, chunks %v, model %q", i, res.PromptTokens, res.OutputTokens, res.ChunkOffsets, res.Model)
				}
			}
			if got := srv.conns.Load(); got != tc.conns {
				t.Errorf("connections = %d, want %d", got, tc.conns)
			}
			srv.mu.Lock()
			defer srv.mu.Unlock()
			if len(srv.reqs) == 0 || srv.reqs[0] != "POST /v1/chat/completions Bearer sk-test text/event-stream" {
				t.Errorf("requests seen: %q", srv.reqs)
			}
		})
	}
}

// A server that closes an idle kept-alive connection: the next request
// goes out again on a new connection instead of failing.
func TestH1RetriesOnServerClosedIdle(t *testing.T) {
	stream := roleChunk + helloChunk + worldChunk + usageChunk + done
	ans := []string{sseHead + fmt.Sprintf("Content-Length: %d\r\n\r\n", len(stream)) + stream}
	// The first connection answers once and closes without a Connection
	// header; the client has already pooled it.
	srv := newRawServer(t, append(ans, "<close>"), ans)
	c := newClient(t, srv.url(), EndpointChat, time.Minute)
	for i := range 2 {
		res := c.Do(context.Background(), Request{Index: i, Prompt: "x"}, time.Now(), time.Now())
		if !res.OK() {
			t.Fatalf("request %d: %s %s", i, res.ErrorClass, res.Error)
		}
		if i == 0 {
			await(t, srv.closed, "close of the first connection") // the pooled connection is closed before it is reused
		}
	}
	if got := srv.conns.Load(); got != 2 {
		t.Errorf("connections = %d, want 2", got)
	}
}

// Sequential requests to a net/http server share one connection, and a
// cancelled run releases a request blocked in a read at once.
func TestH1ReuseAndCancel(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, roleChunk)
		w.(http.Flusher).Flush()
		io.WriteString(w, helloChunk+worldChunk+usageChunk+done)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	c := newClient(t, srv.URL, EndpointCompletions, time.Minute)
	for i := range 5 {
		if res := c.Do(context.Background(), Request{Index: i, Prompt: "x"}, time.Now(), time.Now()); !res.OK() {
			t.Fatalf("request %d: %s %s", i, res.ErrorClass, res.Error)
		}
	}
	if got := conns.Load(); got != 1 {
		t.Errorf("connections for 5 sequential requests = %d, want 1", got)
	}

	// A stalled stream: cancelling the run, once the server stalls, ends
	// the blocked read (else the minute's --timeout would, as a timeout).
	ss, _, stalled := stallingSSEServer(t, roleChunk, "<stall>")
	c = newClient(t, ss.URL, EndpointChat, time.Minute)
	res := c.Do(cancelOnStall(t, stalled), Request{Prompt: "x"}, time.Now(), time.Now())
	if !res.Interrupted() {
		t.Fatalf("class=%q err=%s, want %q", res.ErrorClass, res.Error, report.ErrInterrupted)
	}

	// --timeout bounds the whole request.
	c = newClient(t, ss.URL, EndpointChat, 50*time.Millisecond)
	res = c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
	if res.ErrorClass != report.ErrTimeout {
		t.Fatalf("class %q (%s), want timeout", res.ErrorClass, res.Error)
	}
}

// With kernel receive timestamps, an event that waited in the socket is
// stamped when it arrived, before the late read; with read-return times it
// is stamped after the read started. Linux only (elsewhere both fall back).
func TestH1ArrivalTimestamps(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("kernel receive timestamps are implemented on Linux only")
	}
	for _, tc := range []struct {
		name   string
		rx     bool
		kernel bool
	}{
		{"kernel receive time", true, true},
		{"read return time", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The body is written only once the head has been read, and
			// read only once it has all been written.
			answer := append([]string{sseHead + "Transfer-Encoding: chunked\r\n\r\n", "<wait>"}, chunked(helloChunk, worldChunk, done)...)
			answers := make([][]string, 1000)
			for i := range answers {
				answers[i] = answer
			}
			srv := newRawServer(t, answers...)
			p := newH1Pool(srv.ln.Addr().String(), srv.ln.Addr().String(), 4)
			p.rx = tc.rx
			// The kernel turns receive timestamping on in the background
			// when the first socket asks for it (rxstamp's package
			// comment): exchanges go on until one is stamped, however long
			// that takes on a busy machine. The deadline only stops a
			// broken test from hanging.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			rounds := 0
			testenv.Eventually(ctx, t, time.Millisecond, "an exchange with the expected kind of timestamp", func() (bool, string) {
				if rounds == len(answers) {
					t.Fatalf("no kernel timestamp after %d exchanges", rounds)
				}
				rounds++
				resp, err := p.roundTrip(context.Background(), "/v1/chat/completions", nil, []byte("{}"), time.Now().Add(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				srv.proceed <- struct{}{}
				await(t, srv.answered, "answer written")
				readStart := time.Now()
				rd := NewReader(resp.body, 0, nil)
				ev, err := rd.Next()
				if err != nil {
					t.Fatal(err)
				}
				kernel := resp.body.Kernel()
				_, _ = io.Copy(io.Discard, resp.body)
				resp.body.Close()
				if tc.kernel && !kernel {
					return false, fmt.Sprintf("%d exchanges, none with a kernel timestamp", rounds)
				}
				if kernel != tc.kernel {
					t.Errorf("Kernel() = %v, want %v", kernel, tc.kernel)
				}
				if before := ev.At.Before(readStart); before != tc.kernel {
					t.Errorf("first event at %v, the read started at %v: before = %v, want %v",
						ev.At.Format(time.StampNano), readStart.Format(time.StampNano), before, tc.kernel)
				}
				return true, ""
			})
		})
	}
}
