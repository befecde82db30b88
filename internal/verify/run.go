package verify

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuid"
	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/gpuspec"
)

// Sources are the two ways of seeing the GPUs. Either may be missing; the
// report then says what the other one gives and which checks it could not
// make.
type Sources struct {
	// NVML is an initialised library, or nil with NVMLError saying why.
	NVML      Library
	NVMLError string
	// Prober runs the probe, or is nil with CUDAError saying why (no
	// libcuda, no permission).
	Prober    gpuprobe.Prober
	CUDAError string
	// Instances, when set, probes each MIG instance NVML lists and CUDA
	// does not show this process (one MIG instance per process), in a
	// child process of its own (mig.go); nil: those are not reported.
	Instances InstanceProber
	// Emulated, when set, is how much wall time the simulated CUDA driver
	// has spent emulating the GPU's work inside its calls, added up
	// (gpusim.Fleet.ProbeEmulated): the simulator's time, not the GPU's,
	// which a loaded host stretches. A probe's deadline leaves its growth
	// out, as the driver's virtual clock does; a hung call (one that never
	// returns) still meets the deadline. Nil: a real driver, the deadline
	// is wall time.
	Emulated func() time.Duration
}

// Options parameterise Run.
type Options struct {
	Tool, Version string
	Simulated     *Simulation
	// Repeat probes each device this many times (at least 1), Interval
	// apart (0: back to back).
	Repeat   int
	Interval time.Duration
	Probe    gpuprobe.Config
	// Devices limits the report to these CUDA ordinals (nil: all).
	Devices []int
	Expect  Expect
	Strict  bool
	// SelfPID is this process, left out of NVML's process lists.
	SelfPID int
	// Now is the clock of the report's timestamps; nil: time.Now.
	Now func() time.Time
	// NVMLNow is the clock of NVML's sample timestamps (and of the probe's
	// stolen-time windows): when NVML's samples were read; nil: time.Now.
	NVMLNow func() time.Time
	// Sleep waits between repeats; nil: a timer that ctx cancels.
	Sleep func(ctx context.Context, d time.Duration) error
	// SampleInterval is how often NVML is sampled during a probe; 0:
	// SampleInterval.
	SampleInterval time.Duration
	// ProbeTimeout bounds one probe; 0: gpuprobe.Deadline(Probe).
	ProbeTimeout time.Duration
	Logger       *slog.Logger
}

// BadInputError is an option that the hardware found impossible (a
// --devices ordinal CUDA does not have); gpulens-verify exits 2 on it.
type BadInputError struct{ Msg string }

func (e *BadInputError) Error() string { return e.Msg }

// Run gathers, measures and judges, and returns the report. It fails only
// when ctx ends or an option is impossible on this host (*BadInputError);
// every other problem is a check in the report.
func Run(ctx context.Context, src Sources, o Options) (*Report, error) {
	if o.Repeat < 1 {
		return nil, &BadInputError{Msg: fmt.Sprintf("repeat must be at least 1, got %d", o.Repeat)}
	}
	now := o.Now
	if now == nil {
		now = time.Now
	}
	sleep := o.Sleep
	if sleep == nil {
		sleep = sleepCtx
	}
	logger := o.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	nvmlNow := o.NVMLNow
	if nvmlNow == nil {
		nvmlNow = time.Now
	}
	every := o.SampleInterval
	if every <= 0 {
		every = SampleInterval
	}
	rep := &Report{
		SchemaVersion: SchemaVersion, Tool: o.Tool, Version: o.Version, Started: now(), Simulated: o.Simulated,
		Settings: Settings{Repeat: o.Repeat, Interval: o.Interval, Probe: ProbeSettingsOf(o.Probe), Expect: o.Expect,
			Strict: o.Strict, Devices: o.Devices},
	}

	// NVML first, before any probe holds a context: the process list is
	// then only other people's.
	var handles []nvml.Device
	if src.NVML != nil {
		rep.Host.NVML, handles = GatherNVML(src.NVML, o.SelfPID)
	} else {
		rep.Host.NVMLError = orDefault(src.NVMLError, "NVML not available")
	}

	prober := src.Prober
	if prober != nil {
		devs, err := prober.Devices(ctx)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if err != nil {
			rep.Host.CUDAError = "listing CUDA devices: " + err.Error()
			prober = nil
		} else {
			rep.Host.CUDADevices = devs
			if len(devs) > 0 {
				rep.Host.CUDADriverVersion = devs[0].DriverVersion
			}
		}
	} else {
		rep.Host.CUDAError = orDefault(src.CUDAError, "libcuda not available")
	}

	devices, devHandles, err := selectDevices(rep, handles, prober != nil, o.Devices)
	if err != nil {
		return nil, err
	}
	if prober != nil {
		devices, devHandles = addHiddenMIG(devices, devHandles, rep.Host.NVML, handles, src.Instances, o.Devices)
	}

	// Probe: every device once per round, rounds Interval apart, so that
	// the repeats sample the GPUs over the whole run.
	var samplers []*sampler
	for i := range devices {
		var s *sampler
		if devHandles[i] != nil && (devices[i].CUDA != nil || devices[i].ProbeChild) {
			s = newSampler(devHandles[i])
		}
		samplers = append(samplers, s)
	}
	if prober != nil {
		timeout := o.ProbeTimeout
		if timeout <= 0 {
			timeout = gpuprobe.Deadline(o.Probe)
		}
		for round := 0; round < o.Repeat; round++ {
			if round > 0 && o.Interval > 0 {
				if err := sleep(ctx, o.Interval); err != nil {
					return nil, err
				}
			}
			for i := range devices {
				d := &devices[i]
				pr, ordinal, ok := deviceProber(d, prober, src.Instances)
				if !ok {
					continue
				}
				run := probeOnce(ctx, pr, ordinal, o.Probe, timeout, src.Emulated, samplers[i], every)
				noteChild(d, run)
				switch {
				case d.MIG != nil && run.Result != nil && run.Result.Stolen != nil:
					u := gpuprobe.Unknown(gpuprobe.UnknownMIG)
					run.Unexplained = &u
				case devHandles[i] != nil && d.NVML != nil:
					explain(ctx, &run, devHandles[i], samplers[i].processSamples(), uint32(o.SelfPID), d.NVML.Processes, nvmlNow, sleep)
				case run.Result != nil && run.Result.Stolen != nil:
					u := gpuprobe.Unknown(gpuprobe.UnknownNoProcessUtilization)
					run.Unexplained = &u
				}
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				if run.Error != "" {
					logger.Warn("probe failed", "device", d.Label, "round", round+1, "err", run.Error)
				}
				d.Runs = append(d.Runs, run)
			}
		}
	}
	for i := range devices {
		if samplers[i] != nil && devices[i].NVML != nil {
			devices[i].NVML.UnderLoad = samplers[i].result()
		}
	}

	for i := range devices {
		d := &devices[i]
		d.Figures = aggregate(d.Runs)
		spec, from := chooseSpec(d, o.Expect.GPU)
		if spec != nil {
			d.Spec = &SpecRef{Key: spec.Key, Model: spec.Model, From: from, Estimated: spec.Estimated()}
		}
		ev := &deviceEval{d: d, spec: spec, o: o, rep: rep, probed: prober != nil}
		d.Checks = ev.checks()
		d.Answers = ev.answers()
		d.Verdict = StatusPass
		for _, c := range d.Checks {
			d.Verdict = Worse(d.Verdict, c.Status)
		}
	}
	rep.Devices = devices
	rep.Checks = hostChecks(rep, o)
	rep.Answers = hostAnswers(rep)
	rep.Finished = now()
	rep.summarise()
	return rep, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func probeOnce(ctx context.Context, p gpuprobe.Prober, ordinal int, cfg gpuprobe.Config, timeout time.Duration, emulated func() time.Duration, s *sampler, every time.Duration) ProbeRun {
	pctx, cancel := probeDeadline(ctx, timeout, emulated)
	defer cancel()
	var res gpuprobe.Result
	var err error
	f := func() { res, err = p.Probe(pctx, ordinal, cfg) }
	if s != nil {
		s.during(pctx, every, f)
	} else {
		f()
	}
	if err != nil {
		msg := err.Error()
		if gpuprobe.ErrorLabel(err) == gpuprobe.LabelDeadline {
			msg = fmt.Sprintf("probe did not finish within %s: %v", timeout, err)
		}
		return ProbeRun{Error: msg}
	}
	if res.Skipped != nil {
		return ProbeRun{Skipped: res.Skipped}
	}
	return ProbeRun{Result: &res}
}

// probeDeadline is ctx cancelled timeout after now, as
// context.WithTimeout, less the wall time emulated says the simulator spent
// emulating (nil: none): the deadline moves later by it, checked again
// when it passes, and the context then says context.DeadlineExceeded.
func probeDeadline(ctx context.Context, timeout time.Duration, emulated func() time.Duration) (context.Context, context.CancelFunc) {
	if emulated == nil {
		return context.WithTimeout(ctx, timeout)
	}
	inner, cancel := context.WithCancel(ctx)
	d := &emulatedDeadline{Context: inner}
	start, base := time.Now(), emulated()
	go func() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		for {
			select {
			case <-inner.Done(): // the parent's end or the caller's cancel
				return
			case <-t.C:
			}
			left := timeout - (time.Since(start) - max(0, emulated()-base))
			if left <= 0 {
				d.expired.Store(true)
				cancel()
				return
			}
			t.Reset(left)
		}
	}()
	return d, cancel
}

// emulatedDeadline is probeDeadline's context: done when its deadline
// passes (Err: context.DeadlineExceeded) or its parent is.
type emulatedDeadline struct {
	context.Context
	expired atomic.Bool
}

func (d *emulatedDeadline) Err() error {
	if d.expired.Load() {
		return context.DeadlineExceeded
	}
	return d.Context.Err()
}

// selectDevices builds the devices to report: the CUDA devices (matched to
// NVML GPUs) when CUDA works, else NVML's GPUs. handles are NVML's device
// handles by index (for sampling under load).
func selectDevices(rep *Report, handles []nvml.Device, haveCUDA bool, want []int) ([]Device, []nvml.Device, error) {
	var out []Device
	var outHandles []nvml.Device
	if haveCUDA {
		var ords []int
		for _, c := range rep.Host.CUDADevices {
			ords = append(ords, c.Ordinal)
		}
		for _, w := range want {
			if !slices.Contains(ords, w) {
				return nil, nil, &BadInputError{Msg: fmt.Sprintf("--devices: CUDA has no device %d (it sees %s)", w, describeOrdinals(ords))}
			}
		}
		for _, c := range rep.Host.CUDADevices {
			if len(want) > 0 && !slices.Contains(want, c.Ordinal) {
				continue
			}
			info := c
			d := Device{Label: fmt.Sprintf("CUDA %d", c.Ordinal), Name: c.Name, UUID: c.UUID, PCIBusID: c.PCIBusID, CUDA: &info}
			var h nvml.Device
			if rep.Host.NVML != nil {
				if gi, mig, how := matchNVML(c, rep.Host.NVML); gi >= 0 {
					facts := rep.Host.NVML.GPUs[gi]
					d.NVML, d.MatchedBy, d.MIG = &facts, how, mig
					if gi < len(handles) {
						h = handles[gi]
					}
				}
			}
			out = append(out, d)
			outHandles = append(outHandles, h)
		}
		return out, outHandles, nil
	}
	if rep.Host.NVML == nil {
		return nil, nil, nil
	}
	for _, w := range want {
		if w < 0 || w >= len(rep.Host.NVML.GPUs) {
			return nil, nil, &BadInputError{Msg: fmt.Sprintf("--devices: without CUDA the devices are NVML's GPUs, and there is no GPU %d (NVML sees %d)", w, len(rep.Host.NVML.GPUs))}
		}
	}
	for i, g := range rep.Host.NVML.GPUs {
		if len(want) > 0 && !slices.Contains(want, i) {
			continue
		}
		facts := g
		out = append(out, Device{Label: fmt.Sprintf("NVML GPU %d", i), Name: g.Name, UUID: g.UUID, PCIBusID: g.PCIBusID, NVML: &facts})
		outHandles = append(outHandles, nil)
	}
	return out, outHandles, nil
}

func describeOrdinals(ords []int) string {
	if len(ords) == 0 {
		return "no devices"
	}
	parts := make([]string, len(ords))
	for i, o := range ords {
		parts[i] = fmt.Sprint(o)
	}
	return "devices " + strings.Join(parts, ", ")
}

// matchNVML finds the NVML GPU of a CUDA device (gpuid.MatchCUDA: by UUID,
// the GPU's or one of its MIG devices', falling back to the PCI bus id). It
// returns the GPU's index in host.GPUs (-1: none), the MIG instance and how
// it matched.
func matchNVML(c gpuprobe.DeviceInfo, host *NVMLHost) (int, *MIGInstance, string) {
	ids := make([]gpuid.GPU, len(host.GPUs))
	for i, g := range host.GPUs {
		ids[i] = gpuid.GPU{UUID: g.UUID, BusID: g.PCIBusID}
		for _, m := range g.MIGInstances {
			ids[i].MIGUUIDs = append(ids[i].MIGUUIDs, m.UUID)
		}
	}
	m, ok := gpuid.MatchCUDA(c.UUID, c.PCIBusID, ids)
	if !ok {
		return -1, nil, ""
	}
	var mig *MIGInstance
	if m.MIG >= 0 {
		inst := host.GPUs[m.GPU].MIGInstances[m.MIG]
		mig = &inst
	}
	return m.GPU, mig, m.By
}

// chooseSpec picks the spec to judge a device against: --expect.gpu's when
// given (what the buyer paid for), else the one its name matches.
func chooseSpec(d *Device, expectKey string) (*gpuspec.Spec, string) {
	if expectKey != "" {
		if s, err := gpuspec.ByKey(expectKey); err == nil {
			return &s, "expect"
		}
	}
	if s, ok := gpuspec.Lookup(deviceName(d)); ok {
		return &s, "name"
	}
	return nil, ""
}

// deviceName is the best name of a device: NVML's (which names vGPU
// profiles), else CUDA's.
func deviceName(d *Device) string {
	if d.MIG != nil && d.MIG.Name != "" {
		return d.MIG.Name
	}
	if d.NVML != nil && d.NVML.Name != "" {
		return d.NVML.Name
	}
	return d.Name
}

// aggregate summarises the runs' figures. Zero figures are "not measured"
// (gpuprobe.Result), except the stolen ratio, which is a measurement at 0.
func aggregate(runs []ProbeRun) Figures {
	var v [17][]float64
	add := func(i int, x float64) {
		if x > 0 {
			v[i] = append(v[i], x)
		}
	}
	for _, r := range runs {
		res := r.Result
		if res == nil {
			continue
		}
		add(0, res.H2DBytesPerSecond)
		add(1, res.D2HBytesPerSecond)
		add(2, res.DeviceCopyBytesPerSecond)
		add(3, res.FP32FLOPS)
		add(4, res.FP16TensorFLOPS)
		add(5, res.BF16TensorFLOPS)
		add(6, res.LaunchLatency.Seconds())
		add(7, res.LaunchLatencyP99.Seconds())
		if st := res.Stolen; st != nil && st.Window > 0 {
			if u := r.UnexplainedStolenRatio; u != nil {
				v[16] = append(v[16], *u)
			}
			v[8] = append(v[8], st.Ratio)
			v[9] = append(v[9], st.MaxRatio)
			add(10, st.GapMedian.Seconds())
			add(11, st.GapP90.Seconds())
			add(12, st.GapMax.Seconds())
		}
		if m := res.Memory; m != nil {
			add(13, float64(m.TotalBytes))
			add(14, float64(m.FreeBytes))
			if m.FillTested {
				add(15, float64(m.UsableBytes))
			}
		}
	}
	return Figures{
		H2DBytesPerSecond: NewStat(v[0]), D2HBytesPerSecond: NewStat(v[1]), DeviceCopyBytesPerSecond: NewStat(v[2]),
		FP32FLOPS: NewStat(v[3]), FP16TensorFLOPS: NewStat(v[4]), BF16TensorFLOPS: NewStat(v[5]),
		LaunchLatencySeconds: NewStat(v[6]), LaunchLatencyP99Seconds: NewStat(v[7]),
		StolenRatio: NewStat(v[8]), StolenMaxRatio: NewStat(v[9]), UnexplainedStolenRatio: NewStat(v[16]),
		StolenGapMedianSeconds: NewStat(v[10]), StolenGapP90Seconds: NewStat(v[11]), StolenGapMaxSeconds: NewStat(v[12]),
		MemoryTotalBytes: NewStat(v[13]), MemoryFreeBytes: NewStat(v[14]), MemoryUsableBytes: NewStat(v[15]),
	}
}

// explainWait bounds how long a run waits after a probe for NVML's samples
// to cover its stolen-time windows by a sample period.
const explainWait = 5 * time.Second

// explain fills run's Unexplained, VisibleSM and UnexplainedStolenRatio
// from NVML's per-process utilisation samples over the probe's stolen-time
// windows (gpuprobe.EstimateUnexplained; docs/metrics.md, "Stolen time"):
// this process (as NVML's process list showed it, else self) left out, the
// MPS clients one context with their server. It reads NVML's whole sample
// buffer, again after a sample period while the samples do not cover the
// last window yet (at most explainWait). read are the samples read while
// the probe ran (sampler.processSamples): a loaded host can stretch a probe
// beyond what the driver's buffer keeps, so they are counted beside the
// buffer's, each sample once.
func explain(ctx context.Context, run *ProbeRun, d nvml.Device, read []nvml.ProcessUtilizationSample, self uint32, procs *ProcessFacts, now func() time.Time, sleep func(context.Context, time.Duration) error) {
	res := run.Result
	if res == nil || res.Stolen == nil || res.Stolen.Window <= 0 {
		return
	}
	if res.NVMLPID != 0 {
		self = res.NVMLPID
	}
	var deadline time.Time
	var u gpuprobe.Unexplained
	for {
		samples, ret := d.GetProcessUtilization(0)
		if ret == nvml.SUCCESS || ret == nvml.ERROR_NOT_FOUND {
			samples, ret = mergeSamples(read, samples), nvml.SUCCESS
			if len(samples) == 0 {
				ret = nvml.ERROR_NOT_FOUND
			}
		}
		readAt := now()
		if deadline.IsZero() {
			deadline = readAt.Add(explainWait)
		}
		switch ret {
		case nvml.SUCCESS, nvml.ERROR_NOT_FOUND: // NOT_FOUND: no sample in the buffer
			a := gpuprobe.NVMLActivity{ReadUpTo: readAt, Probe: []uint32{self}, Final: !readAt.Before(deadline)}
			if ret == nvml.SUCCESS {
				for _, s := range samples {
					a.Samples = append(a.Samples, gpuprobe.NVMLSample(s.Pid, s.TimeStamp, s.SmUtil))
				}
			}
			if procs != nil {
				a.MPSClients = procs.MPSPIDs
			}
			u = gpuprobe.EstimateUnexplained(res.Stolen, a)
			if u.Reason == gpuprobe.UnknownSamplesNotRead && readAt.Before(deadline) {
				if err := sleep(ctx, a.Coverage()); err != nil {
					return
				}
				continue
			}
		case nvml.ERROR_NOT_SUPPORTED:
			u = gpuprobe.RawUnexplained(res.Stolen)
		default:
			u = gpuprobe.Unknown(gpuprobe.UnknownUtilizationFailed)
		}
		break
	}
	run.Unexplained = &u
	if !u.Known() || u.Basis != gpuprobe.BasisVisible {
		return
	}
	ratio := u.Ratio
	run.UnexplainedStolenRatio = &ratio
	run.VisibleSM = map[string]float64{}
	for _, w := range u.Windows {
		for pid, share := range w.Visible {
			key := strconv.FormatUint(uint64(pid), 10)
			if pid == gpuprobe.MPSContext {
				key = "mps"
			}
			run.VisibleSM[key] += share / float64(len(u.Windows))
		}
	}
}

// mergeSamples is buffer's samples and those of read that buffer no
// longer holds, each once (the same process and timestamp: the same
// sample), ordered by timestamp.
func mergeSamples(read, buffer []nvml.ProcessUtilizationSample) []nvml.ProcessUtilizationSample {
	type key struct {
		pid uint32
		ts  uint64
	}
	held := make(map[key]bool, len(buffer)+len(read))
	out := make([]nvml.ProcessUtilizationSample, 0, len(buffer)+len(read))
	for _, s := range append(slices.Clip(buffer), read...) {
		if k := (key{s.Pid, s.TimeStamp}); !held[k] {
			held[k] = true
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b nvml.ProcessUtilizationSample) int { return cmp.Compare(a.TimeStamp, b.TimeStamp) })
	return out
}
