package main

import (
	"log/slog"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simflag"
	"github.com/gpulens/gpulens/internal/verify"
)

// gpus are what gpulens-verify and its burn work on: NVML and a CUDA
// driver, the real libraries or a simulated fleet's.
type gpus struct {
	// nvml is not initialised yet (the report says when it cannot be).
	nvml nvml.Interface
	// driver is the CUDA driver; nil when libcuda could not be loaded,
	// driverErr then says why.
	driver    gpuprobe.Driver
	driverErr error
	// sim describes the simulated fleet; nil for the real GPUs.
	sim *verify.Simulation
	// probeChildArgs give a probe child (child.go) the same driver:
	// --cuda.library, or the simulated fleet on its timeline.
	probeChildArgs []string
	// close unloads libcuda.
	close func()
	// emulated is the simulated driver's emulation time
	// (verify.Sources.Emulated); nil for the real driver.
	emulated func() time.Duration
}

// openGPUs returns the real GPUs (libnvidia-ml, and libcuda from
// cudaLibrary) or, with --sim.scenario, the simulated fleet's: the one
// place gpulens-verify and its burn choose between them. An error is bad
// input (a --sim.scenario that does not load); a libcuda that does not load
// is not one (driverErr).
func openGPUs(sim *simflag.Flags, cudaLibrary string, logger *slog.Logger) (*gpus, error) {
	if sim.Simulated() {
		fleet, err := sim.Fleet()
		if err != nil {
			return nil, err
		}
		name := fleet.Scenario().Name
		logger.Warn("SIMULATED GPUs: no real GPU is used", "scenario", name, "seed", sim.Seed)
		// As libcuda does, the simulated driver shows what this process's
		// CUDA_VISIBLE_DEVICES lets it see.
		return &gpus{nvml: fleet.Interface(), driver: fleet.ProbeDriverVisible(os.Getenv("CUDA_VISIBLE_DEVICES")),
			sim: &verify.Simulation{Scenario: name, Seed: sim.Seed}, probeChildArgs: sim.ChildArgs(fleet), close: func() {},
			emulated: fleet.ProbeEmulated}, nil
	}
	g := &gpus{nvml: nvml.New(), probeChildArgs: []string{"--cuda.library=" + cudaLibrary}, close: func() {}}
	cuda, err := gpuprobe.Open(cudaLibrary)
	if err != nil {
		g.driverErr = err
		return g, nil
	}
	g.driver = cuda
	g.close = func() {
		if err := cuda.Close(); err != nil {
			logger.Warn("closing libcuda", "err", err)
		}
	}
	return g, nil
}
