package client

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
)

// An https target goes through net/http and TLS; with kernel timestamps its
// token times still come from the receive timestamps of the TCP connection
// under TLS (Linux), and --timestamps read turns that off.
func TestHTTPSKernelTimestamps(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		io.WriteString(w, roleChunk)
		f.Flush()
		time.Sleep(40 * time.Millisecond) // not a wait: the time to the first token under test
		io.WriteString(w, helloChunk)
		f.Flush()
		io.WriteString(w, worldChunk+usageChunk+done)
		f.Flush()
	}))
	defer srv.Close()
	roots := x509.NewCertPool()
	roots.AddCert(srv.Certificate())
	for _, tc := range []struct {
		name   string
		read   bool
		kernel bool
	}{
		{"kernel receive time", false, runtime.GOOS == "linux"},
		{"read return time", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(Config{BaseURL: srv.URL + "/v1", Endpoint: EndpointChat, Model: "m", Timeout: 10 * time.Second, MaxConns: 1,
				ReadTimestamps: tc.read, TLS: &tls.Config{RootCAs: roots}})
			if err != nil {
				t.Fatal(err)
			}
			if c.h1 != nil {
				t.Fatal("an https target must go through net/http")
			}
			// The second request reuses the connection, after the kernel
			// has turned receive timestamping on (internal/rxstamp).
			for round := 0; round < 2; round++ {
				res := c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
				if !res.OK() {
					t.Fatalf("round %d: %s: %s", round, res.ErrorClass, res.Error)
				}
				if round == 0 {
					continue
				}
				if res.KernelTimestamps != tc.kernel {
					t.Errorf("KernelTimestamps = %v, want %v", res.KernelTimestamps, tc.kernel)
				}
				if ttft := res.FirstToken - res.Sent; ttft < 40*time.Millisecond {
					t.Errorf("TTFT %v, the server waited 40 ms", ttft)
				}
				if res.FirstByte < res.Sent || res.FirstToken < res.FirstByte || res.End < res.FirstToken {
					t.Errorf("times out of order: sent %v first byte %v first token %v end %v", res.Sent, res.FirstByte, res.FirstToken, res.End)
				}
				if res.OutputTokens != 4 || len(res.ChunkOffsets) != 2 {
					t.Errorf("%d tokens in %d chunks, want 4 in 2", res.OutputTokens, len(res.ChunkOffsets))
				}
			}
		})
	}
}
