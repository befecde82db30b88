// Package simflag declares the --sim.* flags of every command that can run
// on a simulated fleet instead of real GPUs (gpulens-exporter,
// gpulens-verify and its burn), once, and builds the fleet they describe.
// Only cmd/ uses it; each command turns the fleet into its sources in one
// function (docs/architecture.md, "Real or simulated").
package simflag

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// Flags are the parsed --sim.* flags.
type Flags struct {
	// Scenario is --sim.scenario: a built-in name or a YAML file; empty:
	// the real GPUs.
	Scenario string
	// Seed is --sim.seed.
	Seed int64
	// Start is --sim.start; zero: when the command starts.
	Start time.Time
	// Speed is --sim.speed where the command offers it; 0 (as 1) where not.
	Speed float64

	startRaw string
	speedSet bool // --sim.speed is declared
}

// Help texts, the same in every command.
var (
	seedHelp  = "Seed of the simulated fleet; the same seed gives the same values at the same elapsed time."
	startHelp = "Sim time zero of the simulated fleet, as Unix seconds (1767225600.5) or RFC 3339 (2026-01-01T00:00:00Z), at most " +
		gpusim.MaxStartAge.String() + " ago and " + gpusim.MaxStartAhead.String() + " ahead (sim time stays 0 until then); default: when the command starts. " +
		"Processes given the same start and seed (gpulens-exporter, gpulens-verify, gpulens-verify burn) see the same GPUs at the same moment."
	speedHelp = "Sim seconds per real second of the simulated fleet (at most " + fmt.Sprint(gpusim.MaxSpeed) + "): every time of the scenario, fault delays included, passes this many times faster. " +
		"For tests that compress a scenario's hour into a minute; scale --sampler.device-timeout and Prometheus's intervals with it."
)

// Add declares --sim.scenario, --sim.seed and --sim.start on app. stands
// says what the simulated fleet does in this command, the start of
// --sim.scenario's help ("Replace NVML with a simulated fleet").
func Add(app *kingpin.Application, stands string) *Flags {
	f := &Flags{}
	app.Flag("sim.scenario", stands+": a built-in scenario ("+strings.Join(gpusim.BuiltinNames(), ", ")+") or a scenario YAML file.").PlaceHolder("NAME|FILE").StringVar(&f.Scenario)
	app.Flag("sim.seed", seedHelp).Default("1").Int64Var(&f.Seed)
	app.Flag("sim.start", startHelp).PlaceHolder("TIME").StringVar(&f.startRaw)
	return f
}

// AddSpeed also declares --sim.speed (compressed time, for tests of a
// long-running command).
func (f *Flags) AddSpeed(app *kingpin.Application) {
	f.speedSet = true
	app.Flag("sim.speed", speedHelp).Default("1").Float64Var(&f.Speed)
}

// Validate checks the flags once parsed, now being the command's start:
// --sim.start is a time in range and needs --sim.scenario, --sim.speed is
// in (0, gpusim.MaxSpeed]. Errors name the flag.
func (f *Flags) Validate(now time.Time) error {
	if f.startRaw != "" {
		if f.Scenario == "" {
			return errors.New("--sim.start needs --sim.scenario")
		}
		t, err := gpusim.ParseStart(f.startRaw, now)
		if err != nil {
			return fmt.Errorf("--sim.start: %w", err)
		}
		f.Start = t
	}
	if f.speedSet && !(f.Speed > 0 && f.Speed <= gpusim.MaxSpeed) {
		return fmt.Errorf("--sim.speed must be above 0 and at most %d, got %v", gpusim.MaxSpeed, f.Speed)
	}
	return nil
}

// Simulated says whether --sim.scenario asks for a simulated fleet.
func (f *Flags) Simulated() bool { return f.Scenario != "" }

// Fleet loads the scenario and builds its fleet; errors name
// --sim.scenario.
func (f *Flags) Fleet() (*gpusim.Fleet, error) {
	sc, err := gpusim.Load(f.Scenario)
	if err != nil {
		return nil, fmt.Errorf("--sim.scenario: %w", err)
	}
	fleet, err := gpusim.New(sc, gpusim.Options{Seed: f.Seed, Start: f.Start, Speed: f.Speed})
	if err != nil {
		return nil, fmt.Errorf("--sim.scenario %s: %w", f.Scenario, err)
	}
	return fleet, nil
}

// ChildArgs are the --sim.* flags that give a child process of this
// command (a probe child: gpuprobe.ChildProber) the same simulated fleet on
// the same timeline: the scenario, the seed, fleet's start (its sim time
// zero, RFC 3339 with nanoseconds) and the speed. Nil for the real GPUs.
// The child parses them with AddChild.
func (f *Flags) ChildArgs(fleet *gpusim.Fleet) []string {
	if !f.Simulated() {
		return nil
	}
	args := []string{
		"--sim.scenario=" + f.Scenario,
		"--sim.seed=" + strconv.FormatInt(f.Seed, 10),
		"--sim.start=" + fleet.Start().UTC().Format(time.RFC3339Nano),
	}
	if f.Speed > 0 {
		args = append(args, "--sim.speed="+strconv.FormatFloat(f.Speed, 'g', -1, 64))
	}
	return args
}

// AddChild declares the flags ChildArgs writes, for a child process: the
// same as Add and AddSpeed, but --sim.start is the parent's fleet start
// as RFC 3339, whatever its age (a parent may run for days). ValidateChild
// checks them.
func AddChild(app *kingpin.Application) *Flags {
	f := &Flags{speedSet: true}
	app.Flag("sim.scenario", "The parent's simulated scenario.").StringVar(&f.Scenario)
	app.Flag("sim.seed", seedHelp).Default("1").Int64Var(&f.Seed)
	app.Flag("sim.start", "The parent's fleet start, RFC 3339.").StringVar(&f.startRaw)
	app.Flag("sim.speed", speedHelp).Default("1").Float64Var(&f.Speed)
	return f
}

// ValidateChild checks the flags AddChild declared; errors name the flag.
func (f *Flags) ValidateChild() error {
	if f.startRaw != "" {
		if f.Scenario == "" {
			return errors.New("--sim.start needs --sim.scenario")
		}
		t, err := time.Parse(time.RFC3339Nano, f.startRaw)
		if err != nil {
			return fmt.Errorf("--sim.start: %q is not an RFC 3339 time", f.startRaw)
		}
		f.Start = t
	}
	if !(f.Speed > 0 && f.Speed <= gpusim.MaxSpeed) {
		return fmt.Errorf("--sim.speed must be above 0 and at most %d, got %v", gpusim.MaxSpeed, f.Speed)
	}
	return nil
}
