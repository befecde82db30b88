package gpusim

import (
	"fmt"
	"math"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gpulens/gpulens/internal/cudaver"
	"github.com/gpulens/gpulens/internal/nvmlret"
)

// Limits that keep a scenario (and a fuzzer) from asking for absurd work.
const (
	maxDevices     = 1024
	maxRatePerHour = 3600
	maxDuration    = 100 * 365 * 24 * time.Hour
	maxErrors      = 20
	// maxPricePerHour bounds price_usd_per_hour (USD per GPU-hour).
	maxPricePerHour = 1000
)

func parseDuration(l *errList, path, s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		l.add(path, "invalid duration %q (use Go syntax such as 500ms, 30s, 5m, 1h30m)", s)
		return def
	}
	if d < 0 {
		l.add(path, "duration %s must not be negative", s)
		return def
	}
	if d > maxDuration {
		l.add(path, "duration %s is longer than 100 years", s)
		return def
	}
	return d
}

func secs(d time.Duration) float64 { return d.Seconds() }

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// sigKind is the unit and range of one kind of signal.
type sigKind struct {
	lo, hi float64
	unit   string
}

var (
	percentKind = sigKind{0, 100, "percent"}
	powerKind   = sigKind{0, 5000, "watts"}
	pcieKind    = sigKind{0, 1 << 20, "MiB/s"}
)

func validateSignal(l *errList, path string, r *rawSignal, k sigKind) *signal {
	if r == nil {
		return nil
	}
	s := &signal{lo: k.lo, hi: k.hi}
	shapeName := r.Shape
	if shapeName == "" {
		if r.Value != nil {
			shapeName = "constant"
		} else {
			l.add(path, "missing shape (one of %s), or give a value for a constant", strings.Join(shapeList(), ", "))
			return nil
		}
	}
	sh, ok := shapeNames[shapeName]
	if !ok {
		l.add(path+".shape", "unknown shape %q (one of %s)", shapeName, strings.Join(shapeList(), ", "))
		return nil
	}
	s.shape = sh
	inRange := func(p string, v float64) bool {
		if !finite(v) || v < k.lo || v > k.hi {
			l.add(p, "%v is out of range [%v, %v] %s", v, k.lo, k.hi, k.unit)
			return false
		}
		return true
	}
	if sh == shapeConstant {
		if r.Value == nil {
			l.add(path+".value", "missing value for a constant signal")
			return nil
		}
		if r.Min != nil || r.Max != nil || r.Period != "" || r.Duty != nil {
			l.add(path, "a constant signal takes value (and noise), not min/max/period/duty")
		}
		inRange(path+".value", *r.Value)
		s.value = *r.Value
	} else {
		if r.Value != nil {
			l.add(path+".value", "value is only for shape constant; use min and max")
		}
		if r.Min == nil || r.Max == nil {
			l.add(path, "shape %s needs both min and max", shapeName)
			return nil
		}
		okMin, okMax := inRange(path+".min", *r.Min), inRange(path+".max", *r.Max)
		if okMin && okMax && *r.Min > *r.Max {
			l.add(path+".max", "max %v is below min %v", *r.Max, *r.Min)
		}
		s.min, s.max = *r.Min, *r.Max
		if r.Period == "" {
			l.add(path+".period", "missing period for shape %s", shapeName)
		}
		before := len(l.errs)
		p := parseDuration(l, path+".period", r.Period, 0)
		if r.Period != "" && len(l.errs) == before && p < time.Second {
			l.add(path+".period", "period %s must be at least 1s", r.Period)
		}
		s.period = secs(p)
		s.duty = 0.5
		if r.Duty != nil {
			if sh != shapeSquare {
				l.add(path+".duty", "duty is only for shape square")
			} else if !finite(*r.Duty) || *r.Duty <= 0 || *r.Duty >= 1 {
				l.add(path+".duty", "duty %v must be between 0 and 1 (exclusive)", *r.Duty)
			} else {
				s.duty = *r.Duty
			}
		}
		s.periodStep = secs(parseDuration(l, path+".period_step", r.PeriodStep, 0))
	}
	s.phase = secs(parseDuration(l, path+".phase", r.Phase, 0))
	s.phaseStep = secs(parseDuration(l, path+".phase_step", r.PhaseStep, 0))
	if !finite(r.Noise) || r.Noise < 0 || r.Noise > k.hi {
		l.add(path+".noise", "noise amplitude %v must be between 0 and %v %s", r.Noise, k.hi, k.unit)
	} else {
		s.noise = r.Noise
	}
	np := parseDuration(l, path+".noise_period", r.NoisePeriod, 10*time.Second)
	if np < 100*time.Millisecond {
		l.add(path+".noise_period", "noise_period %s must be at least 100ms", r.NoisePeriod)
		np = 10 * time.Second
	}
	s.noisePeriod = secs(np)
	return s
}

func shapeList() []string {
	var out []string
	for k := range shapeNames {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func validateRate(l *errList, path string, v float64) float64 {
	if !finite(v) || v < 0 || v > maxRatePerHour {
		l.add(path, "rate %v per hour must be between 0 and %d", v, maxRatePerHour)
		return 0
	}
	return v
}

var computeModes = map[string]nvml.ComputeMode{
	"":                  nvml.COMPUTEMODE_DEFAULT,
	"default":           nvml.COMPUTEMODE_DEFAULT,
	"exclusive_process": nvml.COMPUTEMODE_EXCLUSIVE_PROCESS,
	"prohibited":        nvml.COMPUTEMODE_PROHIBITED,
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		if k != "" {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

var nodeRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

var driverRE = regexp.MustCompile(`^\d{3}\.\d{1,3}(\.\d{1,3})?$`)

func validate(r *rawScenario, l *errList) *Scenario {
	sc := &Scenario{Name: r.Name, Description: r.Description}
	sc.driverVersion = "550.54.15"
	if r.DriverVersion != "" {
		if !driverRE.MatchString(r.DriverVersion) {
			l.add("driver_version", "invalid driver version %q (expected e.g. 550.54.15)", r.DriverVersion)
		}
		sc.driverVersion = r.DriverVersion
	}
	sc.cudaVersion = 12040
	if r.CudaVersion != "" {
		if v, err := cudaver.Parse(r.CudaVersion); err != nil {
			l.add("cuda_version", "invalid CUDA version %q (expected MAJOR.MINOR, e.g. 12.4)", r.CudaVersion)
		} else {
			sc.cudaVersion = v
		}
	}
	sc.callLatency = parseDuration(l, "call_latency", r.CallLatency, 0)
	if sc.callLatency > time.Hour {
		l.add("call_latency", "call_latency %s is longer than 1h", r.CallLatency)
	}

	if len(r.Devices) == 0 {
		l.add("devices", "at least one device group is required")
	}
	total := 0
	for gi := range r.Devices {
		g := &r.Devices[gi]
		gp := fmt.Sprintf("devices[%d]", gi)
		count := 1
		if g.Count != nil {
			count = *g.Count
			if count < 1 || count > maxDevices {
				l.add(gp+".count", "count %d must be between 1 and %d", count, maxDevices)
				continue
			}
		}
		if total+count > maxDevices {
			l.add(gp+".count", "the scenario has more than %d devices", maxDevices)
			continue
		}
		total += count
		m, ok := models[g.Model]
		if !ok {
			if g.Model == "" {
				l.add(gp+".model", "missing model (one of %s)", strings.Join(modelNames(), ", "))
			} else {
				l.add(gp+".model", "unknown model %q (one of %s)", g.Model, strings.Join(modelNames(), ", "))
			}
			continue
		}
		base := deviceSpec{model: m, group: gi, persistence: true, node: g.Node}
		if g.Node != "" && !nodeRE.MatchString(g.Node) {
			l.add(gp+".node", "invalid node name %q (letters, digits, '.', '_' and '-', at most 63)", g.Node)
		}
		base.mig = validateMig(l, gp+".mig", g.Mig, m)
		base.util = validateSignal(l, gp+".util", g.Util, percentKind)
		if base.util == nil && g.Util == nil {
			base.util = &signal{shape: shapeConstant, lo: 0, hi: 100}
		}
		base.memUtil = validateSignal(l, gp+".memory_util", g.MemoryUtil, percentKind)
		base.memUsed = validateSignal(l, gp+".memory_used", g.MemoryUsed, percentKind)
		base.power = validateSignal(l, gp+".power", g.Power, powerKind)
		base.encUtil = validateSignal(l, gp+".encoder_util", g.EncoderUtil, percentKind)
		base.decUtil = validateSignal(l, gp+".decoder_util", g.DecoderUtil, percentKind)
		base.pcieRx = validateSignal(l, gp+".pcie_rx", g.PcieRx, pcieKind)
		base.pcieTx = validateSignal(l, gp+".pcie_tx", g.PcieTx, pcieKind)
		base.powerLimitW = m.tdpW
		if g.PowerLimit != nil {
			v := *g.PowerLimit
			if !finite(v) || v < 100 || v > m.tdpW {
				l.add(gp+".power_limit", "power_limit %v W must be between 100 and the board's %v W", v, m.tdpW)
			} else {
				base.powerLimitW = v
			}
		}
		base.ambientC = 30
		if g.Ambient != nil {
			v := *g.Ambient
			if !finite(v) || v < 0 || v > 60 {
				l.add(gp+".ambient", "ambient %v °C must be between 0 and 60", v)
			} else {
				base.ambientC = v
			}
		}
		if g.ECC != nil {
			base.eccCorrPerHour = validateRate(l, gp+".ecc.corrected_per_hour", g.ECC.CorrectedPerHour)
			base.eccUncPerHour = validateRate(l, gp+".ecc.uncorrected_per_hour", g.ECC.UncorrectedPerHour)
		}
		base.replaysPerHour = validateRate(l, gp+".pcie_replays_per_hour", g.PcieReplaysPerHour)
		if g.RandomXids != nil {
			base.xidPerHour = validateRate(l, gp+".random_xids.per_hour", g.RandomXids.PerHour)
			if base.xidPerHour > 0 && len(g.RandomXids.Codes) == 0 {
				l.add(gp+".random_xids.codes", "at least one XID code is required")
			}
			for i, c := range g.RandomXids.Codes {
				if c < 1 || c > 999 {
					l.add(fmt.Sprintf("%s.random_xids.codes[%d]", gp, i), "XID %d must be between 1 and 999", c)
				}
				base.xidCodes = append(base.xidCodes, uint64(c))
			}
		}
		if g.PersistenceMode != nil {
			base.persistence = *g.PersistenceMode
		}
		cm, ok := computeModes[g.ComputeMode]
		if !ok {
			l.add(gp+".compute_mode", "unknown compute_mode %q (one of %s)", g.ComputeMode, strings.Join(sortedKeys(computeModes), ", "))
		}
		base.computeMode = cm
		if g.RemappedRows != nil {
			rr := *g.RemappedRows
			if rr.Correctable < 0 || rr.Uncorrectable < 0 || rr.Correctable > 1<<20 || rr.Uncorrectable > 1<<20 {
				l.add(gp+".remapped_rows", "row counts must be between 0 and %d", 1<<20)
			}
			base.remapped = rr
		}
		validateHostView(l, gp, g, m, &base)
		base.probe = validateProbe(l, gp+".probe", g.Probe)
		base.nvml = validateNVML(l, gp+".nvml", g.NVML)
		if g.PriceUSDPerHour != nil {
			if v := *g.PriceUSDPerHour; !finite(v) || v < 0 || v > maxPricePerHour {
				l.add(gp+".price_usd_per_hour", "price %v USD per GPU-hour must be between 0 and %d", v, maxPricePerHour)
			} else {
				base.price, base.hasPrice = v, true
			}
		}
		for k := 0; k < count; k++ {
			d := base
			d.inGroup = k
			d.util = base.util.forDevice(k)
			d.memUtil = base.memUtil.forDevice(k)
			d.memUsed = base.memUsed.forDevice(k)
			d.power = base.power.forDevice(k)
			d.encUtil = base.encUtil.forDevice(k)
			d.decUtil = base.decUtil.forDevice(k)
			d.pcieRx = base.pcieRx.forDevice(k)
			d.pcieTx = base.pcieTx.forDevice(k)
			for _, s := range []*signal{d.util, d.memUtil, d.memUsed, d.power, d.encUtil, d.decUtil, d.pcieRx, d.pcieTx} {
				if s != nil && s.shape != shapeConstant && s.periodStep != 0 && s.period < 1 {
					l.add(gp, "device %d of the group gets period %gs from period_step; it must stay at least 1s", k, s.period)
					break
				}
			}
			sc.devices = append(sc.devices, &d)
		}
	}

	for fi := range r.Faults {
		f := &r.Faults[fi]
		fp := fmt.Sprintf("faults[%d]", fi)
		kind, ok := faultKinds[f.Kind]
		if !ok {
			if f.Kind == "" {
				l.add(fp+".kind", "missing kind (one of %s)", strings.Join(sortedKeys(faultKinds), ", "))
			} else {
				l.add(fp+".kind", "unknown kind %q (one of %s)", f.Kind, strings.Join(sortedKeys(faultKinds), ", "))
			}
			continue
		}
		fs := &faultSpec{kind: kind, source: fp}
		if f.GPU == nil {
			l.add(fp+".gpu", "missing gpu index")
		} else if *f.GPU < 0 || *f.GPU >= total {
			l.add(fp+".gpu", "gpu %d does not exist (the scenario has %d devices, 0-%d)", *f.GPU, total, total-1)
		} else {
			fs.gpu = *f.GPU
		}
		only := func(allowed ...string) {
			set := map[string]bool{}
			for _, a := range allowed {
				set[a] = true
			}
			check := func(name string, present bool) {
				if present && !set[name] {
					l.add(fp+"."+name, "%s does not apply to kind %s", name, f.Kind)
				}
			}
			check("xid", f.XID != 0)
			check("at", f.At != "")
			check("every", f.Every != "")
			check("call", f.Call != "")
			check("error", f.Error != "")
			check("delay", f.Delay != "")
			check("from", f.From != "")
			check("until", f.Until != "")
		}
		switch kind {
		case faultXID:
			only("xid", "at", "every")
			if f.XID < 1 || f.XID > 999 {
				l.add(fp+".xid", "XID %d must be between 1 and 999", f.XID)
			}
			fs.xid = uint64(f.XID)
			if f.At == "" {
				l.add(fp+".at", "missing at (sim time of the first event)")
			}
			fs.at = secs(parseDuration(l, fp+".at", f.At, 0))
			if f.Every != "" {
				ev := parseDuration(l, fp+".every", f.Every, 0)
				if ev < time.Second {
					l.add(fp+".every", "every %s must be at least 1s", f.Every)
				} else {
					fs.every = secs(ev)
				}
			}
		case faultLost:
			only("at")
			if f.At == "" {
				l.add(fp+".at", "missing at (sim time the GPU falls off the bus)")
			}
			fs.at = secs(parseDuration(l, fp+".at", f.At, 0))
		case faultError, faultSlow, faultHang:
			if kind == faultError {
				only("call", "error", "from", "until")
				// Any NVML error code, by its constant's name.
				ret, ok := nvmlret.Parse(f.Error)
				if !ok || ret == nvml.SUCCESS {
					if f.Error == "" {
						l.add(fp+".error", "missing error (one of %s)", strings.Join(nvmlret.Names(), ", "))
					} else {
						l.add(fp+".error", "unknown error %q (one of %s)", f.Error, strings.Join(nvmlret.Names(), ", "))
					}
				}
				fs.ret = ret
			} else {
				only("call", "delay", "from", "until")
				if f.Delay == "" {
					l.add(fp+".delay", "missing delay")
				}
				before := len(l.errs)
				fs.delay = parseDuration(l, fp+".delay", f.Delay, 0)
				if f.Delay != "" && len(l.errs) == before && (fs.delay <= 0 || fs.delay > time.Hour) {
					l.add(fp+".delay", "delay %s must be above 0 and at most 1h", f.Delay)
				}
			}
			switch {
			case f.Call == "":
				l.add(fp+".call", "missing call (a device method name such as GetPowerUsage, or * for all)")
			case f.Call != "*" && !knownCall(f.Call):
				l.add(fp+".call", "unknown call %q (one of %s, or *)", f.Call, strings.Join(deviceCallNames(), ", "))
			}
			fs.call = f.Call
			fs.from = secs(parseDuration(l, fp+".from", f.From, 0))
			fs.until = secs(parseDuration(l, fp+".until", f.Until, 0))
			if f.Until != "" && fs.until <= fs.from {
				l.add(fp+".until", "until %s must be after from %q", f.Until, f.From)
			}
		}
		sc.faults = append(sc.faults, fs)
	}
	validateTenants(l, r.Tenants, sc)
	sc.host = validateHost(l, r.Host)
	if sc.host != nil && sc.host.selfHostPID != 0 {
		for i, ts := range sc.tenants {
			if ts.pid == sc.host.selfHostPID {
				l.add("host.self_host_pid", "self_host_pid %d is tenants[%d]'s pid", ts.pid, i)
			}
		}
	}
	return sc
}
