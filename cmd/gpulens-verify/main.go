// Command gpulens-verify is a one-shot host acceptance report for rented
// GPUs: NVML facts plus repeated probe measurements, judged against the
// GPU's spec and the buyer's expectations, as console text, JSON and HTML.
// Its exit status fits a provisioning pipeline. See docs/verify.md.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/nvmlret"
	"github.com/gpulens/gpulens/internal/sim/simflag"
	"github.com/gpulens/gpulens/internal/verify"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is main without the process exit, so tests can drive it. The report
// goes to stdout, logs and errors to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "burn" {
		return runBurn(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == gpuprobe.ChildCommand {
		// A probe child this program started for a MIG instance (child.go).
		return simflag.RunProbeChild(ctx, "gpulens-verify", args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "compare" {
		return runCompare(args[1:], stdout, stderr)
	}
	o, err := parseFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-verify: error: %v\n", err)
		return verify.ExitBadInput
	}
	logger := promslog.New(o.log)

	src, sim, closeSources, err := openSources(o, logger)
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-verify: error: %v\n", err)
		return verify.ExitBadInput
	}
	defer closeSources()

	rep, err := verify.Run(ctx, src, verify.Options{
		Tool: "gpulens-verify", Version: version.Version, Simulated: sim,
		Repeat: o.repeat, Interval: o.interval, Probe: o.probe, Devices: o.devices,
		Expect: o.expect, Strict: o.strict, SelfPID: os.Getpid(), Logger: logger,
	})
	var bad *verify.BadInputError
	switch {
	case errors.As(err, &bad):
		fmt.Fprintf(stderr, "gpulens-verify: error: %v\n", err)
		return verify.ExitBadInput
	case err != nil:
		fmt.Fprintf(stderr, "gpulens-verify: stopped: %v\n", err)
		return verify.ExitFail
	}

	if err := verify.WriteText(stdout, rep); err != nil {
		fmt.Fprintf(stderr, "gpulens-verify: error: writing the report: %v\n", err)
		return verify.ExitBadInput
	}
	for _, out := range []struct {
		path   string
		render func(io.Writer, *verify.Report) error
	}{{o.outputJSON, verify.WriteJSON}, {o.outputHTML, verify.WriteHTML}} {
		if out.path == "" {
			continue
		}
		if err := verify.WriteFile(out.path, rep, out.render); err != nil {
			fmt.Fprintf(stderr, "gpulens-verify: error: %v\n", err)
			return verify.ExitBadInput
		}
	}
	return rep.Summary.ExitCode
}

// openSources opens NVML and the probe over the GPUs openGPUs chose (the
// real libraries, or a simulated fleet's). A missing library is reported in the Sources (the report says
// what it could not measure), not as an error; a bad --sim.scenario is.
func openSources(o *options, logger *slog.Logger) (verify.Sources, *verify.Simulation, func(), error) {
	var src verify.Sources
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	g, err := openGPUs(o.sim, o.cudaLibrary, logger)
	if err != nil {
		return src, nil, closeAll, err
	}
	closers = append(closers, g.close)
	lib, drv := g.nvml, g.driver
	if g.driverErr != nil {
		src.CUDAError = g.driverErr.Error()
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		src.NVMLError = "initialising NVML: " + nvmlret.Describe(ret)
	} else {
		src.NVML = lib
		closers = append(closers, func() {
			if ret := lib.Shutdown(); ret != nvml.SUCCESS {
				logger.Warn("NVML shutdown", "err", nvmlret.Describe(ret))
			}
		})
	}
	if drv != nil {
		popts := gpuprobe.Options{Logger: logger}
		if src.NVML != nil {
			// NVML's free memory before the probe creates a context.
			popts.FreeMemory = verify.NVMLFreeMemory(lib)
			// NVML's process list before and with the probe's context:
			// the PID it gains is this process as NVML reports it.
			popts.Processes = verify.NVMLProcesses(lib)
		}
		p := gpuprobe.New(drv, popts)
		src.Prober = p
		src.Emulated = g.emulated
		if src.NVML != nil {
			// The MIG instances CUDA does not show this process: one
			// child each, this program in its probe-child mode.
			if self, err := os.Executable(); err != nil {
				logger.Warn("MIG instances other than the one CUDA shows this process will not be measured", "err", err)
			} else if c, err := gpuprobe.NewChildProber(gpuprobe.ChildOptions{
				Path: self, Args: append([]string{gpuprobe.ChildCommand}, g.probeChildArgs...),
				Visible: os.Getenv("CUDA_VISIBLE_DEVICES"), FreeMemory: popts.FreeMemory, Logger: logger,
			}); err == nil {
				src.Instances = c
			}
		}
		// A probe cut off by its deadline may still be in a driver call:
		// give it a moment to end before the library is closed.
		closers = append(closers, func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := p.Wait(ctx); err != nil {
				logger.Warn("a probe is still in a CUDA call at exit", "err", err)
			}
		})
	}
	return src, g.sim, closeAll, nil
}
