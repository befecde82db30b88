package verify

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/clockevent"
)

// SampleInterval is how often NVML is read while a probe runs, to catch
// clock events (throttling) and the PCIe link under load. A sample is also
// taken when each probe starts and ends.
const SampleInterval = 100 * time.Millisecond

// LoadSamples is what NVML said while the probe loaded the GPU.
type LoadSamples struct {
	Samples int `json:"samples"`
	// ClockEventReasons is the OR of every sample's reasons.
	ClockEventReasons uint64         `json:"clock_event_reasons"`
	Reasons           []string       `json:"reasons,omitempty"`
	ReasonSamples     map[string]int `json:"reason_samples,omitempty"` // samples in which each reason was set
	MinSMClockMHz     uint32         `json:"min_sm_clock_mhz,omitempty"`
	MaxSMClockMHz     uint32         `json:"max_sm_clock_mhz,omitempty"`
	// The best link seen: the generation drops at idle, so the highest
	// current generation and width seen under load is what the link can do.
	PCIeGen   int         `json:"pcie_gen,omitempty"`
	PCIeWidth int         `json:"pcie_width,omitempty"`
	MaxPowerW float64     `json:"max_power_w,omitempty"`
	Errors    []CallError `json:"errors,omitempty"`
}

// sampler accumulates LoadSamples of one GPU; safe for one goroutine
// sampling and another reading after stop.
type sampler struct {
	mu  sync.Mutex
	d   nvml.Device
	out LoadSamples
	na  []string
	// procs are NVML's per-process utilisation samples read while the
	// probe runs (procRun), newer than procSeen each time: the driver keeps
	// a buffer of unstated length, which a probe stretched by a loaded host
	// can outlast before explain reads it (then no sample is left of the
	// probe's stolen-time windows). procOff: the call failed or is not
	// supported; explain says why.
	procs    []nvml.ProcessUtilizationSample
	procSeen uint64
	procRun  bool
	procOff  bool
}

func newSampler(d nvml.Device) *sampler {
	return &sampler{d: d, out: LoadSamples{ReasonSamples: map[string]int{}}}
}

func (s *sampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readProcs()
	var errs []CallError
	r := reader{&s.na, &errs}
	s.out.Samples++
	var reasons uint64
	if r.do("GetCurrentClocksEventReasons", func() (ret nvml.Return) { reasons, ret = s.d.GetCurrentClocksEventReasons(); return }) {
		s.out.ClockEventReasons |= reasons
		for _, n := range clockevent.Names(reasons) {
			s.out.ReasonSamples[n]++
		}
	}
	// An idle GPU's clock (before a probe ramps up) says nothing about
	// what it does under load.
	idle := reasons&clockevent.GpuIdle != 0
	var mhz uint32
	if r.do("GetClockInfo(sm)", func() (ret nvml.Return) { mhz, ret = s.d.GetClockInfo(nvml.CLOCK_SM); return }) && mhz > 0 && !idle {
		if s.out.MinSMClockMHz == 0 || mhz < s.out.MinSMClockMHz {
			s.out.MinSMClockMHz = mhz
		}
		s.out.MaxSMClockMHz = max(s.out.MaxSMClockMHz, mhz)
	}
	var gen, width int
	if r.do("GetCurrPcieLinkGeneration", func() (ret nvml.Return) { gen, ret = s.d.GetCurrPcieLinkGeneration(); return }) {
		s.out.PCIeGen = max(s.out.PCIeGen, gen)
	}
	if r.do("GetCurrPcieLinkWidth", func() (ret nvml.Return) { width, ret = s.d.GetCurrPcieLinkWidth(); return }) {
		s.out.PCIeWidth = max(s.out.PCIeWidth, width)
	}
	var mw uint32
	if r.do("GetPowerUsage", func() (ret nvml.Return) { mw, ret = s.d.GetPowerUsage(); return }) {
		s.out.MaxPowerW = max(s.out.MaxPowerW, float64(mw)/1000)
	}
	// Keep the first error of each call only: a broken call fails every
	// sample the same way.
	for _, e := range errs {
		seen := false
		for _, o := range s.out.Errors {
			seen = seen || o.Call == e.Call
		}
		if !seen {
			s.out.Errors = append(s.out.Errors, e)
		}
	}
}

// readProcs appends NVML's per-process samples newer than the last read
// (while a probe runs); s.mu held.
func (s *sampler) readProcs() {
	if !s.procRun || s.procOff {
		return
	}
	samples, ret := s.d.GetProcessUtilization(s.procSeen)
	switch ret {
	case nvml.SUCCESS:
		for _, x := range samples {
			s.procSeen = max(s.procSeen, x.TimeStamp)
		}
		s.procs = append(s.procs, samples...)
	case nvml.ERROR_NOT_FOUND: // nothing newer
	default:
		s.procOff = true
	}
}

// processSamples returns the per-process samples read during the last
// probe (during).
func (s *sampler) processSamples() []nvml.ProcessUtilizationSample {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.procs)
}

// during samples at the start, every interval while f runs, and at the
// end; NVML's per-process samples are read each time too, kept for
// processSamples.
func (s *sampler) during(ctx context.Context, interval time.Duration, f func()) {
	s.mu.Lock()
	s.procs, s.procRun = nil, true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.procRun = false
		s.mu.Unlock()
	}()
	s.sample()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	f()
	close(done)
	wg.Wait()
	s.sample()
}

func (s *sampler) result() *LoadSamples {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.out
	out.Reasons = clockevent.Names(out.ClockEventReasons)
	out.ReasonSamples = make(map[string]int, len(s.out.ReasonSamples))
	for k, v := range s.out.ReasonSamples {
		out.ReasonSamples[k] = v
	}
	if len(out.ReasonSamples) == 0 {
		out.ReasonSamples = nil
	}
	out.Errors = append([]CallError(nil), s.out.Errors...)
	return &out
}
