package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/nvmlret"
	"github.com/gpulens/gpulens/internal/sim/gpusim"
)

// sources are what the exporter reads: NVML, who runs on the GPUs (names,
// pods, CPU and memory use), the host's pressure, prices, and the probe's
// CUDA driver. openSources is the one place that chooses the real ones or
// a simulated fleet's; nothing else asks whether the GPUs are simulated.
type sources struct {
	// nvml is initialised; close shuts it down.
	nvml nvml.Interface
	// simulated labels every GPU simulated="true".
	simulated bool
	// processes are the process collector's attribution sources.
	processes collector.ProcessOptions
	// host reads the host's pressure (PSI) and CPU count.
	host collector.HostSource
	// prices are the GPUs' own prices (a scenario's); nil: none. The
	// --cost.* flags price over them.
	prices collector.PriceSource
	// prober opens the continuous probe over a CUDA driver; together: one
	// whose probes of different devices may run at once
	// (--collector.probe.schedule=together).
	prober func(popts gpuprobe.Options, together bool) collector.OpenProber
	// probeChildArgs are the flags that give a probe child (one per MIG
	// instance CUDA does not show the exporter: child.go) the same driver:
	// --cuda.library, or the simulated fleet on its timeline.
	probeChildArgs []string
	// close releases them: the pod-resources refresh, then NVML.
	close func()
}

// openSources returns the real sources (NVML, procfs, the kubelet, libcuda)
// or, with --sim.scenario, the simulated fleet's.
func openSources(ctx context.Context, o *options, logger *slog.Logger) (*sources, error) {
	if !o.sim.Simulated() {
		return realSources(ctx, o, logger)
	}
	fleet, err := o.sim.Fleet()
	if err != nil {
		return nil, err
	}
	logger.Warn("SIMULATED GPUs: no real NVML is read; every GPU is labelled simulated=\"true\"", "scenario", fleet.Scenario().Name, "seed", o.sim.Seed, "speed", o.sim.Speed)
	return simSources(fleet, o, logger)
}

// realSources reads this host: libnvidia-ml, procfs and cgroups, the
// kubelet's pod-resources socket and libcuda (loaded by the probe's first
// run, retried every interval while it cannot be).
func realSources(ctx context.Context, o *options, logger *slog.Logger) (*sources, error) {
	lib := nvml.New()
	shutdown, err := initNVML(lib, logger)
	if err != nil {
		return nil, err
	}
	procs, stop := setupAttribution(ctx, o.attribution, o.interval, logger)
	return &sources{
		nvml:      lib,
		processes: procs,
		host:      collector.NewProcfsHost(o.attribution.procfs, nil),
		prober: func(popts gpuprobe.Options, together bool) collector.OpenProber {
			return libcudaProber(o.probe.cudaLibrary, popts, together)
		},
		probeChildArgs: []string{"--cuda.library=" + o.probe.cudaLibrary},
		close:          func() { stop(); shutdown() },
	}, nil
}

// simSources reads the simulated fleet: its NVML, its tenants in place of
// procfs, cgroups and the kubelet (simulated pids are not this host's),
// its host section, its scenario's prices and its simulated CUDA driver.
func simSources(fleet *gpusim.Fleet, o *options, logger *slog.Logger) (*sources, error) {
	lib := fleet.Interface()
	shutdown, err := initNVML(lib, logger)
	if err != nil {
		return nil, err
	}
	s := &sources{
		nvml:      lib,
		simulated: true,
		processes: collector.ProcessOptions{
			ProcRoot:    os.DevNull, // not a directory: procfs reads are off
			MaxPerGPU:   o.attribution.maxPerGPU,
			Attributor:  simAttributor{fleet},
			Allocations: simAllocations{fleet},
			// The tenants' CPU, memory and I/O cost nothing to read: every cycle.
			Usage: simUsage{fleet}, UsageInterval: o.interval,
		},
		host: simHost{fleet},
		prober: func(popts gpuprobe.Options, together bool) collector.OpenProber {
			// As libcuda does, the simulated driver shows what this
			// process's CUDA_VISIBLE_DEVICES lets it see.
			visible := os.Getenv("CUDA_VISIBLE_DEVICES")
			drv := fleet.ProbeDriverVisible(visible)
			logger.Info("probe: simulated CUDA driver of the scenario (--cuda.library is not loaded)")
			if together {
				// A simulated driver keeps one current context and one
				// stream: each device gets a driver of its own, whose
				// virtual clock starts at the fleet's, as the devices of
				// one node run side by side.
				return func() (gpuprobe.Prober, func() error, error) {
					return gpuprobe.NewPerDevice(drv, func(int) gpuprobe.Driver { return fleet.ProbeDriverVisible(visible) }, popts), nil, nil
				}
			}
			return func() (gpuprobe.Prober, func() error, error) { return gpuprobe.New(drv, popts), nil, nil }
		},
		probeChildArgs: o.sim.ChildArgs(fleet),
		close:          shutdown,
	}
	logger.Info("simulated GPUs: process names, pods and host usage come from the scenario's tenants, not from procfs or the kubelet")
	if fleet.Scenario().HasPrices() {
		s.prices = collector.PriceFunc(func(d collector.Device) (float64, bool) { return fleet.PriceUSDPerHour(d.UUID) })
	}
	return s, nil
}

// initNVML initialises lib and returns its shutdown.
func initNVML(lib nvml.Interface, logger *slog.Logger) (shutdown func(), err error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("initialising NVML: %s (is the NVIDIA driver installed and libnvidia-ml.so.1 on the library path? Try --sim.scenario=dgx-h100 to run without a GPU)", nvmlret.Describe(ret))
	}
	return func() {
		if ret := lib.Shutdown(); ret != nvml.SUCCESS {
			logger.Warn("NVML shutdown", "err", nvmlret.Describe(ret))
		}
	}, nil
}

// libcudaProber opens the probe over libcuda at path; together: a probe per
// device over the one library, so that devices may be probed at once.
func libcudaProber(path string, popts gpuprobe.Options, together bool) collector.OpenProber {
	return func() (gpuprobe.Prober, func() error, error) {
		c, err := gpuprobe.Open(path)
		if err != nil {
			return nil, nil, fmt.Errorf("--cuda.library %s: %w", path, err)
		}
		var pr interface {
			gpuprobe.Prober
			Wait(context.Context) error
		} = gpuprobe.New(c, popts)
		if together {
			pr = gpuprobe.NewPerDevice(c, func(int) gpuprobe.Driver { return c }, popts)
		}
		closeFn := func() error {
			// A driver call abandoned at its deadline may still run:
			// unload the library only once it has returned.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			if pr.Wait(ctx) != nil {
				return nil
			}
			return c.Close()
		}
		return pr, closeFn, nil
	}
}
