package gpusim

import (
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestParseStart(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Time
	}{
		{"1767268800", now},
		{" 1767268800 ", now},
		{"1767268800.5", now.Add(500 * time.Millisecond)},
		{"1767268800.000000001", now.Add(time.Nanosecond)},
		{"1767268799.25", now.Add(-750 * time.Millisecond)},
		{"2026-01-01T12:00:00Z", now},
		{"2026-01-01T13:00:00.25+01:00", now.Add(250 * time.Millisecond)},
		{"2026-01-01T12:59:59Z", now.Add(time.Hour - time.Second)},
		{"2025-12-31T12:00:01Z", now.Add(-MaxStartAge + time.Second)},
	} {
		got, err := ParseStart(tc.in, now)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("ParseStart(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ in, msg string }{
		{"", "empty"},
		{"soon", `"soon" is neither Unix seconds`},
		{"1767268800.", "neither Unix seconds"},
		{".5", "neither Unix seconds"},
		{"-5", "not an RFC 3339 time"},
		{"+1767268800", "neither Unix seconds"},
		{"1767268800.1234567890", "neither Unix seconds"},
		{"1767268800.5e3", "neither Unix seconds"},
		{"1e9", "neither Unix seconds"},
		{"2026-01-01 12:00:00", "not an RFC 3339 time"},
		{"2026-01-01T14:00:01Z", "in the future; at most 1h0m0s ahead"},
		{"1767272401", "in the future"},
		{"2025-12-31T11:59:59Z", "ago; at most 24h0m0s"},
		{"0", "ago; at most 24h0m0s"},
	} {
		_, err := ParseStart(tc.in, now)
		if err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("ParseStart(%q) error = %v; want it to contain %q", tc.in, err, tc.msg)
		}
	}
}

// TestSharedStart: two fleets built at different moments with the same
// start read the same sim time and the same values, as the exporter and
// gpulens-verify given the same --sim.start do.
func TestSharedStart(t *testing.T) {
	t.Parallel()
	clk := newTestClock()
	start := epoch.Add(-63 * time.Second)
	_, libA := newFleetOn(t, mustLoad(t, "validate"), 1, clk.Now)
	fa, err := New(mustLoad(t, "validate"), Options{Seed: 1, Start: start, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(2500 * time.Millisecond)
	fb, err := New(mustLoad(t, "validate"), Options{Seed: 1, Start: start, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	if fa.Elapsed() != 65500*time.Millisecond || fb.Elapsed() != fa.Elapsed() {
		t.Errorf("elapsed %v and %v; want 65.5s both", fa.Elapsed(), fb.Elapsed())
	}
	for _, f := range []*Fleet{fa, fb} {
		lib := f.Interface()
		lib.Init()
		procs, r := handle(t, lib, 0).GetComputeRunningProcesses()
		if r != nvml.SUCCESS || len(procs) != 1 || procs[0].Pid != 4101 {
			t.Errorf("processes at 65.5 s = %+v, %v; want workload-1 (4101) alone", procs, r)
		}
		lib.Shutdown()
	}
	// A fleet started now (sim time 2.5 s) is still idle.
	if procs, _ := handle(t, libA, 0).GetComputeRunningProcesses(); len(procs) != 0 {
		t.Errorf("fleet started at the clock's start: processes %+v at 2.5 s; want none", procs)
	}
}
