package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// Bounds of the probe flags.
const (
	// maxProbeShare: the probe may use at most 1/20 (5 %) of a GPU's time.
	maxProbeShare = 20
	// maxProbeBudget: longer measurements are gpulens-verify's job.
	maxProbeBudget = 10 * time.Second
	// minProbeMemory: smaller buffers give meaningless bandwidths.
	minProbeMemory = 16 << 20
)

// probeFlags configure the continuous probe (--collector.probe).
type probeFlags struct {
	enabled      bool
	interval     time.Duration
	jitter       float64
	budget       time.Duration
	stolenWindow time.Duration
	maxMemory    uint64
	cudaLibrary  string
	schedule     string
	migChildren  bool
}

func addProbeFlags(app *kingpin.Application, f *probeFlags) {
	app.Flag("collector.probe", "Enable the probe: measure each CUDA device from the inside every --collector.probe.interval (bandwidths, FLOP/s, launch latency, stolen time) with a small GPU-time and memory budget. Needs libcuda (--cuda.library); off by default.").Default("false").BoolVar(&f.enabled)
	cliflag.Duration(app, "collector.probe.interval", "Time between two probes of each device, on average (see --collector.probe.interval-jitter).", "5m", &f.interval)
	app.Flag("collector.probe.interval-jitter", "Spread of the time between two probes, as a fraction of --collector.probe.interval: each wait is interval × (1 ± up to this, uniformly random), so a tenant whose load repeats with the interval's period is not probed at the same phase every time; 0 to 0.5.").Default("0.2").Float64Var(&f.jitter)
	cliflag.Duration(app, "collector.probe.budget", "GPU time one device's probe may use, the stolen-time window included; at most 10s and 1/20 of --collector.probe.interval.", "250ms", &f.budget)
	cliflag.Duration(app, "collector.probe.stolen-window", "How long the stolen-time kernel watches the GPU timer in all, in 4 windows of a quarter each spread over the run; part of --collector.probe.budget.", "100ms", &f.stolenWindow)
	cliflag.Bytes(app, "collector.probe.max-memory", "Device memory one probe may take at most, its CUDA context's own (a few hundred MiB) included, e.g. 1280MiB, 2GiB; on each GPU it takes only what it needs there (768MiB for the context and two copy buffers of 4x the L2 cache: 1168MiB on an H100, 1776MiB on a B200) and skips a GPU with less free than that plus 768MiB; below what a GPU needs, its device copy is not reported (gpulens_probe_not_reported_total).", "2GiB", &f.maxMemory)
	app.Flag("collector.probe.schedule", "How a probe run takes the node's devices: sequential (one after another: a tenant spread over N GPUs, such as a tensor-parallel model, is slowed N times per run) or together (every device at once, each with its own budget: such a tenant is slowed once per run; the devices' host copies share the host's bandwidth).").Default(collector.ProbeSequential).StringVar(&f.schedule)
	app.Flag("collector.probe.mig-children", "Probe each MIG instance that CUDA does not show the exporter (CUDA enumerates one MIG instance per process) in a child process of its own: the exporter's binary, with CUDA_VISIBLE_DEVICES=MIG-<uuid>, one instance after another, under the same budget, deadline and safety checks. Off: those instances count as gpulens_probe_skipped_total{reason=\"mig_instance_not_visible\"}.").Default("true").BoolVar(&f.migChildren)
	app.Flag("cuda.library", "CUDA driver library the probe loads (a name searched on the library path, or a path).").Default("libcuda.so.1").StringVar(&f.cudaLibrary)
}

// config checks the probe flags (also when the probe is off: a bad value is
// a mistake either way) and returns the probe configuration.
func (f *probeFlags) config() (gpuprobe.Config, error) {
	switch {
	case f.interval <= 0:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.interval must be positive, got %s", f.interval)
	case !(f.jitter >= 0 && f.jitter <= collector.MaxProbeJitter):
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.interval-jitter must be between 0 and %g, got %g", collector.MaxProbeJitter, f.jitter)
	case f.budget <= 0:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.budget must be positive, got %s", f.budget)
	case f.budget > maxProbeBudget:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.budget must be at most %s (use gpulens-verify for longer measurements), got %s", maxProbeBudget, f.budget)
	case f.budget*maxProbeShare > f.interval:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.budget (%s) must be at most 1/%d of --collector.probe.interval (%s): the probe may take at most 5%% of the GPU's time", f.budget, maxProbeShare, f.interval)
	case f.stolenWindow <= 0:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.stolen-window must be positive, got %s", f.stolenWindow)
	case f.stolenWindow >= f.budget:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.stolen-window (%s) must be shorter than --collector.probe.budget (%s), which includes it", f.stolenWindow, f.budget)
	case f.maxMemory < minProbeMemory:
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.max-memory must be at least 16MiB, got %s", bytesize.Format(f.maxMemory))
	case strings.TrimSpace(f.cudaLibrary) == "":
		return gpuprobe.Config{}, errors.New("--cuda.library must not be empty")
	case !slices.Contains(collector.ProbeSchedules, f.schedule):
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.schedule must be one of %s, got %q", strings.Join(collector.ProbeSchedules, ", "), f.schedule)
	}
	cfg := gpuprobe.ExporterConfig()
	cfg.GPUTimeBudget = f.budget
	cfg.StolenWindow = f.stolenWindow
	cfg.MaxMemoryBytes = f.maxMemory
	if err := cfg.Validate(); err != nil {
		return gpuprobe.Config{}, fmt.Errorf("--collector.probe.* flags: %w", err)
	}
	return cfg, nil
}

// newProbe builds the continuous probe over the CUDA driver prober opens
// (the sources': libcuda or the simulated fleet's).
func newProbe(f probeFlags, cfg gpuprobe.Config, prober func(popts gpuprobe.Options, together bool) collector.OpenProber, childArgs []string, dir collector.GPUDirectory, logger *slog.Logger) (*collector.ProbeCollector, error) {
	popts := gpuprobe.Options{Logger: logger}
	// NVML's free memory (from the sampler's snapshot) before the probe
	// creates a context, and the MIG instances CUDA does not show it.
	nv, _ := dir.(collector.NVMLView)
	if nv != nil {
		popts.FreeMemory = func(d gpuprobe.DeviceInfo) (uint64, bool) { return nv.FreeMemory(d.UUID) }
		// NVML's process list before and with the probe's context: the
		// PID it gains is the exporter's own as NVML reports it.
		popts.Processes = func(d gpuprobe.DeviceInfo) ([]uint32, bool) { return nv.ProcessPIDs(d.UUID) }
	}
	open := prober(popts, f.schedule == collector.ProbeTogether)
	logger.Info("probe enabled", "interval", f.interval, "schedule", f.schedule, "budget", cfg.GPUTimeBudget, "stolen_window", cfg.StolenWindow,
		"max_memory", bytesize.Format(cfg.MaxMemoryBytes), "deadline", gpuprobe.Deadline(cfg))
	opts := collector.ProbeOptions{Interval: f.interval, Jitter: f.jitter, Schedule: f.schedule, Config: cfg, Logger: logger, NVML: nv}
	if nv != nil && f.migChildren {
		// The MIG instances CUDA does not show this process: one child
		// each, this program in its probe-child mode.
		children, err := probeChildren(childArgs, popts.FreeMemory, logger)
		if err != nil {
			logger.Warn("probe: MIG instances other than the one CUDA shows the exporter will not be measured", "err", err)
		} else {
			opts.Instances = children
		}
	}
	// The sampler keeps each GPU's per-process samples for the
	// unexplained stolen time.
	if s, ok := dir.(interface {
		collector.ActivitySource
		KeepActivity()
	}); ok {
		s.KeepActivity()
		opts.Activity = s
	}
	return collector.NewProbeCollector(open, dir, opts)
}

// probeChildren runs this program as a probe child (child.go) with args,
// logging at the exporter's level to its standard error, which the parent
// keeps the end of for its errors.
func probeChildren(args []string, free gpuprobe.FreeMemoryFunc, logger *slog.Logger) (*gpuprobe.ChildProber, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding this program to run as a probe child: %w", err)
	}
	return gpuprobe.NewChildProber(gpuprobe.ChildOptions{
		Path:       self,
		Args:       append([]string{gpuprobe.ChildCommand}, args...),
		Visible:    os.Getenv("CUDA_VISIBLE_DEVICES"),
		FreeMemory: free,
		Logger:     logger,
	})
}
