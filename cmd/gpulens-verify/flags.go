package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/promslog/flag"
	"github.com/prometheus/common/version"

	"github.com/gpulens/gpulens/internal/bytesize"
	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/internal/cudaver"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/gpuspec"
	"github.com/gpulens/gpulens/internal/sim/simflag"
	"github.com/gpulens/gpulens/internal/verify"
)

// options holds the parsed and validated command line.
type options struct {
	repeat      int
	interval    time.Duration
	probe       gpuprobe.Config
	expect      verify.Expect
	devices     []int
	outputJSON  string
	outputHTML  string
	strict      bool
	sim         *simflag.Flags
	cudaLibrary string
	log         *promslog.Config
}

// raw flag values, validated into options by parseFlags.
type rawFlags struct {
	budget, stolenWindow       time.Duration
	maxMemory, fillLimit, vram uint64
	fillLimitSet, vramSet      bool
	fill                       bool
	expectPCIe, expectDriver   string
	expectCUDA, devices        string
	expectDevices              int
	expectDevicesSet           bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	app, o, r := newApp(stderr)
	if _, err := app.Parse(args); err != nil {
		return nil, err
	}

	if err := o.sim.Validate(time.Now()); err != nil {
		return nil, err
	}
	if o.repeat < 1 {
		return nil, fmt.Errorf("--repeat must be at least 1, got %d", o.repeat)
	}
	if o.interval < 0 {
		return nil, fmt.Errorf("--interval must not be negative, got %s", o.interval)
	}
	if r.budget <= 0 {
		return nil, fmt.Errorf("--probe.budget must be positive, got %s", r.budget)
	}
	if r.stolenWindow <= 0 || r.stolenWindow >= r.budget {
		return nil, fmt.Errorf("--probe.stolen-window must be positive and shorter than --probe.budget (%s), got %s", r.budget, r.stolenWindow)
	}
	o.probe.GPUTimeBudget, o.probe.StolenWindow = r.budget, r.stolenWindow
	o.probe.MaxMemoryBytes = r.maxMemory
	o.probe.Fill, o.probe.FillLimitBytes = r.fill, r.fillLimit
	if r.fillLimitSet && !r.fill {
		return nil, fmt.Errorf("--vram.fill-limit needs --vram.fill")
	}
	if err := o.probe.Validate(); err != nil {
		return nil, fmt.Errorf("probe settings (--probe.*, --vram.*): %w", err)
	}

	if o.expect.GPU != "" {
		s, err := gpuspec.ByKey(o.expect.GPU)
		if err != nil {
			return nil, fmt.Errorf("--expect.gpu: %w", err)
		}
		o.expect.GPU = s.Key
	}
	if r.vramSet && r.vram == 0 {
		return nil, fmt.Errorf("--expect.vram must be positive")
	}
	o.expect.VRAMBytes = r.vram
	if r.expectPCIe != "" {
		g, w, err := verify.ParsePCIe(r.expectPCIe)
		if err != nil {
			return nil, fmt.Errorf("--expect.pcie: %w", err)
		}
		o.expect.PCIeGen, o.expect.PCIeWidth = g, w
	}
	if r.expectDriver != "" {
		if _, err := verify.CompareVersions(r.expectDriver, "0"); err != nil {
			return nil, fmt.Errorf("--expect.driver: %w", err)
		}
		o.expect.Driver = strings.TrimSpace(r.expectDriver)
	}
	if r.expectCUDA != "" {
		if _, err := cudaver.Parse(r.expectCUDA); err != nil {
			return nil, fmt.Errorf("--expect.cuda: %w", err)
		}
		o.expect.CUDA = strings.TrimSpace(r.expectCUDA)
	}
	if r.expectDevicesSet {
		if r.expectDevices < 1 {
			return nil, fmt.Errorf("--expect.devices must be at least 1, got %d", r.expectDevices)
		}
		o.expect.Devices = r.expectDevices
	}
	if r.devices != "" {
		devs, err := parseOrdinals(r.devices)
		if err != nil {
			return nil, fmt.Errorf("--devices: %w", err)
		}
		o.devices = devs
	}
	if err := checkOutputs(o.outputJSON, o.outputHTML); err != nil {
		return nil, err
	}
	return o, nil
}

// newApp declares gpulens-verify's flags, stored in the options and raw
// values it returns.
func newApp(stderr io.Writer) (*kingpin.Application, *options, *rawFlags) {
	app := kingpin.New("gpulens-verify", "One-shot host acceptance report for rented GPUs: reads NVML, runs the gpulens probe a few times on every CUDA device, and says whether each GPU is shared, partitioned or dedicated, how much VRAM is usable, whether compute and bandwidth are what the model delivers, whether neighbours steal GPU time, and whether the driver, CUDA and error handling are sound. Exit status: 0 every check passed (warnings allowed unless --strict), 1 a check failed, 2 bad input. `gpulens-verify compare --help`: reports compared figure by figure; `gpulens-verify burn --help`: a bounded GPU workload.")
	app.UsageWriter(stderr)
	app.ErrorWriter(stderr)
	def := gpuprobe.DefaultConfig()
	o := &options{log: &promslog.Config{Writer: stderr}, probe: def}
	r := &rawFlags{}
	app.Flag("repeat", "Probe every device this many times; figures are reported as median, min, max and coefficient of variation.").Default("3").IntVar(&o.repeat)
	cliflag.Duration(app, "interval", "Pause between rounds of probes (0s: back to back).", "2s", &o.interval)
	cliflag.Duration(app, "probe.budget", "GPU time one probe of one device may use (kernels and copies, the stolen-time window included).", def.GPUTimeBudget.String(), &r.budget)
	cliflag.Duration(app, "probe.stolen-window", "How long the stolen-time kernel watches the GPU timer in all, in 8 windows of an eighth each spread among the other measurements; shorter than --probe.budget.", def.StolenWindow.String(), &r.stolenWindow)
	cliflag.Bytes(app, "probe.max-memory", "Device memory the probe may take at most, its CUDA context's own included (the rest for the measurement buffers), e.g. 2GiB; it takes what the GPU needs (768MiB for the context and two copy buffers of 4x the L2 cache: 1168MiB on an H100, 1776MiB on a B200) and leaves a GPU with less free than that + 768MiB alone.", bytesize.Format(def.MaxMemoryBytes), &r.maxMemory)
	app.Flag("vram.fill", "Also allocate and touch device memory in 1 GiB steps until the driver refuses or --vram.fill-limit is reached, to measure the usable VRAM. Off by default: it briefly holds all free memory.").Default("false").BoolVar(&r.fill)
	cliflag.Bytes(app, "vram.fill-limit", "Stop the fill test at this size, e.g. 40GiB (default: no limit beyond what the driver grants).", "", &r.fillLimit).PlaceHolder("SIZE").IsSetByUser(&r.fillLimitSet)
	app.Flag("expect.gpu", "The GPU model you rented, one of: "+strings.Join(gpuspec.Names(), ", ")+". Checked against the device's name, and the figures are judged against its spec.").PlaceHolder("MODEL").StringVar(&o.expect.GPU)
	cliflag.Bytes(app, "expect.vram", "The memory each GPU should show, e.g. 80GiB or 80GB.", "", &r.vram).PlaceHolder("SIZE").IsSetByUser(&r.vramSet)
	app.Flag("expect.pcie", "The PCIe link each GPU should run at under load, e.g. gen5x16 or gen4x16.").PlaceHolder("genGxW").StringVar(&r.expectPCIe)
	app.Flag("expect.driver", "The oldest NVIDIA driver you accept, e.g. 550 or 550.54.15.").PlaceHolder("VERSION").StringVar(&r.expectDriver)
	app.Flag("expect.cuda", "The oldest CUDA version the driver must support, e.g. 12.4.").PlaceHolder("VERSION").StringVar(&r.expectCUDA)
	app.Flag("expect.devices", "How many CUDA devices this host should show.").PlaceHolder("N").IsSetByUser(&r.expectDevicesSet).IntVar(&r.expectDevices)
	app.Flag("devices", "Verify only these CUDA ordinals, e.g. 0,2 (default: every device).").PlaceHolder("LIST").StringVar(&r.devices)
	app.Flag("output.json", "Also write the report as JSON to this file.").PlaceHolder("FILE").StringVar(&o.outputJSON)
	app.Flag("output.html", "Also write the report as a self-contained HTML page to this file.").PlaceHolder("FILE").StringVar(&o.outputHTML)
	app.Flag("strict", "Exit 1 on warnings too, not only on failures.").Default("false").BoolVar(&o.strict)
	o.sim = simflag.Add(app, "Verify a simulated fleet instead of the real GPUs")
	app.Flag("cuda.library", "The CUDA driver library to load.").Default(gpuprobe.DefaultLibCUDA).StringVar(&o.cudaLibrary)
	flag.AddFlags(app, o.log)
	app.Version(version.Print("gpulens-verify"))
	app.HelpFlag.Short('h')
	return app, o, r
}

// parseOrdinals parses "0,2,3": distinct non-negative integers.
func parseOrdinals(s string) ([]int, error) {
	var out []int
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a list of CUDA ordinals (use e.g. 0,2)", s)
		}
		for _, o := range out {
			if o == n {
				return nil, fmt.Errorf("ordinal %d is listed twice", n)
			}
		}
		out = append(out, n)
	}
	return out, nil
}
