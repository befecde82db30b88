package collector

import (
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpulens/gpulens/internal/clockevent"
)

// The counters file of the DCGM-compatible view: dcgm-exporter's
// collectors file (its -f/--collectors flag, etc/default-counters.csv),
// read as dcgm-exporter reads it, choosing which DCGM fields the view
// serves, under which name, type and help (docs/dcgm-migration.md#the-counters-file).

// dcgmFieldsCSV lists every DCGM field name (current and legacy) with its
// field id, from go-dcgm (origin in the file's header).
//
//go:embed dcgm_fields.csv
var dcgmFieldsCSV string

// dcgmFieldIDs maps every DCGM field name to its id; parsed once.
var dcgmFieldIDs = sync.OnceValue(func() map[string]int {
	ids := map[string]int{}
	for _, line := range strings.Split(dcgmFieldsCSV, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		name, id, ok := strings.Cut(line, ",")
		n, err := strconv.Atoi(id)
		if !ok || err != nil {
			panic("collector/dcgm_fields.csv: bad line " + strconv.Quote(line))
		}
		ids[name] = n
	}
	return ids
})

// dcgmExporterFields are dcgm-exporter's own fields (DCGM_EXP_*): known
// names, none of which the view serves.
var dcgmExporterFields = []string{"DCGM_EXP_XID_ERRORS_COUNT", "DCGM_EXP_CLOCK_EVENTS_COUNT", "DCGM_EXP_GPU_HEALTH_STATUS", "DCGM_EXP_P2P_STATUS"}

// dcgmDriverVersionField is the one label field the view serves: the
// DCGM_FI_DRIVER_VERSION label of every series.
const dcgmDriverVersionField = "DCGM_FI_DRIVER_VERSION"

// dcgmExtra is a DCGM field outside dcgm-exporter's default set that the
// view serves only when a counters file asks for it, from a native family
// of the snapshot.
type dcgmExtra struct {
	name string
	typ  prometheus.ValueType
	help string
	// scope: the series it repeats the labels of: dcgmScopeDevice, each
	// DCGM_FI_DEV_GPU_TEMP series of the GPU (per MIG instance where the
	// view repeats device fields); dcgmScopeMemory, the
	// DCGM_FI_DEV_FB_USED series of the GPU or MIG instance;
	// dcgmScopeProf, the DCGM_FI_PROF_GR_ENGINE_ACTIVE series of the GPU or
	// MIG instance (the other PROF fields').
	scope int
}

const (
	dcgmScopeDevice = iota
	dcgmScopeMemory
	dcgmScopeProf
)

var (
	dcgmFBTotal          = &dcgmExtra{"DCGM_FI_DEV_FB_TOTAL", prometheus.GaugeValue, "Framebuffer memory total (in MiB).", dcgmScopeMemory}
	dcgmPowerLimit       = &dcgmExtra{"DCGM_FI_DEV_ENFORCED_POWER_LIMIT", prometheus.GaugeValue, "Effective power limit that the driver enforces after taking into account all limiters (in W).", dcgmScopeDevice}
	dcgmFanSpeed         = &dcgmExtra{"DCGM_FI_DEV_FAN_SPEED", prometheus.GaugeValue, "Fan speed (in 0-100%).", dcgmScopeDevice}
	dcgmMaxSMClock       = &dcgmExtra{"DCGM_FI_DEV_MAX_SM_CLOCK", prometheus.GaugeValue, "Maximum supported SM clock for the device (in MHz).", dcgmScopeDevice}
	dcgmMaxMemClock      = &dcgmExtra{"DCGM_FI_DEV_MAX_MEM_CLOCK", prometheus.GaugeValue, "Maximum supported memory clock for the device (in MHz).", dcgmScopeDevice}
	dcgmECCSBEVol        = &dcgmExtra{"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", prometheus.CounterValue, "Total number of single-bit volatile ECC errors.", dcgmScopeDevice}
	dcgmECCDBEVol        = &dcgmExtra{"DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", prometheus.CounterValue, "Total number of double-bit volatile ECC errors.", dcgmScopeDevice}
	dcgmClockEvents      = &dcgmExtra{"DCGM_FI_DEV_CLOCKS_EVENT_REASONS", prometheus.GaugeValue, "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).", dcgmScopeDevice}
	dcgmSMActive         = &dcgmExtra{"DCGM_FI_PROF_SM_ACTIVE", prometheus.GaugeValue, "The ratio of cycles an SM has at least 1 warp assigned.", dcgmScopeProf}
	dcgmSMOccupancy      = &dcgmExtra{"DCGM_FI_PROF_SM_OCCUPANCY", prometheus.GaugeValue, "The ratio of number of warps resident on an SM.", dcgmScopeProf}
	dcgmExtras           = []*dcgmExtra{dcgmFBTotal, dcgmPowerLimit, dcgmFanSpeed, dcgmMaxSMClock, dcgmMaxMemClock, dcgmECCSBEVol, dcgmECCDBEVol, dcgmClockEvents, dcgmSMActive, dcgmSMOccupancy}
	dcgmTemplateDevice   = "DCGM_FI_DEV_GPU_TEMP"
	dcgmTemplateMemory   = "DCGM_FI_DEV_FB_USED"
	dcgmTemplateProf     = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
	dcgmExtraGPUSources  = map[*prometheus.Desc]func(label func(string) string) (*dcgmExtra, func(float64) float64){}
	dcgmExtraMIGSources  = map[*prometheus.Desc]*dcgmExtra{}
	errDCGMCountersEmpty = errors.New("no field of the file is one the view serves")
)

func init() {
	one := func(e *dcgmExtra, conv func(float64) float64) func(func(string) string) (*dcgmExtra, func(float64) float64) {
		return func(func(string) string) (*dcgmExtra, func(float64) float64) { return e, conv }
	}
	dcgmExtraGPUSources[memTotalDesc] = one(dcgmFBTotal, dcgmMiBOf)
	dcgmExtraGPUSources[powerLimitDesc] = one(dcgmPowerLimit, dcgmIdentity)
	dcgmExtraGPUSources[fanDesc] = one(dcgmFanSpeed, dcgmPercent)
	dcgmExtraGPUSources[maxClockDesc] = func(label func(string) string) (*dcgmExtra, func(float64) float64) {
		switch label("clock") {
		case "sm":
			return dcgmMaxSMClock, dcgmMHz
		case "memory":
			return dcgmMaxMemClock, dcgmMHz
		}
		return nil, nil
	}
	dcgmExtraGPUSources[eccDesc] = func(label func(string) string) (*dcgmExtra, func(float64) float64) {
		switch label("type") {
		case "corrected":
			return dcgmECCSBEVol, dcgmIdentity
		case "uncorrected":
			return dcgmECCDBEVol, dcgmIdentity
		}
		return nil, nil
	}
	dcgmExtraMIGSources[migMemTotalDesc] = dcgmFBTotal
	for _, m := range gpmMetrics {
		var e *dcgmExtra
		switch descName(m.gpu) {
		case namespace + "_gpu_sm_activity_ratio":
			e = dcgmSMActive
		case namespace + "_gpu_sm_occupancy_ratio":
			e = dcgmSMOccupancy
		default:
			continue
		}
		dcgmExtraGPUSources[m.gpu] = one(e, dcgmIdentity)
		dcgmExtraMIGSources[m.mig] = e
	}
}

// DCGMExtraFields lists the DCGM fields outside dcgm-exporter's default set
// that a counters file can add (docs and tests).
func DCGMExtraFields() []string {
	var out []string
	for _, e := range dcgmExtras {
		out = append(out, e.name)
	}
	return out
}

// DCGMCounter is one line of a counters file.
type DCGMCounter struct {
	Name, Type, Help string
	Line             int
}

// DCGMSkipped is a line naming a DCGM field the view cannot serve: gpulens
// reads no value for it. dcgm-exporter's own default file has three
// (DCGM_FI_DEV_MEMORY_TEMP, DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,
// DCGM_FI_DEV_VGPU_LICENSE_STATUS), so they are warnings, not errors.
type DCGMSkipped struct {
	Source string
	Line   int
	Field  string
}

func (s DCGMSkipped) String() string {
	return fmt.Sprintf("%s:%d: %s: a DCGM field gpulens has no value for; not served", s.Source, s.Line, s.Field)
}

// DCGMCounters is a parsed counters file: the fields the view serves.
type DCGMCounters struct {
	Source string
	// Skipped are the known DCGM fields of the file the view cannot serve.
	Skipped []DCGMSkipped
	// served: the file's lines by the view's own name of the field (one
	// field can be listed under its current and its legacy names).
	served      map[string][]DCGMCounter
	driverLabel bool
	extras      map[*dcgmExtra]bool

	mu    sync.Mutex
	descs map[string]*prometheus.Desc // by name, help and label names
}

// LoadDCGMCounters reads a counters file (dcgm-exporter's CSV format).
func LoadDCGMCounters(path string) (*DCGMCounters, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ParseDCGMCounters(path, f)
}

// ParseDCGMCounters parses a counters file as dcgm-exporter does (CSV,
// '#' comments, three fields a line: DCGM field, Prometheus type, help;
// spaces around each field trimmed). A name that is no DCGM field is an
// error naming the source and line; so is a bad type, a field listed
// twice, or a file of which nothing can be served. A DCGM field the view
// cannot serve is skipped and listed in Skipped.
func ParseDCGMCounters(source string, r io.Reader) (*DCGMCounters, error) {
	c := &DCGMCounters{Source: source, served: map[string][]DCGMCounter{}, extras: map[*dcgmExtra]bool{}, descs: map[string]*prometheus.Desc{}}
	ids := dcgmFieldIDs()
	// The view's fields by DCGM field id.
	viewByID := map[int]string{}
	for _, name := range DCGMFields() {
		viewByID[ids[name]] = name
	}
	extraByID := map[int]*dcgmExtra{}
	for _, e := range dcgmExtras {
		extraByID[ids[e.name]] = e
	}
	cr := csv.NewReader(r)
	cr.Comment = '#'
	cr.FieldsPerRecord = -1
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("%s:%d: %w", source, pe.Line, pe.Err)
			}
			return nil, fmt.Errorf("%s: %w", source, err)
		}
		line, _ := cr.FieldPos(0)
		for i := range rec {
			rec[i] = strings.Trim(rec[i], " \t")
		}
		if len(rec) == 1 && rec[0] == "" {
			continue
		}
		if len(rec) != 3 {
			return nil, fmt.Errorf("%s:%d: %d fields, want 3: DCGM field, Prometheus type, help", source, line, len(rec))
		}
		name, typ, help := rec[0], rec[1], rec[2]
		if prev, ok := seen[name]; ok {
			return nil, fmt.Errorf("%s:%d: %s listed again (first on line %d)", source, line, name, prev)
		}
		seen[name] = line
		id, known := ids[name]
		if !known && !slices.Contains(dcgmExporterFields, name) {
			return nil, fmt.Errorf("%s:%d: %q is not a DCGM field (a typo? DCGM's field names are listed in collector/dcgm_fields.csv)", source, line, name)
		}
		switch typ {
		case "gauge", "counter", "label":
		case "histogram", "summary":
			return nil, fmt.Errorf("%s:%d: %s: type %q: the view serves a DCGM field as a gauge or a counter (or label)", source, line, name, typ)
		default:
			return nil, fmt.Errorf("%s:%d: %s: %q is not a Prometheus type (gauge, counter, label)", source, line, name, typ)
		}
		counter := DCGMCounter{Name: name, Type: typ, Help: help, Line: line}
		switch view, extra := viewByID[id], extraByID[id]; {
		case !known:
			c.Skipped = append(c.Skipped, DCGMSkipped{source, line, name})
		case typ == "label":
			if id != ids[dcgmDriverVersionField] {
				c.Skipped = append(c.Skipped, DCGMSkipped{source, line, name})
				continue
			}
			c.driverLabel = true
		case view != "":
			c.served[view] = append(c.served[view], counter)
		case extra != nil:
			c.served[extra.name] = append(c.served[extra.name], counter)
			c.extras[extra] = true
		default:
			c.Skipped = append(c.Skipped, DCGMSkipped{source, line, name})
		}
	}
	if len(c.served) == 0 {
		return nil, fmt.Errorf("%s: %w (%d lines skipped)", source, errDCGMCountersEmpty, len(c.Skipped))
	}
	return c, nil
}

// Fields lists the fields served, by the file's names, in the file's order.
func (c *DCGMCounters) Fields() []string {
	var all []DCGMCounter
	for _, cs := range c.served {
		all = append(all, cs...)
	}
	slices.SortFunc(all, func(a, b DCGMCounter) int { return a.Line - b.Line })
	out := make([]string, len(all))
	for i, x := range all {
		out[i] = x.Name
	}
	return out
}

// wrap returns the view's conversion filtered and extended by the file:
// each series of a field the file lists is written under the file's name,
// type and help (the DCGM_FI_DRIVER_VERSION label only where the file lists
// it as a label, as dcgm-exporter does); other series are dropped; the
// extra fields the file asks for are added with the labels of their
// scope's series.
func (c *DCGMCounters) wrap(convert func(*Snapshot, []prometheus.Metric) []prometheus.Metric) func(*Snapshot, []prometheus.Metric) []prometheus.Metric {
	return func(snap *Snapshot, out []prometheus.Metric) []prometheus.Metric {
		view := convert(snap, nil)
		var dm dto.Metric
		names := map[*prometheus.Desc]string{}
		// The templates of the extra fields: label pairs by GPU (device
		// scope, several on MIG) and by GPU and GPU instance (memory scope).
		device := map[string][][]*dto.LabelPair{}
		memory := map[[2]string][]*dto.LabelPair{}
		prof := map[[2]string][]*dto.LabelPair{}
		type series struct {
			name   string
			labels []*dto.LabelPair
			value  float64
		}
		var all []series
		for _, m := range view {
			name, ok := names[m.Desc()]
			if !ok {
				name = descName(m.Desc())
				names[m.Desc()] = name
			}
			if len(c.served[name]) == 0 && (len(c.extras) == 0 || (name != dcgmTemplateDevice && name != dcgmTemplateMemory && name != dcgmTemplateProf)) {
				continue
			}
			dm.Reset()
			if m.Write(&dm) != nil {
				continue
			}
			labels := slices.Clone(dm.GetLabel())
			switch name {
			case dcgmTemplateDevice:
				g := dcgmLabel(labels, "gpu")
				device[g] = append(device[g], labels)
			case dcgmTemplateMemory:
				memory[[2]string{dcgmLabel(labels, "gpu"), dcgmLabel(labels, "GPU_I_ID")}] = labels
			case dcgmTemplateProf:
				prof[[2]string{dcgmLabel(labels, "gpu"), dcgmLabel(labels, "GPU_I_ID")}] = labels
			}
			all = append(all, series{name, labels, dcgmValueOf(&dm)})
		}
		if len(c.extras) > 0 {
			for _, x := range dcgmExtraValues(snap, c.extras) {
				switch x.f.scope {
				case dcgmScopeDevice:
					for _, labels := range device[x.gpu] {
						all = append(all, series{x.f.name, labels, x.v})
					}
				case dcgmScopeMemory:
					if labels, ok := memory[[2]string{x.gpu, x.gi}]; ok {
						all = append(all, series{x.f.name, labels, x.v})
					}
				case dcgmScopeProf:
					if labels, ok := prof[[2]string{x.gpu, x.gi}]; ok {
						all = append(all, series{x.f.name, labels, x.v})
					}
				}
			}
		}
		for _, s := range all {
			for _, counter := range c.served[s.name] {
				out = append(out, c.metric(counter, s.labels, s.value))
			}
		}
		return out
	}
}

// dcgmLabel is the value of a label of a series, "" when it has none.
func dcgmLabel(labels []*dto.LabelPair, name string) string {
	for _, lp := range labels {
		if lp.GetName() == name {
			return lp.GetValue()
		}
	}
	return ""
}

// metric is one series of a field as the file lists it.
func (c *DCGMCounters) metric(counter DCGMCounter, labels []*dto.LabelPair, v float64) prometheus.Metric {
	names := make([]string, 0, len(labels))
	values := make([]string, 0, len(labels))
	for _, lp := range labels {
		if lp.GetName() == dcgmDriverVersionField && !c.driverLabel {
			continue
		}
		names = append(names, lp.GetName())
		values = append(values, lp.GetValue())
	}
	key := counter.Name + "\xff" + counter.Help + "\xff" + strings.Join(names, "\xff")
	c.mu.Lock()
	d := c.descs[key]
	if d == nil {
		d = prometheus.NewDesc(counter.Name, counter.Help, names, nil)
		c.descs[key] = d
	}
	c.mu.Unlock()
	typ := prometheus.GaugeValue
	if counter.Type == "counter" {
		typ = prometheus.CounterValue
	}
	return prometheus.MustNewConstMetric(d, typ, v, values...)
}

// dcgmExtraValue is one value of an extra field, by GPU and GPU instance.
type dcgmExtraValue struct {
	f       *dcgmExtra
	gpu, gi string
	v       float64
}

// dcgmExtraValues reads the extra fields asked for from the snapshot.
func dcgmExtraValues(snap *Snapshot, want map[*dcgmExtra]bool) []dcgmExtraValue {
	var out []dcgmExtraValue
	var dm dto.Metric
	label := func(name string) string { return dcgmLabel(dm.GetLabel(), name) }
	gi := map[string]string{} // by mig_uuid
	type migValue struct {
		f       *dcgmExtra
		gpu, mi string
		v       float64
	}
	var migValues []migValue
	events := map[string]uint64{}
	for _, m := range snap.Metrics {
		d := m.Desc()
		gpuSrc := dcgmExtraGPUSources[d]
		migSrc := dcgmExtraMIGSources[d]
		isEvent := d == clockEventDesc && want[dcgmClockEvents]
		if gpuSrc == nil && (migSrc == nil || !want[migSrc]) && d != migInfoDesc && !isEvent {
			continue
		}
		dm.Reset()
		if m.Write(&dm) != nil {
			continue
		}
		v := dcgmValueOf(&dm)
		switch {
		case d == migInfoDesc:
			gi[label("mig_uuid")] = label("gpu_instance_id")
		case isEvent:
			g := label("gpu")
			r, ok := clockevent.Lookup(label("reason"))
			if _, seen := events[g]; !seen {
				events[g] = 0
			}
			if ok && v == 1 {
				events[g] |= r.Bit
			}
		case migSrc != nil:
			migValues = append(migValues, migValue{migSrc, label("gpu"), label("mig_uuid"), v})
		default:
			f, conv := gpuSrc(label)
			if f != nil && want[f] {
				out = append(out, dcgmExtraValue{f, label("gpu"), "", conv(v)})
			}
		}
	}
	for _, x := range migValues {
		id, ok := gi[x.mi]
		if !ok {
			continue
		}
		v := x.v
		if x.f == dcgmFBTotal {
			v = dcgmMiBOf(v)
		}
		out = append(out, dcgmExtraValue{x.f, x.gpu, id, v})
	}
	for g, bits := range events {
		out = append(out, dcgmExtraValue{dcgmClockEvents, g, "", float64(bits)})
	}
	return out
}

// dcgmValueOf is the value of a gauge or counter.
func dcgmValueOf(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}
