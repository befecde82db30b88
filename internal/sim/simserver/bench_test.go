package simserver

import (
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkStreamCPUPerToken streams b.N tokens over 64 concurrent streams
// (one token per SSE chunk, 1 ms apart, each chunk flushed) and reports
// the process CPU time per token: the server's scheduler and handlers plus
// a client that only reads and discards the bytes.
func BenchmarkStreamCPUPerToken(b *testing.B) {
	const streams = 64
	_, url := startServer(b, Config{Seed: 1, FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, RoleChunk: true})
	tr := &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	perStream := max(1, b.N/streams)
	body := fmt.Sprintf(`{"model":"gpulens-sim","prompt":"x","max_tokens":%d,"ignore_eos":true,"stream":true,"stream_options":{"include_usage":true}}`, perStream)
	b.ResetTimer()
	var ms0, ms1 runtime.MemStats
	runtime.ReadMemStats(&ms0)
	cpu0 := cpuTime()
	var wg sync.WaitGroup
	for range streams {
		wg.Go(func() {
			resp, err := client.Post(url+"/v1/completions", "application/json", stringsReader(body))
			if err != nil {
				b.Error(err)
				return
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	cpu := cpuTime() - cpu0
	b.StopTimer()
	runtime.ReadMemStats(&ms1)
	tokens := float64(perStream * streams)
	b.ReportMetric(float64(ms1.Mallocs-ms0.Mallocs)/tokens, "allocs/token")
	b.ReportMetric(float64(cpu.Nanoseconds())/tokens, "cpu-ns/token")
	b.ReportMetric(tokens/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkAppendContentChunk is the encoding cost of one streamed chunk.
func BenchmarkAppendContentChunk(b *testing.B) {
	s, err := New(Config{FixedTTFT: time.Millisecond}, nil)
	if err != nil {
		b.Fatal(err)
	}
	r := testRequest(42, 10, 100, -1, time.Unix(1_700_000_000, 0))
	c := chunker{s: s, r: r, o: streamOptions{chat: true, continuous: true}}
	c.prefix = c.appendPrefix(nil)
	buf := make([]byte, 0, 1024)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		buf = c.appendContentChunk(buf[:0], i%99, i%99+1, false, nil, nil)
	}
}
