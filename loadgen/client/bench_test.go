package client

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

type memTransport struct{ body []byte }

func (m memTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"text/event-stream"}},
		Body: io.NopCloser(bytes.NewReader(m.body)), Request: r}, nil
}

// BenchmarkStreamPerToken measures the client's CPU per streamed token
// (SSE framing, JSON decoding, bookkeeping) for a 256-token vLLM-style
// stream, without network.
func BenchmarkStreamPerToken(b *testing.B) {
	const tokens = 256
	var sb strings.Builder
	sb.WriteString(roleChunk)
	for i := 0; i < tokens; i++ {
		sb.WriteString(`data: {"id":"cmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":" word"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	sb.WriteString(usageChunk + done)
	c, err := New(Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: EndpointChat, Model: "m", Timeout: time.Minute,
		Transport: memTransport{[]byte(sb.String())}})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := 0; i < b.N; i++ {
		res := c.Do(context.Background(), Request{Prompt: "x"}, time.Now(), time.Now())
		if !res.OK() || len(res.ChunkOffsets) != tokens {
			b.Fatalf("bad result: %s", res.Error)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tokens, "ns/token")
	b.ReportMetric((cpuTime()-cpu0).Seconds()*1e6/float64(b.N)/tokens, "cpu-µs/token")
}

// cpuTime is the CPU time (user + system) of the process so far, GC
// included.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
