package collector

import (
	"context"
	"os"
	"strings"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// explain works out, for every device of a run with a stolen-time result,
// the part of it that the processes NVML showed do not explain
// (gpuprobe.EstimateUnexplained over its windows), once NVML's samples have
// been read past every window by a sample period (at most ActivityWait
// after the run; else it is unknown), and publishes.
func (p *ProbeCollector) explain(ctx context.Context, sts []*probeDevice) {
	src := p.opts.Activity
	deadline := p.now().Add(p.opts.ActivityWait)
	var ticks <-chan time.Time
	stop := func() {}
	defer func() { stop() }()
	changed := false
	for _, st := range sts {
		r := st.result
		if r == nil || r.Stolen == nil {
			continue
		}
		self := p.self(r)
		for {
			final := !p.now().Before(deadline)
			u := p.unexplained(src, st, r, self, final)
			if u.Reason == gpuprobe.UnknownSamplesNotRead && !final && !p.now().Before(deadline) {
				// The deadline passed during the look: look once more, the
				// last time.
				u = p.unexplained(src, st, r, self, true)
			}
			if u.Reason != gpuprobe.UnknownSamplesNotRead || !p.now().Before(deadline) {
				if !u.Known() {
					p.logger.Debug("probe: the unexplained stolen time is not known", "gpu", st.gpu, "uuid", st.uuid, "reason", u.Reason)
				}
				st.unexplained = &u
				changed = true
				break
			}
			if ticks == nil {
				ticks, stop = p.tick(activityPoll)
			}
			select {
			case <-ctx.Done():
				return
			case <-ticks:
			}
		}
	}
	if changed {
		p.publish()
	}
}

// unexplained is the unexplained stolen time of one device's result, with
// the probe's own process (self) left out of the tenants; final: the last
// look before the deadline (gpuprobe.NVMLActivity.Final).
func (p *ProbeCollector) unexplained(src ActivitySource, st *probeDevice, r *gpuprobe.Result, self uint32, final bool) gpuprobe.Unexplained {
	ws := r.Stolen.Windows
	switch {
	case src == nil || !st.matched:
		return gpuprobe.Unknown(gpuprobe.UnknownNoProcessUtilization)
	case len(ws) == 0:
		return gpuprobe.Unknown(gpuprobe.UnknownNoWindows)
	}
	a, unknown, raw := src.NVMLActivity(st.gpu, ws[0].Start, ws[len(ws)-1].End)
	switch {
	case raw && strings.HasPrefix(st.uuid, "MIG-"):
		return gpuprobe.Unknown(gpuprobe.UnknownMIG)
	case raw:
		return gpuprobe.RawUnexplained(r.Stolen)
	case unknown != "":
		return gpuprobe.Unknown(unknown)
	}
	a.Probe, a.Final = []uint32{self}, final
	return gpuprobe.EstimateUnexplained(r.Stolen, a)
}

// self is the exporter's own PID as NVML reports it: the one the probe
// found in NVML's process list (told to the process collectors), else the
// last one found, else the fallback (getpid or the host procfs's self
// link), logged once: in a container without the host's PID namespace the
// fallback is not NVML's, and the probe's own context would count as a
// tenant.
func (p *ProbeCollector) self(r *gpuprobe.Result) uint32 {
	if r.NVMLPID != 0 {
		if r.NVMLPID != p.selfPID {
			p.logger.Info("probe: found the exporter's own PID in NVML's process list", "pid", r.NVMLPID)
			p.selfPID = r.NVMLPID
			if p.opts.NVML != nil {
				p.opts.NVML.SetProbePID(r.NVMLPID)
			}
		}
		return r.NVMLPID
	}
	if p.selfPID != 0 {
		return p.selfPID
	}
	fallback := p.opts.SelfPID
	if fallback == 0 && p.opts.NVML != nil {
		fallback = p.opts.NVML.FallbackSelfPID()
	}
	if fallback == 0 {
		fallback = uint32(os.Getpid())
	}
	if !p.selfWarned {
		p.selfWarned = true
		p.logger.Warn("probe: NVML's process list did not tell the exporter's own PID apart; leaving out the procfs/getpid one, which is NVML's only in the host's PID namespace", "pid", fallback)
	}
	return fallback
}
