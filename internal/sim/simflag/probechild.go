package simflag

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// RunProbeChild is `PROGRAM probe-child` (gpuprobe.ChildCommand), for
// gpulens-exporter and gpulens-verify alike: the probe of one MIG instance
// that CUDA does not show PROGRAM (CUDA enumerates one MIG instance per
// process), in a process PROGRAM starts itself with
// CUDA_VISIBLE_DEVICES=MIG-<uuid> (gpuprobe.ChildProber). The request comes
// on stdin, the result goes to stdout as JSON; the flags choose the driver
// as PROGRAM's own: --cuda.library, or the simulated fleet of its --sim.*
// flags on its timeline (AddChild). Not for people: PROGRAM passes
// everything. It returns the exit status.
func RunProbeChild(ctx context.Context, program string, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	app := kingpin.New(program+" "+gpuprobe.ChildCommand, "Probe one MIG instance for "+program+" (started by it).")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	sim := AddChild(app)
	var cudaLibrary string
	app.Flag("cuda.library", "CUDA driver library.").Default(gpuprobe.DefaultLibCUDA).StringVar(&cudaLibrary)
	logCfg := &promslog.Config{Writer: stderr}
	flag.AddFlags(app, logCfg)
	if _, err := app.Parse(args); err != nil {
		fmt.Fprintf(stderr, "%s %s: error: %v\n", program, gpuprobe.ChildCommand, err)
		return 2
	}
	if err := sim.ValidateChild(); err != nil {
		fmt.Fprintf(stderr, "%s %s: error: %v\n", program, gpuprobe.ChildCommand, err)
		return 2
	}
	return gpuprobe.RunChild(ctx, stdin, stdout, func() (gpuprobe.Driver, error) { return childDriver(sim, cudaLibrary) }, promslog.New(logCfg))
}

// childDriver is the probe child's CUDA driver: the simulated fleet's as
// CUDA_VISIBLE_DEVICES shows it, or libcuda (which reads it itself).
func childDriver(sim *Flags, cudaLibrary string) (gpuprobe.Driver, error) {
	if sim.Simulated() {
		fleet, err := sim.Fleet()
		if err != nil {
			return nil, err
		}
		return fleet.ProbeDriverVisible(os.Getenv("CUDA_VISIBLE_DEVICES")), nil
	}
	c, err := gpuprobe.Open(cudaLibrary)
	if err != nil {
		return nil, fmt.Errorf("--cuda.library %s: %w", cudaLibrary, err)
	}
	return c, nil
}
