package simserver

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

type event struct {
	at    time.Time
	delta int
}

// TestManyConcurrentStreams holds thousands of streams open at once
// against one scheduler goroutine (fewer under the race detector, which
// slows everything tenfold). The scheduler starts only once every stream
// is open and queued, so that all of them are open at the same time and
// stream at once however long connecting them takes.
func TestManyConcurrentStreams(t *testing.T) {
	// Serial: a thousand streams on the wall clock; neighbours would stretch them.
	streams := 5000
	if raceEnabled {
		streams = 500
	}
	if testing.Short() {
		streams = 200
	}
	const tokens = 8
	const itl = 20 * time.Millisecond
	s, url, run := startGatedServer(t, Config{Seed: 1, FixedTTFT: 50 * time.Millisecond, FixedITL: itl, RoleChunk: true})
	tr := &http.Transport{MaxIdleConnsPerHost: streams, DisableCompression: true}
	defer tr.CloseIdleConnections()
	// The timeout only stops a broken test from hanging.
	client := &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	var mu sync.Mutex
	var events []event // +1 when a stream's headers arrive, −1 when it ends
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
			opened := time.Now()
			n, err := countStreamTokens(resp)
			mu.Lock()
			events = append(events, event{opened, 1}, event{time.Now(), -1})
			mu.Unlock()
			if err != nil || n != tokens {
				failed.Add(1)
				firstErr.CompareAndSwap(nil, fmt.Errorf("%d tokens, err %v", n, err))
				return
			}
			ok.Add(1)
		})
	}
	// Every stream is open (its handler sent the headers and queued it)
	// before the first token of any: the server holds them all at once.
	waitQueued(t, s, streams)
	connected := time.Since(start)
	run()
	wg.Wait()
	elapsed := time.Since(start)
	if failed.Load() > 0 {
		t.Fatalf("%d of %d streams failed; first: %v", failed.Load(), streams, firstErr.Load())
	}
	mfs := scrape(t, url)
	if got := counterValue(t, mfs, "vllm:generation_tokens_total", "model_name", "gpulens-sim"); got != float64(streams*tokens) {
		t.Errorf("generation tokens %v, want %d", got, streams*tokens)
	}
	// And the clients saw it so: no stream ended before the last opened.
	slices.SortFunc(events, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return b.delta - a.delta // an open at the same instant counts first
	})
	open, peak := 0, 0
	for _, e := range events {
		open += e.delta
		peak = max(peak, open)
	}
	if peak != streams {
		t.Errorf("at most %d of %d streams were open at once, want all", peak, streams)
	}
	itlHist := mfs["vllm:inter_token_latency_seconds"].GetMetric()[0].GetHistogram()
	if n := itlHist.GetSampleCount(); n != uint64(streams*(tokens-1)) {
		t.Fatalf("%d inter-token latencies observed, want %d", n, streams*(tokens-1))
	}
	meanITL := time.Duration(itlHist.GetSampleSum() / float64(itlHist.GetSampleCount()) * float64(time.Second))
	t.Logf("%d streams connected in %v, %d × %d tokens in %v, %d open at once, server-side mean ITL %v (configured %v)",
		streams, connected, ok.Load(), tokens, elapsed, peak, meanITL, itl)
	// The pace is a measurement, logged above (≈ 20.1 ms on an idle
	// 2-core machine), not asserted: CPU contention slows it. The
	// schedule is never ahead of the model: each stream's 7 gaps span at
	// least 6 × 20 ms (a late first token can shorten the gap after it by
	// up to one ITL, never more), so the mean is at least 6/7 × 20 ms.
	if meanITL < itl*6/7 {
		t.Errorf("server-side mean ITL %v, faster than the configured %v allows", meanITL, itl)
	}
}
