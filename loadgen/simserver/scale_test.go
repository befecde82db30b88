package simserver

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestManyConcurrentStreams holds thousands of streams open at once
// against one scheduler goroutine (fewer under the race detector, which
// slows everything tenfold).
func TestManyConcurrentStreams(t *testing.T) {
	streams := 5000
	if raceEnabled {
		streams = 500
	}
	if testing.Short() {
		streams = 200
	}
	const tokens = 8
	s, url := startServer(t, Config{Seed: 1, DecodeBase: 20 * time.Millisecond, DecodePerSeq: time.Microsecond, MaxBatch: 2048, TokensPerChunk: 1, RoleChunk: true})
	tr := &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	start := time.Now()
	for range streams {
		wg.Go(func() {
			resp, err := client.Post(url+"/v1/completions", "application/json",
				stringsReader(fmt.Sprintf(`{"model":"gpulens-sim","prompt":"x","max_tokens":%d,"ignore_eos":true,"stream":true}`, tokens)))
			if err != nil {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, err)
				return
			}
			defer resp.Body.Close()
			n, err := countStreamTokens(resp)
			if err != nil || n != tokens {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("%d tokens, err %v", n, err))
				return
			}
			ok.Add(1)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if failed.Load() > 0 {
		t.Fatalf("%d of %d streams failed; first: %v", failed.Load(), streams, firstErr.Load())
	}
	mfs := scrape(t, url)
	if got := counterValue(t, mfs, "vllm:generation_tokens_total", "model_name", "gpulens-sim"); got != float64(streams*tokens) {
		t.Errorf("generation tokens %v, want %d", got, streams*tokens)
	}
	t.Logf("%d concurrent streams × %d tokens in %v", ok.Load(), tokens, elapsed)
	_ = s
}
