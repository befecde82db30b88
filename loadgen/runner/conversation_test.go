package runner

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/report"
)

// turnDoer answers at once, with a record whose answer "ends" latency
// after it was sent (not waited for: the runner only reads the record),
// and fails the request indexes in fail.
type turnDoer struct {
	latency time.Duration
	fail    map[int]bool
	mu      sync.Mutex
	calls   []int
}

func (d *turnDoer) Do(_ context.Context, r client.Request, start, intended time.Time) report.Record {
	d.mu.Lock()
	d.calls = append(d.calls, r.Index)
	d.mu.Unlock()
	sent := time.Since(start)
	rec := report.Record{Index: r.Index, Intended: intended.Sub(start), Sent: sent, FirstToken: sent + d.latency/2, End: sent + d.latency, Status: 200}
	if d.fail[r.Index] {
		rec.Status, rec.ErrorClass, rec.FirstToken = 500, report.ErrHTTP5xx, 0
	}
	return rec
}

type indexRequester struct{}

func (indexRequester) Request(i int) client.Request { return client.Request{Index: i} }

// conversations groups records by conversation, turns in order.
func conversations(t *testing.T, recs []report.Record, turns int) map[int][]report.Record {
	t.Helper()
	out := map[int][]report.Record{}
	for _, r := range recs {
		if r.Turn < 1 || r.Turn > turns || r.Index != r.Conversation*turns+r.Turn-1 {
			t.Errorf("record %d: conversation %d turn %d", r.Index, r.Conversation, r.Turn)
		}
		out[r.Conversation] = append(out[r.Conversation], r)
	}
	for _, rs := range out {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Turn < rs[j].Turn })
	}
	return out
}

func TestConversationsClosedLoop(t *testing.T) {
	think := 5 * time.Millisecond
	d := &turnDoer{latency: 2 * time.Millisecond, fail: map[int]bool{4: true}} // conversation 1, turn 2
	out, err := Run(context.Background(), Config{Mode: report.ModeClosed, Concurrency: 2, Requests: 9, Turns: 3, ThinkTime: think}, d, indexRequester{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != 9 || out.MaxInFlight > 2 {
		t.Fatalf("%d results, max in flight %d; want 9, at most 2", len(out.Results), out.MaxInFlight)
	}
	convs := conversations(t, out.Results, 3)
	for c, rs := range convs {
		for k, r := range rs {
			if r.Turn != k+1 {
				t.Errorf("conversation %d: turn %d where %d was expected (turns %v)", c, r.Turn, k+1, rs)
				break
			}
			if k == 0 {
				continue
			}
			// The next turn is intended exactly the think time after the
			// previous answer ended, and is not sent before.
			if want := rs[k-1].End + think; r.Intended != want || r.Sent < r.Intended {
				t.Errorf("conversation %d turn %d: intended %v, sent %v; want intended %v", c, r.Turn, r.Intended, r.Sent, want)
			}
		}
	}
	// The failed turn ended its conversation.
	if rs := convs[1]; len(rs) != 2 || rs[1].OK() {
		t.Errorf("conversation 1 has %d turns, the last OK=%v; want 2, failed", len(rs), rs[len(rs)-1].OK())
	}
	if slices.Contains(d.calls, 5) {
		t.Error("turn 3 of conversation 1 was sent after its turn 2 failed")
	}
}

func TestConversationsOpenLoop(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		shard   Shard
		indexes []int
		starts  map[int]time.Duration // first turns' intended times
	}{
		// 50 conversations/s: they start 20 ms apart.
		{"whole schedule", Shard{Index: 0, Count: 1}, []int{0, 1, 2, 3, 4, 5}, map[int]time.Duration{0: 0, 1: 20 * ms, 2: 40 * ms}},
		// Worker 1 of 2 owns conversations 1 and 3, whole.
		{"shard 1/2", Shard{Index: 1, Count: 2}, []int{2, 3, 6, 7}, map[int]time.Duration{1: 20 * ms, 3: 60 * ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &turnDoer{latency: ms}
			requests := len(tc.indexes)
			out, err := Run(context.Background(), Config{Mode: report.ModeOpen, Schedule: ScheduleConfig{Rate: 50, Arrival: Constant},
				Requests: requests, Turns: 2, Shard: tc.shard}, d, indexRequester{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for _, r := range out.Results {
				got = append(got, r.Index)
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.indexes) {
				t.Fatalf("indexes %v, want %v", got, tc.indexes)
			}
			for c, rs := range conversations(t, out.Results, 2) {
				if len(rs) != 2 || rs[0].Intended != tc.starts[c] || rs[1].Intended != rs[0].End {
					t.Errorf("conversation %d: %d turns, intended %v then %v; want 2, %v then %v", c, len(rs), rs[0].Intended, rs[len(rs)-1].Intended, tc.starts[c], rs[0].End)
				}
			}
		})
	}
}

func TestConversationsConfig(t *testing.T) {
	for _, c := range []Config{
		{Mode: report.ModeClosed, Concurrency: 1, Requests: 1, Turns: -1},
		{Mode: report.ModeClosed, Concurrency: 1, Requests: 1, Turns: 2, ThinkTime: -time.Second},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "Turns and ThinkTime must not be negative") {
			t.Errorf("%+v: err = %v", c, err)
		}
	}
}
