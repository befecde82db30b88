package simflag

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

func parse(t *testing.T, speed bool, args ...string) (*Flags, error) {
	t.Helper()
	app := kingpin.New("test", "")
	app.Terminate(nil)
	app.UsageWriter(io.Discard)
	app.ErrorWriter(io.Discard)
	f := Add(app, "Replace NVML with a simulated fleet")
	if speed {
		f.AddSpeed(app)
	}
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	err := f.Validate(now)
	return f, err
}

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func TestFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		speed bool
		args  []string
		want  Flags // Scenario, Seed, Start, Speed
		err   string
	}{
		{name: "real GPUs", speed: true, args: nil, want: Flags{Seed: 1, Speed: 1}},
		{name: "scenario and seed", args: []string{"--sim.scenario=minimal", "--sim.seed=7"}, want: Flags{Scenario: "minimal", Seed: 7}},
		{name: "start as Unix seconds", args: []string{"--sim.scenario=minimal", "--sim.start=1767268800.5"},
			want: Flags{Scenario: "minimal", Seed: 1, Start: time.Unix(1767268800, 5e8)}},
		{name: "start as RFC 3339", args: []string{"--sim.scenario=minimal", "--sim.start=2026-01-01T11:00:00Z"},
			want: Flags{Scenario: "minimal", Seed: 1, Start: now.Add(-time.Hour)}},
		{name: "speed", speed: true, args: []string{"--sim.scenario=minimal", "--sim.speed=40"}, want: Flags{Scenario: "minimal", Seed: 1, Speed: 40}},
		{name: "start without a scenario", args: []string{"--sim.start=1767268800"}, err: "--sim.start needs --sim.scenario"},
		{name: "start not a time", args: []string{"--sim.scenario=minimal", "--sim.start=soon"}, err: `--sim.start: "soon" is neither Unix seconds`},
		{name: "start too old", args: []string{"--sim.scenario=minimal", "--sim.start=2000-01-01T00:00:00Z"}, err: "--sim.start: 2000-01-01T00:00:00Z is "},
		{name: "speed zero", speed: true, args: []string{"--sim.scenario=minimal", "--sim.speed=0"}, err: "--sim.speed must be above 0 and at most 1000, got 0"},
		{name: "speed too high", speed: true, args: []string{"--sim.scenario=minimal", "--sim.speed=1001"}, err: "--sim.speed must be above 0 and at most 1000, got 1001"},
		{name: "speed not offered", args: []string{"--sim.scenario=minimal", "--sim.speed=2"}, err: "unknown long flag '--sim.speed'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := parse(t, tc.speed, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Scenario != tc.want.Scenario || f.Seed != tc.want.Seed || !f.Start.Equal(tc.want.Start) || f.Speed != tc.want.Speed {
				t.Errorf("got scenario %q seed %d start %v speed %v; want %q %d %v %v", f.Scenario, f.Seed, f.Start, f.Speed,
					tc.want.Scenario, tc.want.Seed, tc.want.Start, tc.want.Speed)
			}
			if f.Simulated() != (tc.want.Scenario != "") {
				t.Errorf("Simulated() = %v", f.Simulated())
			}
		})
	}
}

func TestFleet(t *testing.T) {
	t.Parallel()
	f, err := parse(t, true, "--sim.scenario=mixed-fleet", "--sim.seed=3")
	if err != nil {
		t.Fatal(err)
	}
	fleet, err := f.Fleet()
	if err != nil {
		t.Fatal(err)
	}
	if name := fleet.Scenario().Name; name != "mixed-fleet" {
		t.Errorf("scenario %q, want mixed-fleet", name)
	}
	lib := fleet.Interface()
	if ret := lib.Init(); int(ret) != 0 {
		t.Fatalf("Init: %v", ret)
	}
	defer lib.Shutdown()
	n, ret := lib.DeviceGetCount()
	if int(ret) != 0 || n != 7 {
		t.Errorf("%d GPUs (%v), want mixed-fleet's 7", n, ret)
	}
	f.Scenario = "no-such-scenario"
	if _, err := f.Fleet(); err == nil || !strings.HasPrefix(err.Error(), "--sim.scenario: ") {
		t.Errorf("unknown scenario: %v, want an error naming --sim.scenario", err)
	}
}
