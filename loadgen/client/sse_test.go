package client

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

type ev struct{ name, data string }

func readAll(t testing.TB, r io.Reader, bufSize int) ([]ev, error) {
	rd := NewReader(r, bufSize, nil)
	var out []ev
	for {
		e, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, ev{string(e.Name), string(e.Data)})
	}
}

func TestReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []ev
	}{
		{"basic", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []ev{{"", `{"a":1}`}, {"", "[DONE]"}}},
		{"crlf", "data: x\r\n\r\ndata: y\r\n\r\n", []ev{{"", "x"}, {"", "y"}}},
		{"lone cr", "data: x\r\rdata: y\r\r", []ev{{"", "x"}, {"", "y"}}},
		{"comments and keepalives", ": ping\n\n:\ndata: x\n: mid\n\n", []ev{{"", "x"}}},
		{"no space after colon", "data:x\n\n", []ev{{"", "x"}}},
		{"two spaces keep one", "data:  x\n\n", []ev{{"", " x"}}},
		{"multi-line data", "data: a\ndata: b\n\n", []ev{{"", "a\nb"}}},
		{"event name", "event: error\ndata: {\"error\":\"boom\"}\n\n", []ev{{"error", `{"error":"boom"}`}}},
		{"unknown fields ignored", "id: 3\nretry: 10\ndata: x\n\n", []ev{{"", "x"}}},
		{"eof without blank line", "data: x\n", []ev{{"", "x"}}},
		{"eof without newline", "data: x", []ev{{"", "x"}}},
		{"empty data field", "data\n\n", []ev{{"", ""}}},
		{"blank lines only", "\n\n\r\n", nil},
		{"long line", "data: " + strings.Repeat("z", 100) + "\n\n", []ev{{"", strings.Repeat("z", 100)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, r := range []io.Reader{strings.NewReader(tc.in), iotest.OneByteReader(strings.NewReader(tc.in)), iotest.HalfReader(strings.NewReader(tc.in))} {
				got, err := readAll(t, r, 16) // tiny buffer forces split lines
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %q, want %q", got, tc.want)
				}
				for i := range got {
					if got[i] != tc.want[i] {
						t.Fatalf("event %d = %q, want %q", i, got[i], tc.want[i])
					}
				}
			}
		})
	}
}

func TestReaderTransportError(t *testing.T) {
	boom := errors.New("connection reset")
	r := io.MultiReader(strings.NewReader("data: x\n\ndata: partial"), iotest.ErrReader(boom))
	got, err := readAll(t, r, 0)
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want %v", err, boom)
	}
	if len(got) != 1 || got[0].data != "x" {
		t.Fatalf("got %q", got)
	}
}

// chunkedReader returns the given pieces one per Read, advancing a fake
// clock by 1 ms per read.
type chunkedReader struct {
	pieces []string
	clock  *time.Time
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.pieces) == 0 {
		return 0, io.EOF
	}
	*c.clock = c.clock.Add(time.Millisecond)
	n := copy(p, c.pieces[0])
	c.pieces[0] = c.pieces[0][n:]
	if c.pieces[0] == "" {
		c.pieces = c.pieces[1:]
	}
	return n, nil
}

func TestReaderTimestamps(t *testing.T) {
	base := time.Unix(1000, 0)
	clock := base
	// Event 1 split across reads 1 and 2; events 2 and 3 coalesced in read 3.
	src := &chunkedReader{clock: &clock, pieces: []string{"data: a", "bc\n\n", "data: d\n\ndata: e\n\n"}}
	rd := NewReader(src, 0, func() time.Time { return clock })
	want := []struct {
		data string
		ms   int
	}{{"abc", 2}, {"d", 3}, {"e", 3}}
	for _, w := range want {
		e, err := rd.Next()
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Data) != w.data || e.At.Sub(base) != time.Duration(w.ms)*time.Millisecond {
			t.Fatalf("event %q at %v, want %q at %dms", e.Data, e.At.Sub(base), w.data, w.ms)
		}
	}
}

func FuzzSSE(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5}}\n\ndata: [DONE]\n\n",
		": keep-alive\r\n\r\ndata: x\r\n\r\n",
		"data: a\rdata: b\r\r",
		"event: error\ndata: {\"error\":{\"message\":\"x\"}}\n\n",
		"data: abc", "data:\n\n\n", "::\n:\r\n",
	} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, in string, split uint8) {
		whole, err := readAll(t, strings.NewReader(in), 0)
		if err != nil {
			t.Fatal(err)
		}
		// Reading the same bytes in small pieces with a tiny buffer must give
		// exactly the same events.
		n := int(split%7) + 1
		pieces := []string{}
		for s := in; s != ""; {
			k := min(n, len(s))
			pieces = append(pieces, s[:k])
			s = s[k:]
		}
		clock := time.Unix(0, 0)
		split2, err := readAll(t, &chunkedReader{pieces: pieces, clock: &clock}, 16)
		if err != nil {
			t.Fatal(err)
		}
		if len(whole) != len(split2) {
			t.Fatalf("%d events whole, %d split", len(whole), len(split2))
		}
		for i := range whole {
			if whole[i] != split2[i] {
				t.Fatalf("event %d differs: %q vs %q", i, whole[i], split2[i])
			}
			if strings.ContainsAny(whole[i].data, "\r") {
				t.Fatalf("event data contains CR: %q", whole[i].data)
			}
		}
	})
}
