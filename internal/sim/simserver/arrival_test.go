package simserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Served through Listener and ConnContext, a request's arrival is the
// kernel's receive time of its bytes: a request whose handler starts late
// (here: a wrapper sleeps 100 ms first) is stamped when it arrived, not
// when it was served. Without them it is stamped when the handler started.
func TestArrivalIsTheKernelReceiveTime(t *testing.T) {
	// Serial: it compares arrival stamps with wall-clock delays.
	if runtime.GOOS != "linux" {
		t.Skip("kernel receive timestamps are implemented on Linux only")
	}
	const delay = 100 * time.Millisecond
	for _, tc := range []struct {
		name   string
		kernel bool
	}{{"kernel receive time", true}, {"handler start", false}} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(Config{FixedTTFT: time.Millisecond, FixedITL: time.Millisecond, TokensPerChunk: 1, Seed: 1}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go s.Run(ctx)
			defer s.Close()
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			// entered and served: when the wrapper started, and when it
			// handed the request on after its sleep (one request at a time).
			var entered, served atomic.Int64
			late := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				entered.Store(time.Now().UnixNano())
				time.Sleep(delay) // not a wait: the request must wait in the socket this long
				served.Store(time.Now().UnixNano())
				s.Handler().ServeHTTP(w, r)
			})
			srv := &http.Server{Handler: late}
			if tc.kernel {
				srv.ConnContext = ConnContext
				ln = Listener(ln)
			}
			go srv.Serve(ln)
			defer srv.Close()

			cl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			body := `{"model":"` + DefaultModel + `","prompt":"hi","max_tokens":2}`
			// The first request opens the connection and lets the kernel
			// turn receive timestamps on (internal/rxstamp's comment).
			for round := 0; round < 2; round++ {
				sent := time.Now()
				resp, err := cl.Post("http://"+ln.Addr().String()+"/v1/completions", "application/json", strings.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("status %s", resp.Status)
				}
				ns, err := strconv.ParseInt(resp.Header.Get("X-Sim-Arrival"), 10, 64)
				if err != nil {
					t.Fatalf("X-Sim-Arrival %q: %v", resp.Header.Get("X-Sim-Arrival"), err)
				}
				if round == 0 {
					continue
				}
				// Causal either way, whatever the speed of the machine: the
				// kernel stamps the bytes before the wrapper starts on them,
				// a handler-start stamp comes after the wrapper's sleep.
				if ns < sent.UnixNano() {
					t.Errorf("arrival %v before the request was sent", time.Duration(sent.UnixNano()-ns))
				}
				if tc.kernel && ns > entered.Load() {
					t.Errorf("arrival %v after the wrapper started on the request; want the kernel's receive time, before it",
						time.Duration(ns-entered.Load()))
				}
				if !tc.kernel && ns < served.Load() {
					t.Errorf("arrival %v before the simulator's handler started (after a %v sleep); want the handler's start",
						time.Duration(served.Load()-ns), delay)
				}
			}
		})
	}
}
