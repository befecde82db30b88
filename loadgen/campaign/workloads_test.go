package campaign

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/loadgen/client"
	"github.com/gpulens/gpulens/loadgen/observe"
	"github.com/gpulens/gpulens/loadgen/report"
	"github.com/gpulens/gpulens/loadgen/runner"
	"github.com/gpulens/gpulens/loadgen/workload"
)

func TestPrepareWorkloads(t *testing.T) {
	ms := time.Millisecond
	tr := &workload.Trace{Name: "t.jsonl", Format: workload.TraceMooncake, Speedup: 1,
		Requests: []workload.TraceRequest{{Arrival: 0, InputTokens: 1, OutputTokens: 1}, {Arrival: 500 * ms, InputTokens: 1, OutputTokens: 1}}}
	base := func() Options {
		return Options{Client: client.Config{BaseURL: "http://127.0.0.1:1/v1", Endpoint: "chat", Model: "m", Timeout: time.Second},
			Prompts: report.PromptsReuse, Run: runner.Config{Requests: 2}, Prices: report.CostSettings{GPUs: 1}}
	}
	for _, tc := range []struct {
		name   string
		mode   string
		change func(*Options)
		check  func(*Options) string
		want   string
	}{
		{"trace in open loop sends at its times", report.ModeOpen, func(o *Options) { o.Workload.Trace = tr }, func(o *Options) string {
			if o.Run.Schedule.Arrival != runner.Trace || !slices.Equal(o.Run.Schedule.Offsets, []time.Duration{0, 500 * ms}) {
				return "schedule not the trace's"
			}
			return ""
		}, ""},
		{"trace in closed loop: lengths only", report.ModeClosed, func(o *Options) { o.Workload.Trace = tr }, func(o *Options) string {
			if o.Run.Schedule.Offsets != nil {
				return "closed loop got offsets"
			}
			return ""
		}, ""},
		{"turns reach the runner", report.ModeClosed, func(o *Options) { o.Workload.Turns = 3 }, func(o *Options) string {
			if o.Run.Turns != 3 {
				return "runner turns not set"
			}
			return ""
		}, ""},
		{"turns disagree", report.ModeClosed, func(o *Options) { o.Workload.Turns, o.Run.Turns = 3, 2 }, nil, "Turns: the runner's 2 turns differ from the workload's 3"},
		{"runner turns without conversations", report.ModeClosed, func(o *Options) { o.Run.Turns = 2 }, nil, "Turns 2: the workload makes no conversations"},
		{"two prompt sources", report.ModeClosed, func(o *Options) { o.Workload.Trace, o.Workload.Turns = tr, 2 }, nil, "Trace and Turns cannot be combined"},
		{"bad server metrics", report.ModeClosed, func(o *Options) { o.ServerMetrics = &observe.Config{URL: "h:9/metrics"} }, nil, `ServerMetricsURL "h:9/metrics"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := base()
			tc.change(&o)
			err := prepareWorkloads(&o, tc.mode)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err = %v, want %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if msg := tc.check(&o); msg != "" {
				t.Error(msg)
			}
		})
	}
	// The trace names the dataset of the report.
	o := base()
	o.Workload.Trace, tr.SHA256 = tr, "abc"
	c, err := New(Plan{Mode: report.ModeOpen, Levels: []float64{2}, Repeats: 1}, o)
	if err != nil {
		t.Fatal(err)
	}
	if m := c.Metadata(); m.Dataset != "t.jsonl" || m.DatasetSHA256 != "abc" {
		t.Errorf("metadata dataset %q %q", m.Dataset, m.DatasetSHA256)
	}
	ts, mt := c.workloadSettings(c.runConfig(2))
	if ts != (report.TraceSettings{File: "t.jsonl", Format: "mooncake", Speedup: 1, Requests: 2, ArrivalTimes: true}) || mt != (report.MultiTurnSettings{}) {
		t.Errorf("settings %+v %+v", ts, mt)
	}
}
