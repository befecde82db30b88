package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simflag"
	"github.com/gpulens/gpulens/internal/verify"
)

// `gpulens-verify burn`: a bounded GPU workload (gpuprobe.Burn) for
// experiments such as scripts/real-gpu-validate.sh on hosts without
// PyTorch. Not a check: it keeps one GPU busy with the probe's FMA kernel
// for --duration, holding --memory, and says what throughput it got.

// burnGrace is how long after --duration a burn may still be in a CUDA call
// before the command gives up on it and exits (the driver releases the
// GPU with the process).
var burnGrace = 30 * time.Second

type burnOptions struct {
	cfg         gpuprobe.BurnConfig
	device      int
	outputJSON  string
	sim         *simflag.Flags
	cudaLibrary string
	log         *promslog.Config
}

func parseBurnFlags(args []string, stderr io.Writer) (*burnOptions, error) {
	app, o := newBurnApp(stderr)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}
	if o.cfg.Duration <= 0 || o.cfg.Duration > gpuprobe.MaxBurnDuration {
		return nil, fmt.Errorf("--duration must be positive and at most %s, got %s", gpuprobe.MaxBurnDuration, o.cfg.Duration)
	}
	if o.cfg.Launch < time.Millisecond || o.cfg.Launch > time.Second || o.cfg.Launch > o.cfg.Duration {
		return nil, fmt.Errorf("--launch must be between 1ms and 1s and at most --duration (%s), got %s", o.cfg.Duration, o.cfg.Launch)
	}
	if o.device < 0 {
		return nil, fmt.Errorf("--device must be a CUDA ordinal (0 or more), got %d", o.device)
	}
	if err := o.sim.Validate(time.Now()); err != nil {
		return nil, err
	}
	if o.outputJSON != "" {
		if st, err := os.Stat(filepath.Dir(o.outputJSON)); err != nil || !st.IsDir() {
			return nil, fmt.Errorf("--output.json: folder %s does not exist", filepath.Dir(o.outputJSON))
		}
	}
	if err := o.cfg.Validate(); err != nil {
		return nil, err
	}
	return o, nil
}

// newBurnApp declares the burn command's flags, stored in the options it
// returns.
func newBurnApp(stderr io.Writer) (*kingpin.Application, *burnOptions) {
	app := kingpin.New("gpulens-verify burn", "Keep one GPU busy for a bounded time with the probe's FP32 FMA kernel, holding some device memory, and report the throughput it got: a workload for contention experiments (scripts/real-gpu-validate.sh) on hosts without PyTorch. Launches of about --launch run back to back until --duration has passed; it never changes GPU settings. Exit status: 0 done, 1 a CUDA failure or interrupted, 2 bad input.")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	o := &burnOptions{log: &promslog.Config{Writer: stderr}}
	cliflag.Duration(app, "duration", "How long to keep the GPU busy, e.g. 30s (at most "+gpuprobe.MaxBurnDuration.String()+"). Required.", "0s", &o.cfg.Duration)
	cliflag.Bytes(app, "memory", "Device memory to allocate, touch and hold while burning, e.g. 2GiB; 0 for none.", "1GiB", &o.cfg.MemoryBytes)
	cliflag.Duration(app, "launch", "Length of one kernel launch (1ms to 1s); the burn ends within about one launch of --duration or of a signal.", gpuprobe.DefaultBurnLaunch.String(), &o.cfg.Launch)
	app.Flag("device", "CUDA ordinal of the GPU to burn (CUDA's order: set CUDA_DEVICE_ORDER=PCI_BUS_ID to match NVML's).").Default("0").IntVar(&o.device)
	app.Flag("output.json", "Also write the result as JSON to this file.").PlaceHolder("FILE").StringVar(&o.outputJSON)
	o.sim = simflag.Add(app, "Burn a simulated GPU instead of a real one")
	app.Flag("cuda.library", "The CUDA driver library to load.").Default(gpuprobe.DefaultLibCUDA).StringVar(&o.cudaLibrary)
	flag.AddFlags(app, o.log)
	app.Version(version.Print("gpulens-verify"))
	app.HelpFlag.Short('h')
	return app, o
}

// burnReport is --output.json.
type burnReport struct {
	SchemaVersion int                  `json:"schema_version"`
	Tool          string               `json:"tool"`
	Version       string               `json:"version"`
	Simulated     *verify.Simulation   `json:"simulated,omitempty"`
	PID           int                  `json:"pid"`
	Settings      burnSettings         `json:"settings"`
	Result        *gpuprobe.BurnResult `json:"result,omitempty"`
	Error         string               `json:"error,omitempty"`
}

type burnSettings struct {
	Device      int           `json:"device"`
	Duration    time.Duration `json:"duration_ns"`
	MemoryBytes uint64        `json:"memory_bytes"`
	Launch      time.Duration `json:"launch_ns"`
}

func runBurn(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseBurnFlags(args, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-verify burn: error: %v\n", err)
		return verify.ExitBadInput
	}
	logger := promslog.New(o.log)
	o.cfg.Logger = logger
	rep := &burnReport{SchemaVersion: 1, Tool: "gpulens-verify burn", Version: version.Version, PID: os.Getpid(),
		Settings: burnSettings{Device: o.device, Duration: o.cfg.Duration, MemoryBytes: o.cfg.MemoryBytes, Launch: o.cfg.Launch}}
	g, err := openGPUs(o.sim, o.cudaLibrary, logger)
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-verify burn: error: %v\n", err)
		return verify.ExitBadInput
	}
	rep.Simulated = g.sim
	if g.driverErr != nil {
		fmt.Fprintf(stderr, "gpulens-verify burn: error: %v\n", g.driverErr)
		rep.Error = g.driverErr.Error()
		writeBurnReport(o, rep, stderr)
		return verify.ExitFail
	}
	return burnWith(ctx, g.driver, o, rep, g.close, stdout, stderr)
}

// burnWith runs the burn on its own goroutine and waits for it, giving up
// burnGrace after --duration should have ended (a CUDA call that never
// returns): then release is not called, as the call may still use the
// library.
func burnWith(ctx context.Context, drv gpuprobe.Driver, o *burnOptions, rep *burnReport, release func(), stdout, stderr io.Writer) int {
	type outcome struct {
		res gpuprobe.BurnResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := gpuprobe.Burn(ctx, drv, o.device, o.cfg)
		done <- outcome{res, err}
	}()
	watchdog := time.NewTimer(o.cfg.Duration + burnGrace)
	defer watchdog.Stop()
	select {
	case out := <-done:
		release()
		if out.res.Launches > 0 || out.res.Device.Name != "" {
			rep.Result = &out.res
		}
		if out.err != nil {
			rep.Error = out.err.Error()
		}
		if rep.Result != nil {
			r := rep.Result
			fmt.Fprintf(stdout, "gpulens-verify burn: CUDA %d · %s: %s, %d launches (median %s), %.3g TFLOP/s FP32, %s held\n",
				r.Device.Ordinal, r.Device.Name, r.Duration.Round(time.Millisecond), r.Launches,
				r.LaunchMedian.Round(10*time.Microsecond), r.FP32FLOPS/1e12, fmtBytes(r.MemoryBytes))
		}
	case <-watchdog.C:
		rep.Error = fmt.Sprintf("the GPU did not answer: a CUDA call was still running %s after the burn's %s ended; exiting (the driver frees the GPU with the process)", burnGrace, o.cfg.Duration)
	}
	if rep.Error != "" {
		fmt.Fprintf(stderr, "gpulens-verify burn: error: %s\n", rep.Error)
	}
	if !writeBurnReport(o, rep, stderr) || rep.Error != "" {
		return verify.ExitFail
	}
	return verify.ExitPass
}

// writeBurnReport writes --output.json (atomically), if asked.
func writeBurnReport(o *burnOptions, rep *burnReport, stderr io.Writer) bool {
	if o.outputJSON == "" {
		return true
	}
	err := func() error {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		tmp, err := os.CreateTemp(filepath.Dir(o.outputJSON), "."+filepath.Base(o.outputJSON)+".*")
		if err != nil {
			return err
		}
		defer os.Remove(tmp.Name())
		if _, err := tmp.Write(append(b, '\n')); err != nil {
			tmp.Close()
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), o.outputJSON)
	}()
	if err != nil {
		fmt.Fprintf(stderr, "gpulens-verify burn: error: --output.json: %v\n", err)
		return false
	}
	return true
}

func fmtBytes(b uint64) string {
	if b == 0 {
		return "nothing"
	}
	return bytesize.Format(b)
}
