package gpusim

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"go.yaml.in/yaml/v3"

	"github.com/gpulens/gpulens/internal/cudaver"
	"github.com/gpulens/gpulens/internal/nvmlret"
	"github.com/gpulens/gpulens/internal/yamlerr"
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

// Scenario is a parsed and validated simulated fleet description.
type Scenario struct {
	Name, Description string

	source        string
	driverVersion string
	cudaVersion   int // NVML encoding: 12040 for 12.4
	callLatency   time.Duration
	devices       []*deviceSpec
	faults        []*faultSpec
	tenants       []*tenantSpec
	host          *hostSpec // nil: no CPU count or pressure (hoststats.go)
}

// Nodes lists the node names the scenario's devices are spread over, sorted;
// empty when no group names a node.
func (s *Scenario) Nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range s.devices {
		if d.node != "" && !seen[d.node] {
			seen[d.node] = true
			out = append(out, d.node)
		}
	}
	sort.Strings(out)
	return out
}

// DeviceCount is the number of GPUs the scenario describes (all nodes).
func (s *Scenario) DeviceCount() int { return len(s.devices) }

// deviceSpec is one GPU of a scenario, with its group's settings resolved.
type deviceSpec struct {
	model          *model
	group, inGroup int
	util           *signal // SM utilisation, percent
	memUtil        *signal // memory bandwidth utilisation, percent; nil: 0.6*util
	memUsed        *signal // percent of (total - reserved); nil: 0
	power          *signal // watts; nil: derived from util
	encUtil        *signal
	decUtil        *signal
	pcieRx, pcieTx *signal // MiB/s; nil: derived from util
	powerLimitW    float64
	ambientC       float64
	eccCorrPerHour float64
	eccUncPerHour  float64
	replaysPerHour float64
	xidPerHour     float64
	xidCodes       []uint64
	persistence    bool
	computeMode    nvml.ComputeMode
	remapped       rawRemapped
	node           string
	mig            []migProfile
	tenants        []*tenantSpec
	hostView
	probe probeSpec
	nvml  nvmlSpec // the per-process calls' behaviour (nvmlsettings.go)
	// price is USD per GPU-hour (price_usd_per_hour); hasPrice false: none.
	price    float64
	hasPrice bool
}

type faultKind int

const (
	faultXID faultKind = iota
	faultLost
	faultError
	faultSlow
	faultHang
)

var faultKinds = map[string]faultKind{
	"xid": faultXID, "lost": faultLost, "error": faultError, "slow": faultSlow, "hang": faultHang,
}

// faultSpec is one validated entry of the scenario's faults list. Times are
// seconds of sim time; until <= 0 means forever.
type faultSpec struct {
	kind   faultKind
	gpu    int
	xid    uint64
	at     float64
	every  float64
	call   string
	ret    nvml.Return
	delay  time.Duration
	from   float64
	until  float64
	source string // "faults[3]" for messages
}

func (f *faultSpec) activeAt(t float64) bool {
	return t >= f.from && (f.until <= 0 || t < f.until)
}

func (f *faultSpec) matches(call string, t float64) bool {
	return (f.call == "*" || f.call == call) && f.activeAt(t)
}

// ---- raw YAML form ----

type rawScenario struct {
	Name          string      `yaml:"name"`
	Description   string      `yaml:"description"`
	DriverVersion string      `yaml:"driver_version"`
	CudaVersion   string      `yaml:"cuda_version"`
	CallLatency   string      `yaml:"call_latency"`
	Devices       []rawGroup  `yaml:"devices"`
	Faults        []rawFault  `yaml:"faults"`
	Tenants       []rawTenant `yaml:"tenants"`
	Host          *rawHost    `yaml:"host"` // hoststats.go
}

type rawGroup struct {
	Count              *int           `yaml:"count"`
	Model              string         `yaml:"model"`
	Node               string         `yaml:"node"`
	Mig                []string       `yaml:"mig"`
	Util               *rawSignal     `yaml:"util"`
	MemoryUtil         *rawSignal     `yaml:"memory_util"`
	MemoryUsed         *rawSignal     `yaml:"memory_used"`
	Power              *rawSignal     `yaml:"power"`
	EncoderUtil        *rawSignal     `yaml:"encoder_util"`
	DecoderUtil        *rawSignal     `yaml:"decoder_util"`
	PcieRx             *rawSignal     `yaml:"pcie_rx"`
	PcieTx             *rawSignal     `yaml:"pcie_tx"`
	PowerLimit         *float64       `yaml:"power_limit"`
	Ambient            *float64       `yaml:"ambient"`
	ECC                *rawECC        `yaml:"ecc"`
	PcieReplaysPerHour float64        `yaml:"pcie_replays_per_hour"`
	RandomXids         *rawRandomXids `yaml:"random_xids"`
	PersistenceMode    *bool          `yaml:"persistence_mode"`
	ComputeMode        string         `yaml:"compute_mode"`
	RemappedRows       *rawRemapped   `yaml:"remapped_rows"`
	Virtualization     string         `yaml:"virtualization"`
	VgpuMemoryMiB      *int           `yaml:"vgpu_memory_mib"`
	PcieLink           *rawPcieLink   `yaml:"pcie_link"`
	EccMode            *bool          `yaml:"ecc_mode"`
	Probe              *rawProbe      `yaml:"probe"`
	NVML               *rawNVML       `yaml:"nvml"`
	PriceUSDPerHour    *float64       `yaml:"price_usd_per_hour"`
}

type rawECC struct {
	CorrectedPerHour   float64 `yaml:"corrected_per_hour"`
	UncorrectedPerHour float64 `yaml:"uncorrected_per_hour"`
}

type rawRandomXids struct {
	PerHour float64 `yaml:"per_hour"`
	Codes   []int   `yaml:"codes"`
}

type rawRemapped struct {
	Correctable   int  `yaml:"correctable"`
	Uncorrectable int  `yaml:"uncorrectable"`
	Pending       bool `yaml:"pending"`
	Failure       bool `yaml:"failure"`
}

type rawSignal struct {
	Shape       string   `yaml:"shape"`
	Value       *float64 `yaml:"value"`
	Min         *float64 `yaml:"min"`
	Max         *float64 `yaml:"max"`
	Period      string   `yaml:"period"`
	Phase       string   `yaml:"phase"`
	PhaseStep   string   `yaml:"phase_step"`
	PeriodStep  string   `yaml:"period_step"`
	Duty        *float64 `yaml:"duty"`
	Noise       float64  `yaml:"noise"`
	NoisePeriod string   `yaml:"noise_period"`
}

// UnmarshalYAML accepts a bare number as shorthand for a constant signal.
func (s *rawSignal) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		var v float64
		if err := n.Decode(&v); err != nil {
			return err
		}
		*s = rawSignal{Shape: "constant", Value: &v}
		return nil
	}
	type plain rawSignal
	return n.Decode((*plain)(s))
}

type rawFault struct {
	Kind  string `yaml:"kind"`
	GPU   *int   `yaml:"gpu"`
	XID   int    `yaml:"xid"`
	At    string `yaml:"at"`
	Every string `yaml:"every"`
	Call  string `yaml:"call"`
	Error string `yaml:"error"`
	Delay string `yaml:"delay"`
	From  string `yaml:"from"`
	Until string `yaml:"until"`
}

// ---- errors ----

// ParseError is one problem in a scenario file, located by line and field
// path ("my.yaml:12: devices[1].util.period: ...").
type ParseError = yamlerr.Error

// errList collects ParseErrors, resolving paths to lines.
type errList struct {
	source string
	lines  map[string]int
	errs   []error
}

func (l *errList) add(path, format string, args ...any) {
	if len(l.errs) >= maxErrors {
		return
	}
	l.errs = append(l.errs, &ParseError{Source: l.source, Line: l.lineOf(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (l *errList) addLine(line int, path, msg string) {
	if len(l.errs) >= maxErrors {
		return
	}
	l.errs = append(l.errs, &ParseError{Source: l.source, Line: line, Path: path, Msg: msg})
}

// lineOf finds the line of path, or of its nearest ancestor present in the file.
func (l *errList) lineOf(path string) int {
	for p := path; p != ""; p = parentPath(p) {
		if n, ok := l.lines[p]; ok {
			return n
		}
	}
	return 0
}

func (l *errList) err() error { return errors.Join(l.errs...) }

func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

func joinPath(base, key string) string {
	if base == "" {
		return key
	}
	return base + "." + key
}

// indexLines records the line of every key and sequence item, by path, and
// the first path that starts on each line.
func indexLines(n *yaml.Node, path string, lines map[string]int, byLine map[int][]linePath) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			indexLines(c, path, lines, byLine)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			if _, ok := lines[p]; !ok {
				lines[p] = k.Line
			}
			byLine[k.Line] = append(byLine[k.Line], linePath{p, v.Value})
			indexLines(v, p, lines, byLine)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = c.Line
			byLine[c.Line] = append(byLine[c.Line], linePath{p, c.Value})
			indexLines(c, p, lines, byLine)
		}
	}
}

// checkKnownFields reports mapping keys that the target type does not have.
func checkKnownFields(n *yaml.Node, t reflect.Type, path string, l *errList) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			checkKnownFields(c, t, path, l)
		}
	case yaml.MappingNode:
		if t.Kind() != reflect.Struct {
			return // type mismatch: reported by the decoder
		}
		fields := map[string]reflect.Type{}
		var names []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			fields[name] = f.Type
			names = append(names, name)
		}
		sort.Strings(names)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := joinPath(path, k.Value)
			ft, ok := fields[k.Value]
			if !ok {
				l.addLine(k.Line, p, fmt.Sprintf("unknown field %q (known fields: %s)", k.Value, strings.Join(names, ", ")))
				continue
			}
			checkKnownFields(v, ft, p, l)
		}
	case yaml.SequenceNode:
		if t.Kind() != reflect.Slice {
			return
		}
		for i, c := range n.Content {
			checkKnownFields(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i), l)
		}
	}
}

var (
	valueRE = regexp.MustCompile("`([^`]*)`")
)

// linePath is a path that starts on a line, with its scalar value if any.
type linePath struct{ path, value string }

// pathForError picks the field a decoder message is about: the one on the
// line whose value the message quotes, else the deepest one on the line.
func pathForError(paths []linePath, msg string) string {
	if len(paths) == 0 {
		return ""
	}
	if m := valueRE.FindStringSubmatch(msg); m != nil {
		for _, p := range paths {
			if p.value == m[1] {
				return p.path
			}
		}
	}
	return paths[len(paths)-1].path
}

// ---- entry points ----

// Parse reads a scenario in the documented YAML format. source names the data
// in error messages ("my.yaml:12: devices[1].util.period: ...").
func Parse(data []byte, source string) (*Scenario, error) {
	l := &errList{source: source, lines: map[string]int{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line, msg := yamlerr.SplitLine(err.Error())
		l.addLine(line, "", "invalid YAML: "+msg)
		return nil, l.err()
	}
	if len(root.Content) == 0 {
		l.addLine(0, "", "empty scenario: expected a mapping with at least a devices list")
		return nil, l.err()
	}
	if root.Content[0].Kind != yaml.MappingNode {
		l.addLine(root.Content[0].Line, "", "scenario must be a YAML mapping (name, devices, faults, ...)")
		return nil, l.err()
	}
	byLine := map[int][]linePath{}
	indexLines(&root, "", l.lines, byLine)
	checkKnownFields(&root, reflect.TypeOf(rawScenario{}), "", l)
	if len(l.errs) > 0 {
		return nil, l.err()
	}

	var raw rawScenario
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&raw); err != nil {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for _, e := range te.Errors {
				line, msg := yamlerr.SplitLine(e)
				l.addLine(line, pathForError(byLine[line], msg), msg)
			}
		} else {
			l.addLine(0, "", err.Error())
		}
		return nil, l.err()
	}
	sc := validate(&raw, l)
	if len(l.errs) > 0 {
		return nil, l.err()
	}
	sc.source = source
	if sc.Name == "" {
		sc.Name = strings.TrimSuffix(filepath.Base(source), filepath.Ext(source))
	}
	return sc, nil
}

// Load returns a built-in scenario by name (see BuiltinNames), or else reads
// and parses the YAML file at nameOrPath.
func Load(nameOrPath string) (*Scenario, error) {
	if data, ok := builtinYAML(nameOrPath); ok {
		return Parse(data, nameOrPath+".yaml")
	}
	data, err := os.ReadFile(nameOrPath)
	if err != nil {
		return nil, fmt.Errorf("loading scenario %q (built-in scenarios: %s): %w",
			nameOrPath, strings.Join(BuiltinNames(), ", "), err)
	}
	return Parse(data, nameOrPath)
}

// ---- validation ----

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

// ---- prices ----

// HasPrices reports whether any device of the scenario has a
// price_usd_per_hour.
func (s *Scenario) HasPrices() bool {
	for _, d := range s.devices {
		if d.hasPrice {
			return true
		}
	}
	return false
}

// PriceUSDPerHour is the scenario's price of the fleet's GPU with the UUID
// (its device group's price_usd_per_hour); false when the GPU is not the
// fleet's or its group has no price.
func (f *Fleet) PriceUSDPerHour(uuid string) (float64, bool) {
	for _, d := range f.devices {
		if d.uuid == uuid {
			return d.spec.price, d.spec.hasPrice
		}
	}
	return 0, false
}
