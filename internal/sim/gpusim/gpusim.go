// Package gpusim simulates a fleet of NVIDIA GPUs behind go-nvml's
// nvml.Interface, so the exporter and its tests run on machines without a GPU.
//
// A Scenario (YAML, see docs/simulator.md) describes the devices, their load
// patterns and the faults to inject. A Fleet built from it is a pure function
// of (scenario, seed, elapsed sim time): two fleets with the same seed report
// the same values at the same elapsed time. Counters (energy, ECC, PCIe
// replays) never decrease while time moves forward.
package gpusim

import (
	"embed"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

//go:embed scenarios/*.yaml
var builtinFS embed.FS

// BuiltinNames lists the scenarios Load accepts by name.
func BuiltinNames() []string {
	entries, err := builtinFS.ReadDir("scenarios")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".yaml"))
	}
	sort.Strings(names)
	return names
}

func builtinYAML(name string) ([]byte, bool) {
	if name == "" || strings.ContainsAny(name, `/\.`) {
		return nil, false
	}
	data, err := builtinFS.ReadFile("scenarios/" + name + ".yaml")
	return data, err == nil
}

// Options parameterise a Fleet.
type Options struct {
	Seed  int64
	Start time.Time        // sim time zero; zero value: Now() when New is called
	Now   func() time.Time // injected clock; nil: time.Now
	// Node selects the devices of one node of a multi-node scenario (see
	// Scenario.Nodes), so that one exporter per node can run; empty: all
	// devices of the scenario.
	Node string
	// Speed is how many seconds of sim time pass per second of Now (0: 1),
	// at most MaxSpeed: sim time is Speed × (Now() − Start). Every duration
	// of the scenario is sim time, so the real-time sleeps (call_latency,
	// slow and hang faults) last their duration / Speed, and process
	// utilisation samples carry the wall time Start + sim time / Speed. For
	// tests that compress a scenario's hour into a minute (alerts/).
	Speed float64
}

// MaxSpeed bounds Options.Speed.
const MaxSpeed = 1000

// Fleet is a simulated set of GPUs. Its nvml.Interface is safe for
// concurrent use.
type Fleet struct {
	sc      *Scenario
	seed    uint64
	start   time.Time
	now     func() time.Time
	speed   float64 // sim seconds per second of now; see Options.Speed
	lib     *library
	devices []*device
	node    string
	inits   atomic.Int64 // Init calls not yet matched by Shutdown
	lags    probeLags    // the lag of each probe driver made by ProbeDriverVisible
}

// New builds the fleet a scenario describes.
func New(sc *Scenario, opts Options) (*Fleet, error) {
	if sc == nil {
		return nil, errors.New("gpusim: nil scenario")
	}
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	start := opts.Start
	if start.IsZero() {
		start = now()
	}
	speed := opts.Speed
	if speed == 0 {
		speed = 1
	}
	if !(speed > 0 && speed <= MaxSpeed) {
		return nil, fmt.Errorf("gpusim: speed %v must be above 0 and at most %d", opts.Speed, MaxSpeed)
	}
	f := &Fleet{sc: sc, seed: uint64(opts.Seed), start: start, now: now, speed: speed, node: opts.Node}
	if opts.Node != "" && !slices.Contains(sc.Nodes(), opts.Node) {
		return nil, fmt.Errorf("gpusim: scenario %s has no node %q (nodes: %s)", sc.Name, opts.Node, strings.Join(sc.Nodes(), ", "))
	}

	cfgs := make([]server.Option, 0, 4)
	cfgs = append(cfgs,
		server.WithDriverVersion(sc.driverVersion),
		server.WithNVMLVersion(nvmlVersion(sc.driverVersion)),
		server.WithCUDADriverVersion(sc.cudaVersion),
	)
	srv, err := server.New(cfgs...)
	if err != nil {
		return nil, fmt.Errorf("gpusim: building mock server: %w", err)
	}
	// Identity (UUID, serial, noise) derives from the node name and the index
	// on that node, so a device looks the same whether its node is selected
	// alone or the whole scenario is.
	byScenario := make([]*device, len(sc.devices))
	perNode := map[string]int{}
	for i, spec := range sc.devices {
		inNode := perNode[spec.node]
		perNode[spec.node]++
		if opts.Node != "" && spec.node != opts.Node {
			continue
		}
		d := newDevice(f, len(f.devices), spec, hashN(hashString(spec.node), uint64(inNode)))
		f.devices = append(f.devices, d)
		byScenario[i] = d
	}
	for _, fs := range sc.faults {
		d := byScenario[fs.gpu]
		if d == nil {
			continue // on another node
		}
		switch fs.kind {
		case faultXID:
			d.xidFaults = append(d.xidFaults, fs)
		case faultLost:
			d.lostAt = math.Min(d.lostAt, fs.at)
		default:
			d.callFaults = append(d.callFaults, fs)
		}
	}
	srv.Devices = make([]nvml.Device, len(f.devices))
	for i, d := range f.devices {
		srv.Devices[i] = d.Device
	}
	f.lib = &library{Server: srv, f: f}
	return f, nil
}

// Interface returns the simulated NVML library. Like the real one, it must
// be initialised with Init before other calls succeed.
func (f *Fleet) Interface() nvml.Interface { return f.lib }

// Node is the node the fleet simulates; empty for the whole scenario.
func (f *Fleet) Node() string { return f.node }

// Scenario returns the scenario the fleet runs.
func (f *Fleet) Scenario() *Scenario { return f.sc }

// Start is the fleet's sim time zero (Options.Start, or when New was
// called): another process given it (--sim.start), the seed and the speed
// sees the same GPUs at the same moment.
func (f *Fleet) Start() time.Time { return f.start }

// Elapsed is the current sim time: Speed × (Now() − Start), never negative.
func (f *Fleet) Elapsed() time.Duration {
	return time.Duration(f.elapsed() * float64(time.Second))
}

func (f *Fleet) elapsed() float64 { return f.simSeconds(f.now()) }

// simSeconds converts a time of the fleet's clock (or of the probe driver's,
// which follows it) to sim time: Speed × (t − Start), never negative.
func (f *Fleet) simSeconds(t time.Time) float64 {
	return math.Max(0, f.speed*t.Sub(f.start).Seconds())
}

// realDuration is how long d of sim time lasts on the fleet's clock.
func (f *Fleet) realDuration(d time.Duration) time.Duration {
	return time.Duration(float64(d) / f.speed)
}

// wallMicros is the wall time, in µs since the Unix epoch, at which the
// fleet's clock reaches sim time t (seconds).
func (f *Fleet) wallMicros(t float64) int64 {
	return f.start.UnixMicro() + int64(math.Round(t/f.speed*1e6))
}

func (f *Fleet) initialised() bool { return f.inits.Load() > 0 }

// nvmlVersion derives the NVML library version from the driver version, as
// the real library reports it ("12.550.54.15").
func nvmlVersion(driver string) string { return "12." + driver }
