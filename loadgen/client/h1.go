package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/gpulens/gpulens/internal/rxstamp"
)

// h1Pool sends plain-HTTP/1.1 requests to one host and reads the answers on
// the caller's goroutine. net/http's Transport runs a read and a write
// goroutine per connection and hands every request and response between
// them and the caller through channels: at thousands of short requests per
// second those hand-offs, their wake-ups and the per-request header maps
// were a large share of the load generator's CPU. Used only for http://
// targets without a proxy; everything else goes through net/http.
type h1Pool struct {
	addr    string // host:port to dial
	host    string // Host header
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	maxIdle int
	rx      bool // read with kernel receive timestamps (internal/rxstamp)

	mu   sync.Mutex
	idle []*h1Conn
}

type h1Conn struct {
	nc  net.Conn
	rx  *rxstamp.Conn // nc, when it records arrivals; else nil
	br  *bufio.Reader
	req []byte // request buffer, reused
}

func newH1Pool(addr, host string, maxIdle int) *h1Pool {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	return &h1Pool{addr: addr, host: host, dial: d.DialContext, maxIdle: maxIdle}
}

func (p *h1Pool) get() *h1Conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		return c
	}
	return nil
}

func (p *h1Pool) put(c *h1Conn) {
	_ = c.nc.SetDeadline(time.Time{})
	p.mu.Lock()
	if len(p.idle) < p.maxIdle {
		p.idle = append(p.idle, c)
		c = nil
	}
	p.mu.Unlock()
	if c != nil {
		c.nc.Close()
	}
}

// h1Response is a response whose body is read from the connection.
type h1Response struct {
	status      int
	contentType string
	body        *h1Body
}

// errBadResponse marks a response that is not valid HTTP/1.x.
var errBadResponse = errors.New("malformed HTTP response")

// roundTrip writes the request (path, extra header lines, body) and reads
// the response head. The connection's deadline is deadline; cancelling ctx
// makes every blocked read or write return at once. A reused connection
// that the server had closed while idle (EOF before any byte of the answer)
// is replaced by a new one once, as net/http does.
func (p *h1Pool) roundTrip(ctx context.Context, path string, headers, body []byte, deadline time.Time) (*h1Response, error) {
	for attempt := 0; ; attempt++ {
		c := p.get()
		reused := c != nil
		if c == nil {
			dctx, cancel := context.WithDeadline(ctx, deadline)
			nc, err := p.dial(dctx, "tcp", p.addr)
			cancel()
			if err != nil {
				return nil, err
			}
			c = &h1Conn{nc: nc}
			if p.rx {
				c.rx = rxstamp.WrapStream(nc)
				c.nc = c.rx
			}
			c.br = bufio.NewReaderSize(c.nc, 16<<10)
		}
		resp, err := p.send(ctx, c, path, headers, body, deadline)
		if err == nil {
			return resp, nil
		}
		c.nc.Close()
		if reused && attempt == 0 && ctx.Err() == nil && errors.Is(err, errIdleClosed) {
			continue
		}
		return nil, err
	}
}

// errIdleClosed: the connection ended before any byte of the answer.
var errIdleClosed = errors.New("server closed the connection before answering")

func (p *h1Pool) send(ctx context.Context, c *h1Conn, path string, headers, body []byte, deadline time.Time) (*h1Response, error) {
	if err := c.nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	b := c.req[:0]
	b = append(b, "POST "...)
	b = append(b, path...)
	b = append(b, " HTTP/1.1\r\nHost: "...)
	b = append(b, p.host...)
	b = append(b, "\r\nUser-Agent: gpulens-loadgen\r\n"...)
	b = append(b, headers...)
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	b = append(b, body...)
	c.req = b
	body0 := &h1Body{pool: p, c: c}
	if ctx.Done() != nil {
		body0.stop = context.AfterFunc(ctx, func() { _ = c.nc.SetDeadline(time.Unix(1, 0)) })
	}
	resp, err := readHead(c, b, body0)
	if err != nil {
		if body0.stop != nil {
			body0.stop()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, err
	}
	return resp, nil
}

// readHead writes req and reads the status line and headers.
func readHead(c *h1Conn, req []byte, body *h1Body) (*h1Response, error) {
	if _, err := c.nc.Write(req); err != nil {
		if isReset(err) {
			return nil, fmt.Errorf("%w: %v", errIdleClosed, err)
		}
		return nil, err
	}
	resp := &h1Response{body: body}
	for {
		line, err := readLine(c.br)
		if err != nil {
			if (errors.Is(err, io.EOF) || isReset(err)) && len(line) == 0 {
				return nil, fmt.Errorf("%w: %v", errIdleClosed, err)
			}
			return nil, fmt.Errorf("reading the response status line: %w", err)
		}
		// HTTP/1.x NNN reason
		if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
			return nil, fmt.Errorf("%w: status line %q", errBadResponse, line)
		}
		code, err := strconv.Atoi(string(line[9:12]))
		if err != nil || code < 100 || (len(line) > 12 && line[12] != ' ') {
			return nil, fmt.Errorf("%w: status line %q", errBadResponse, line)
		}
		http10 := line[7] == '0'
		resp.status = code
		body.length = -1
		body.keep = !http10
		if err := readHeaders(c.br, resp, body); err != nil {
			return nil, err
		}
		if code >= 200 {
			if code == 204 || code == 304 {
				body.length = 0
				body.chunked = false
			}
			if body.length < 0 && !body.chunked {
				body.keep = false // read to EOF
			}
			return resp, nil
		}
		// 1xx: another head follows.
	}
}

func readHeaders(br *bufio.Reader, resp *h1Response, body *h1Body) error {
	for {
		line, err := readLine(br)
		if err != nil {
			return fmt.Errorf("reading the response headers: %w", err)
		}
		if len(line) == 0 {
			return nil
		}
		i := bytes.IndexByte(line, ':')
		if i <= 0 {
			return fmt.Errorf("%w: header line %q", errBadResponse, line)
		}
		name, val := line[:i], bytes.TrimSpace(line[i+1:])
		switch {
		case asciiEqualFold(name, "content-type"):
			resp.contentType = string(val)
		case asciiEqualFold(name, "content-length"):
			n, err := strconv.ParseInt(string(val), 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: Content-Length %q", errBadResponse, val)
			}
			body.length = n
		case asciiEqualFold(name, "transfer-encoding"):
			if !asciiEqualFold(val, "chunked") {
				return fmt.Errorf("%w: unsupported Transfer-Encoding %q", errBadResponse, val)
			}
			body.chunked = true
		case asciiEqualFold(name, "connection"):
			for tok := range bytes.SplitSeq(val, []byte(",")) {
				if asciiEqualFold(bytes.TrimSpace(tok), "close") {
					body.keep = false
				}
			}
		}
	}
}

// readLine returns one line without its CRLF or LF; it aliases br's buffer.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if errors.Is(err, bufio.ErrBufferFull) {
		return nil, fmt.Errorf("%w: line longer than %d bytes", errBadResponse, br.Size())
	}
	if err != nil {
		return line, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && (errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
}

// h1Body reads a response body (chunked, Content-Length or to EOF). Close
// returns the connection to the pool when the body was read to its end and
// the connection may be kept, and closes it otherwise.
type h1Body struct {
	pool    *h1Pool
	c       *h1Conn
	stop    func() bool // unregisters the cancellation hook
	chunked bool
	length  int64 // Content-Length, or -1
	keep    bool
	left    int64 // bytes left in the current chunk
	crlf    bool  // the CRLF after a chunk's data is still to be read
	done    bool  // the body's end was read
	err     error
	closed  bool
}

func (b *h1Body) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if b.done {
		return 0, io.EOF
	}
	n, err := b.read(p)
	if err != nil && !(errors.Is(err, io.EOF) && b.done) {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		b.err = err
	}
	return n, err
}

func (b *h1Body) read(p []byte) (int, error) {
	br := b.c.br
	switch {
	case b.chunked:
		if b.crlf {
			line, err := readLine(br)
			if err != nil {
				return 0, err
			}
			if len(line) != 0 {
				return 0, fmt.Errorf("%w: chunk not followed by CRLF", errBadResponse)
			}
			b.crlf = false
		}
		if b.left == 0 {
			line, err := readLine(br)
			if err != nil {
				return 0, err
			}
			if i := bytes.IndexByte(line, ';'); i >= 0 {
				line = line[:i]
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(line)), 16, 64)
			if err != nil || size < 0 {
				return 0, fmt.Errorf("%w: chunk size %q", errBadResponse, line)
			}
			if size == 0 {
				for { // trailers up to the blank line
					t, err := readLine(br)
					if err != nil {
						return 0, err
					}
					if len(t) == 0 {
						break
					}
				}
				b.done = true
				return 0, io.EOF
			}
			b.left = size
		}
		n, err := br.Read(p[:min(int64(len(p)), b.left)])
		b.left -= int64(n)
		if b.left == 0 && err == nil {
			// The chunk's CRLF: skip it now when it is buffered, else read it
			// on the next call (waiting for it here would delay the data).
			b.crlf = true
			if crlf, _ := br.Peek(min(2, br.Buffered())); len(crlf) == 2 {
				if crlf[0] != '\r' || crlf[1] != '\n' {
					return n, fmt.Errorf("%w: chunk not followed by CRLF", errBadResponse)
				}
				_, _ = br.Discard(2)
				b.crlf = false
			}
		}
		return n, err
	case b.length >= 0:
		if b.length == 0 {
			b.done = true
			return 0, io.EOF
		}
		n, err := br.Read(p[:min(int64(len(p)), b.length)])
		b.length -= int64(n)
		if b.length == 0 && err == nil {
			b.done = true
		}
		return n, err
	default:
		n, err := br.Read(p)
		if err == io.EOF {
			b.done = true
		}
		return n, err
	}
}

// LastArrival is when the newest byte read from the connection arrived
// (zero when the connection does not record arrivals): see sse.ArrivalSource.
func (b *h1Body) LastArrival() time.Time {
	if b.c.rx == nil {
		return time.Time{}
	}
	return b.c.rx.LastArrival()
}

// Kernel reports whether the newest read carried a kernel timestamp.
func (b *h1Body) Kernel() bool { return b.c.rx != nil && b.c.rx.Kernel() }

// Close releases the connection.
func (b *h1Body) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	if b.stop != nil && !b.stop() {
		b.keep = false // the run was cancelled: the deadline is in the past
	}
	if b.done && b.err == nil && b.keep {
		b.pool.put(b.c)
		return nil
	}
	return b.c.nc.Close()
}
