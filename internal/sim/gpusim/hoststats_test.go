package gpusim

import (
	"strings"
	"testing"
	"time"
)

const hostScenario = `
devices:
  - count: 2
    model: h100-sxm5-80gb
host:
  cpus: 48
  pressure:
    cpu: {some: 20}
    io: {some: 50, full: 10}
tenants:
  - name: loader
    gpu: 0
    pid: 100
    sm_util: 20
    host:
      cpu: 1.5
      cpu_system_share: 0.2
      threads: 4
      resident_memory: 2048
      io_read: 10
      io_write: 1
  - name: restarts
    gpu: 1
    pid: 200
    restart_every: 60s
    sm_util: 90
    host:
      cpu: 2
      io_read: 4
      io_readable: false
  - name: no-host
    gpu: 1
    pid: 300
    sm_util: 5
`

// TestProcessUsageExactValues: CPU seconds (split user/system), threads,
// resident bytes and storage bytes are the integrals of the tenant's
// constant signals since the process (re)started, in seconds of the fleet's
// clock (sim seconds / speed); a restarted process (pid + 7) counts from
// its restart; I/O is absent where io_readable is false; a tenant without
// a host section and an unknown pid are not known.
func TestProcessUsageExactValues(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, hostScenario)
	for _, speed := range []float64{1, 4} {
		clk := newTestClock()
		f, err := New(sc, Options{Seed: 1, Start: epoch, Now: clk.Now, Speed: speed})
		if err != nil {
			t.Fatal(err)
		}
		clk.Set(time.Duration(100 / speed * float64(time.Second))) // sim time 100 s
		const mib = 1 << 20
		tests := []struct {
			pid  uint32
			want ProcessUsage
			ok   bool
		}{
			{100, ProcessUsage{UserSeconds: 1.5 * 100 * 0.8 / speed, SystemSeconds: 1.5 * 100 * 0.2 / speed, Threads: 4,
				ResidentBytes: 2048 * mib, IOReadable: true, ReadBytes: uint64(10 * 100 / speed * mib), WrittenBytes: uint64(100 / speed * mib)}, true},
			// Restarted at 60 s: pid 207, 40 s old; default threads (the
			// peak cores, 2), resident memory (1024 MiB) and system share (0.1).
			{207, ProcessUsage{UserSeconds: 2 * 40 * 0.9 / speed, SystemSeconds: 2 * 40 * 0.1 / speed, Threads: 2,
				ResidentBytes: 1024 * mib}, true},
			{200, ProcessUsage{}, false}, // the first run, gone
			{300, ProcessUsage{}, false}, // no host section
			{999, ProcessUsage{}, false},
		}
		for _, tc := range tests {
			got, ok := f.ProcessUsage(tc.pid)
			if ok != tc.ok || !usageClose(got, tc.want) {
				t.Errorf("speed %v: ProcessUsage(%d) = %+v, %v; want %+v, %v", speed, tc.pid, got, ok, tc.want, tc.ok)
			}
		}
		if n := f.HostCPUs(); n != 48 {
			t.Errorf("HostCPUs = %d, want 48", n)
		}
		want := []HostPressure{
			{Resource: "cpu", Some: 20.0 / speed, HasSome: true},
			{Resource: "io", Some: 50 / speed, Full: 10 / speed, HasSome: true, HasFull: true},
			{Resource: "memory"},
		}
		got := f.HostPressure()
		for i := range want {
			if i >= len(got) || !pressureClose(got[i], want[i]) {
				t.Errorf("speed %v: HostPressure = %+v, want %+v", speed, got, want)
				break
			}
		}
	}
}

func usageClose(a, b ProcessUsage) bool {
	return near(a.UserSeconds, b.UserSeconds) && near(a.SystemSeconds, b.SystemSeconds) && a.Threads == b.Threads &&
		a.ResidentBytes == b.ResidentBytes && a.IOReadable == b.IOReadable && a.ReadBytes == b.ReadBytes && a.WrittenBytes == b.WrittenBytes
}

func pressureClose(a, b HostPressure) bool {
	return a.Resource == b.Resource && near(a.Some, b.Some) && near(a.Full, b.Full) && a.HasSome == b.HasSome && a.HasFull == b.HasFull
}

func near(a, b float64) bool { d := a - b; return d < 1e-9 && d > -1e-9 }

// TestHostCountersNeverDecrease: with noisy signals, the counters grow with
// time and two fleets with the same seed agree; without a host section the
// host is unknown.
func TestHostCountersNeverDecrease(t *testing.T) {
	t.Parallel()
	sc := mustLoad(t, "starved-loader")
	a, _, clkA := newTestFleet(t, sc, 7)
	b, _, clkB := newTestFleet(t, sc, 7)
	var prev ProcessUsage
	var prevIO float64
	for s := 1; s <= 600; s += 7 {
		clkA.Set(time.Duration(s) * time.Second)
		clkB.Set(time.Duration(s) * time.Second)
		u, ok := a.ProcessUsage(31000)
		ub, _ := b.ProcessUsage(31000)
		if !ok || u != ub {
			t.Fatalf("at %ds: %+v, %v; other fleet %+v", s, u, ok, ub)
		}
		if u.UserSeconds < prev.UserSeconds || u.ReadBytes < prev.ReadBytes {
			t.Fatalf("at %ds: counters fell: %+v after %+v", s, u, prev)
		}
		io := a.HostPressure()[1].Some
		if io < prevIO {
			t.Fatalf("at %ds: io pressure total fell: %v after %v", s, io, prevIO)
		}
		prev, prevIO = u, io
	}
	// About one core for 596 s.
	if cpu := prev.UserSeconds + prev.SystemSeconds; cpu < 0.95*596 || cpu > 1.05*596 {
		t.Errorf("CPU seconds after 596 s at ~1 core: %v", cpu)
	}
	plain, _, _ := newTestFleet(t, mustLoad(t, "noisy-neighbour"), 1)
	if n, p := plain.HostCPUs(), plain.HostPressure(); n != 0 || p[0].HasSome || p[1].HasFull {
		t.Errorf("scenario without host: cpus %d, pressure %+v; want none", n, p)
	}
}

func TestHostValidation(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, yml, want string }{
		{"tenant host without cpu", `
devices: [{model: h100-sxm5-80gb}]
tenants: [{name: a, gpu: 0, host: {threads: 4}}]`, "tenants[0].host.cpu: missing cpu"},
		{"too few threads", `
devices: [{model: h100-sxm5-80gb}]
tenants: [{name: a, gpu: 0, host: {cpu: {shape: sine, min: 1, max: 3.5, period: 1m}, threads: 2}}]`, "tenants[0].host.threads: threads 2 cannot use the 3.5 cores of cpu: give at least 4"},
		{"system share", `
devices: [{model: h100-sxm5-80gb}]
tenants: [{name: a, gpu: 0, host: {cpu: 1, cpu_system_share: 1.5}}]`, "tenants[0].host.cpu_system_share: cpu_system_share 1.5 must be between 0 and 1"},
		{"negative io", `
devices: [{model: h100-sxm5-80gb}]
tenants: [{name: a, gpu: 0, host: {cpu: 1, io_read: -1}}]`, "tenants[0].host.io_read.value: -1 is out of range"},
		{"cpus", `
devices: [{model: h100-sxm5-80gb}]
host: {cpus: -2}`, "host.cpus: cpus -2 must be between 1 and 65536"},
		{"full above some", `
devices: [{model: h100-sxm5-80gb}]
host: {pressure: {io: {some: 10, full: 20}}}`, "host.pressure.io.full: full (all tasks stalled) cannot exceed some"},
		{"empty resource", `
devices: [{model: h100-sxm5-80gb}]
host: {pressure: {memory: {}}}`, "host.pressure.memory: give some and/or full"},
		{"unknown resource", `
devices: [{model: h100-sxm5-80gb}]
host: {pressure: {disk: {some: 1}}}`, `unknown field "disk"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml), "x.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse error %v; want it to contain %q", err, tc.want)
			}
		})
	}
}
