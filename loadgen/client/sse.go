// Package sse reads Server-Sent Events streams as sent by OpenAI-compatible
// inference servers, timestamping every event with the moment the read that
// completed it returned, or with when its bytes arrived where the source
// knows that (ArrivalSource).
//
// The reader follows the WHATWG event-stream rules that matter for these
// servers: lines end in LF, CRLF or a lone CR; lines starting with ':' are
// comments (keep-alives); "data:" lines accumulate (joined by LF) until a
// blank line dispatches the event; a single space after the colon is
// dropped; unknown fields are ignored; a pending event at EOF is dispatched.

package client

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"time"
)

// DefaultBufferSize is the size of the read buffer.
const DefaultBufferSize = 16 << 10

// Event is one dispatched event. Data and Name alias the Reader's buffers and
// are valid only until the next call to Next.
type Event struct {
	Name []byte
	Data []byte
	// At is when the read that delivered the event's last byte returned
	// (with an ArrivalSource: when the newest byte read so far arrived).
	At time.Time
}

// ArrivalSource is a source that knows when the bytes it returned arrived,
// for example from the kernel's receive timestamps (internal/rxstamp). A
// Reader reading from one stamps events with LastArrival instead of the
// time its read returned, so that its own scheduling delays stay out of the
// measurement (for bytes read before more arrived: internal/rxstamp).
type ArrivalSource interface {
	io.Reader
	// LastArrival is when the newest byte returned so far arrived; zero
	// when unknown.
	LastArrival() time.Time
}

// timedReader records the time each Read returns, or the source's arrival
// time when it has one.
type timedReader struct {
	r    io.Reader
	src  ArrivalSource // r, when it is one
	now  func() time.Time
	last time.Time
}

func (t *timedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if t.src != nil {
		if at := t.src.LastArrival(); !at.IsZero() {
			t.last = at
			return n, err
		}
	}
	t.last = t.now()
	return n, err
}

// Reader parses an event stream. It is not safe for concurrent use; reuse it
// across responses with Reset to avoid allocations.
type Reader struct {
	tr      timedReader
	br      *bufio.Reader
	long    []byte // accumulates a line longer than the buffer
	data    []byte
	name    []byte
	hasData bool
	pending []byte // remainder of a line after a lone CR
	eof     bool
}

// NewReader returns a Reader reading from r; now is the clock (time.Now
// when nil).
func NewReader(r io.Reader, bufSize int, now func() time.Time) *Reader {
	if now == nil {
		now = time.Now
	}
	if bufSize <= 0 {
		bufSize = DefaultBufferSize
	}
	rd := &Reader{tr: timedReader{r: r, now: now}}
	rd.tr.src, _ = r.(ArrivalSource)
	rd.br = bufio.NewReaderSize(&rd.tr, bufSize)
	return rd
}

// Reset discards all state and reads from r.
func (r *Reader) Reset(src io.Reader) {
	r.tr.r = src
	r.tr.src, _ = src.(ArrivalSource)
	r.tr.last = time.Time{}
	r.br.Reset(&r.tr)
	r.long = r.long[:0]
	r.data = r.data[:0]
	r.name = r.name[:0]
	r.hasData = false
	r.pending = nil
	r.eof = false
}

// LastRead is when the most recent read from the source returned.
func (r *Reader) LastRead() time.Time { return r.tr.last }

// readLine returns the next line without its terminator. At end of input it
// returns the final unterminated line (if any) and then io.EOF.
func (r *Reader) readLine() ([]byte, error) {
	if r.pending != nil {
		line := r.pending
		r.pending = nil
		return r.splitCR(line), nil
	}
	if r.eof {
		return nil, io.EOF
	}
	r.long = r.long[:0]
	for {
		frag, err := r.br.ReadSlice('\n')
		if err == nil {
			var line []byte
			if len(r.long) > 0 {
				r.long = append(r.long, frag...)
				line = r.long
			} else {
				line = frag
			}
			line = line[:len(line)-1]
			if n := len(line); n > 0 && line[n-1] == '\r' {
				line = line[:n-1]
			}
			return r.splitCR(line), nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			r.long = append(r.long, frag...)
			continue
		}
		// EOF or a transport error: return what we have.
		r.long = append(r.long, frag...)
		if len(r.long) > 0 {
			r.eof = true
			if err != io.EOF {
				return nil, err
			}
			line := r.long
			if n := len(line); line[n-1] == '\r' {
				line = line[:n-1]
			}
			return r.splitCR(line), nil
		}
		return nil, err
	}
}

// splitCR handles a lone CR used as a line terminator inside line.
func (r *Reader) splitCR(line []byte) []byte {
	if i := bytes.IndexByte(line, '\r'); i >= 0 {
		r.pending = line[i+1:]
		return line[:i]
	}
	return line
}

// Next returns the next event. It returns io.EOF at a clean end of stream
// (after dispatching any pending event) and the transport error otherwise;
// a stream that ends inside an event with data dispatches it first.
func (r *Reader) Next() (Event, error) {
	r.data = r.data[:0]
	r.name = r.name[:0]
	r.hasData = false
	for {
		line, err := r.readLine()
		if err != nil {
			if r.hasData && errors.Is(err, io.EOF) {
				return Event{Name: r.name, Data: r.data, At: r.tr.last}, nil
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if r.hasData {
				return Event{Name: r.name, Data: r.data, At: r.tr.last}, nil
			}
			r.name = r.name[:0]
			continue
		}
		if line[0] == ':' {
			continue // comment / keep-alive
		}
		field, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			field, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(field) {
		case "data":
			if r.hasData {
				r.data = append(r.data, '\n')
			}
			r.data = append(r.data, value...)
			r.hasData = true
		case "event":
			r.name = append(r.name[:0], value...)
		}
	}
}
