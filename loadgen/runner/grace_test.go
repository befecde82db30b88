package runner

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/stats"
	"github.com/gpulens/gpulens/loadgen/workload"
)

// hangingServer sends the first content chunk of every answer, then hangs
// until the client goes; arrived receives once per request.
func hangingServer(t *testing.T) (*client.Client, *workload.Workload, <-chan struct{}) {
	t.Helper()
	arrived := make(chan struct{}, 1024)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"delta":{"content":"tok"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	// The request timeout is far beyond the test: only the grace period
	// or a cancel can end these requests.
	cl, err := client.New(client.Config{BaseURL: srv.URL + "/v1", Endpoint: "chat", Model: "m", Timeout: time.Hour, MaxConns: 64})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := workload.ParseLength("in", "fixed:8")
	out, _ := workload.ParseLength("out", "fixed:16")
	return cl, workload.New(workload.Config{Seed: 3, Input: in, Output: out}), arrived
}

// TestGracePeriodBoundsDuration: against a server that never finishes, a
// run with a duration still ends, duration + grace period after its start,
// and every request it sent is counted as failed (cancelled_at_end),
// never dropped.
func TestGracePeriodBoundsDuration(t *testing.T) {
	const (
		duration = 60 * time.Millisecond
		grace    = 90 * time.Millisecond
	)
	sc := ScheduleConfig{Rate: 100, Arrival: Constant}
	for _, tc := range []struct {
		name string
		cfg  Config
		want int // requests sent
	}{
		// Each user sends one request, which hangs past the duration.
		{"closed loop", Config{Mode: report.ModeClosed, Concurrency: 3}, 3},
		// Every scheduled request is sent and hangs.
		{"open loop", Config{Mode: report.ModeOpen, Schedule: sc}, len(Generate(sc, 0, duration))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, wl, _ := hangingServer(t)
			cfg := tc.cfg
			cfg.Duration, cfg.GracePeriod = duration, grace
			out, err := Run(context.Background(), cfg, cl, wl, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := out.End.Sub(out.Start); got < duration+grace {
				t.Errorf("run ended %v after its start, before duration + grace %v", got, duration+grace)
			}
			if len(out.Results) != tc.want || len(out.InFlight) != 0 || out.Canceled != 0 || out.Interrupted {
				t.Fatalf("%d results, %d in flight, %d cancelled, interrupted %v; want %d results", len(out.Results), len(out.InFlight),
					out.Canceled, out.Interrupted, tc.want)
			}
			for _, r := range out.Results {
				if r.ErrorClass != report.ErrCancelledAtEnd {
					t.Fatalf("request %d: class %q (%s), want %s", r.Index, r.ErrorClass, r.Error, report.ErrCancelledAtEnd)
				}
				// Given up at the end of the grace period, not at its last byte.
				if r.End < duration+grace {
					t.Errorf("request %d ended %v after the start, before the end of the grace period", r.Index, r.End)
				}
			}
			s := stats.Summarize(out.Results, stats.SummaryConfig{})
			if s.RequestsFailed != tc.want || s.RequestsCompleted != 0 || s.Errors[report.ErrCancelledAtEnd] != tc.want {
				t.Errorf("summary failed %d completed %d errors %v, want %d cancelled_at_end", s.RequestsFailed, s.RequestsCompleted, s.Errors, tc.want)
			}
		})
	}
}

// TestInterruptKeepsInFlight: Ctrl-C while requests hang returns them in
// InFlight (not dropped, not failures); their records say so, and
// Summarize counts them as interrupted.
func TestInterruptKeepsInFlight(t *testing.T) {
	const users = 3
	cl, wl, arrived := hangingServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for i := 0; i < users; i++ {
			<-arrived
		}
		cancel() // every user's request is hanging
	}()
	out, err := Run(ctx, Config{Mode: report.ModeClosed, Concurrency: users, Duration: time.Hour}, cl, wl, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !out.Interrupted || len(out.Results) != 0 || len(out.InFlight) != users || out.Canceled != users {
		t.Fatalf("interrupted %v, %d results, %d in flight, %d cancelled; want %d in flight", out.Interrupted, len(out.Results),
			len(out.InFlight), out.Canceled, users)
	}
	s := stats.Summarize(append(out.Results, out.InFlight...), stats.SummaryConfig{})
	if s.RequestsInterrupted != users || s.RequestsFailed != 0 || s.RequestsCompleted != 0 || len(s.Errors) != 0 {
		t.Errorf("summary interrupted %d failed %d completed %d errors %v, want %d interrupted only", s.RequestsInterrupted,
			s.RequestsFailed, s.RequestsCompleted, s.Errors, users)
	}
	for _, r := range out.InFlight {
		if !r.Interrupted() || r.Error == "" || r.End < r.Sent {
			t.Errorf("in-flight record: class %q (%s), sent %v, end %v; want %q", r.ErrorClass, r.Error, r.Sent, r.End, report.ErrInterrupted)
		}
	}
}
