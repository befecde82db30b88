package collector

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// The DCGM-compatible view: the metrics of dcgm-exporter's default counter
// set (etc/default-counters.csv of NVIDIA/dcgm-exporter) with its names,
// types, units and labels, converted from the sampler's snapshot when a
// scrape of the view finds a new snapshot. Nothing of DCGM is used: every
// value is one the native view serves (NVML and GPM), rescaled. A field
// gpulens does not read (memory temperature, NVLink bandwidth, vGPU
// licence) is absent, not faked (docs/dcgm-migration.md lists them).

// dcgmField is one DCGM field of the view.
type dcgmField struct {
	name, help string
	typ        prometheus.ValueType
	// descs by [MIG instance labels][pod labels].
	descs [2][2]*prometheus.Desc
}

// The labels of every DCGM series, as dcgm-exporter writes them (its
// rendermetrics template): the GPU's identity, the host, the driver.
var (
	dcgmBaseLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
	dcgmMIGLabels  = []string{"GPU_I_PROFILE", "GPU_I_ID"}
	dcgmPodLabels  = []string{"namespace", "pod", "container"}
)

func newDCGMField(name string, typ prometheus.ValueType, help string) *dcgmField {
	f := &dcgmField{name: name, help: help, typ: typ}
	for mig := range 2 {
		for pod := range 2 {
			labels := append([]string(nil), dcgmBaseLabels...)
			if mig == 1 {
				labels = append(labels, dcgmMIGLabels...)
			}
			if pod == 1 {
				labels = append(labels, dcgmPodLabels...)
			}
			f.descs[mig][pod] = prometheus.NewDesc(name, help, labels, nil)
		}
	}
	return f
}

// The fields, with dcgm-exporter's help texts (default-counters.csv).
var (
	dcgmSMClock       = newDCGMField("DCGM_FI_DEV_SM_CLOCK", prometheus.GaugeValue, "SM clock frequency (in MHz).")
	dcgmMemClock      = newDCGMField("DCGM_FI_DEV_MEM_CLOCK", prometheus.GaugeValue, "Memory clock frequency (in MHz).")
	dcgmGPUTemp       = newDCGMField("DCGM_FI_DEV_GPU_TEMP", prometheus.GaugeValue, "GPU temperature (in C).")
	dcgmPower         = newDCGMField("DCGM_FI_DEV_POWER_USAGE", prometheus.GaugeValue, "Power draw (in W).")
	dcgmEnergy        = newDCGMField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", prometheus.CounterValue, "Total energy consumption since boot (in mJ).")
	dcgmPCIeReplay    = newDCGMField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", prometheus.CounterValue, "Total number of PCIe retries.")
	dcgmGPUUtil       = newDCGMField("DCGM_FI_DEV_GPU_UTIL", prometheus.GaugeValue, "GPU utilization (in %).")
	dcgmMemCopyUtil   = newDCGMField("DCGM_FI_DEV_MEM_COPY_UTIL", prometheus.GaugeValue, "Memory utilization (in %).")
	dcgmEncUtil       = newDCGMField("DCGM_FI_DEV_ENC_UTIL", prometheus.GaugeValue, "Encoder utilization (in %).")
	dcgmDecUtil       = newDCGMField("DCGM_FI_DEV_DEC_UTIL", prometheus.GaugeValue, "Decoder utilization (in %).")
	dcgmXID           = newDCGMField("DCGM_FI_DEV_XID_ERRORS", prometheus.GaugeValue, "Value of the last XID error encountered.")
	dcgmFBFree        = newDCGMField("DCGM_FI_DEV_FB_FREE", prometheus.GaugeValue, "Framebuffer memory free (in MiB).")
	dcgmFBUsed        = newDCGMField("DCGM_FI_DEV_FB_USED", prometheus.GaugeValue, "Framebuffer memory used (in MiB).")
	dcgmFBReserved    = newDCGMField("DCGM_FI_DEV_FB_RESERVED", prometheus.GaugeValue, "Framebuffer memory reserved (in MiB).")
	dcgmUncorrRows    = newDCGMField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, "Number of remapped rows for uncorrectable errors")
	dcgmCorrRows      = newDCGMField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, "Number of remapped rows for correctable errors")
	dcgmRemapFailure  = newDCGMField("DCGM_FI_DEV_ROW_REMAP_FAILURE", prometheus.GaugeValue, "Whether remapping of rows has failed")
	dcgmGREngine      = newDCGMField("DCGM_FI_PROF_GR_ENGINE_ACTIVE", prometheus.GaugeValue, "Ratio of time the graphics engine is active.")
	dcgmTensor        = newDCGMField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the tensor (HMMA) pipe is active.")
	dcgmDRAM          = newDCGMField("DCGM_FI_PROF_DRAM_ACTIVE", prometheus.GaugeValue, "Ratio of cycles the device memory interface is active sending or receiving data.")
	dcgmPCIeTX        = newDCGMField("DCGM_FI_PROF_PCIE_TX_BYTES", prometheus.GaugeValue, "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.")
	dcgmPCIeRX        = newDCGMField("DCGM_FI_PROF_PCIE_RX_BYTES", prometheus.GaugeValue, "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.")
	dcgmMiB           = float64(1 << 20)
	dcgmPercent       = func(ratio float64) float64 { return math.Round(ratio * 100) }
	dcgmMHz           = func(hertz float64) float64 { return math.Round(hertz / 1e6) }
	dcgmMiBOf         = func(bytes float64) float64 { return math.Floor(bytes / dcgmMiB) }
	dcgmIdentity      = func(v float64) float64 { return v }
	dcgmMillijoulesOf = func(joules float64) float64 { return math.Round(joules * 1000) }
)

// dcgmSource is how one native family becomes a DCGM field: by the value
// of one label (clock, type, direction) or as it is.
type dcgmSource struct {
	label string                // "" : every series
	to    map[string]*dcgmField // by the label's value ("" when label is "")
	conv  func(float64) float64
	gpm   bool // only on GPUs with GPM (the PROF fields)
	fb    bool // whole-GPU framebuffer: only on GPUs not in MIG mode
}

func dcgmOne(f *dcgmField, conv func(float64) float64) dcgmSource {
	return dcgmSource{to: map[string]*dcgmField{"": f}, conv: conv}
}

// dcgmGPUSources are the native GPU families converted, by Desc.
var dcgmGPUSources = map[*prometheus.Desc]dcgmSource{
	clockDesc:          {label: "clock", to: map[string]*dcgmField{"sm": dcgmSMClock, "memory": dcgmMemClock}, conv: dcgmMHz},
	tempDesc:           dcgmOne(dcgmGPUTemp, dcgmIdentity),
	powerDesc:          dcgmOne(dcgmPower, dcgmIdentity),
	energyDesc:         dcgmOne(dcgmEnergy, dcgmMillijoulesOf),
	pcieReplayDesc:     dcgmOne(dcgmPCIeReplay, dcgmIdentity),
	utilGPUDesc:        dcgmOne(dcgmGPUUtil, dcgmPercent),
	utilMemDesc:        dcgmOne(dcgmMemCopyUtil, dcgmPercent),
	utilEncDesc:        dcgmOne(dcgmEncUtil, dcgmPercent),
	utilDecDesc:        dcgmOne(dcgmDecUtil, dcgmPercent),
	memFreeDesc:        {to: map[string]*dcgmField{"": dcgmFBFree}, conv: dcgmMiBOf, fb: true},
	memUsedDesc:        {to: map[string]*dcgmField{"": dcgmFBUsed}, conv: dcgmMiBOf, fb: true},
	memReservedDesc:    {to: map[string]*dcgmField{"": dcgmFBReserved}, conv: dcgmMiBOf, fb: true},
	remappedDesc:       {label: "type", to: map[string]*dcgmField{"correctable": dcgmCorrRows, "uncorrectable": dcgmUncorrRows}, conv: dcgmIdentity},
	remapFailedDesc:    dcgmOne(dcgmRemapFailure, dcgmIdentity),
	pcieThroughputDesc: {label: "direction", to: map[string]*dcgmField{"tx": dcgmPCIeTX, "rx": dcgmPCIeRX}, conv: dcgmIdentity, gpm: true},
}

// dcgmProfFields maps the GPM families (GPU and MIG) to PROF fields.
var dcgmProfFields = map[string]*dcgmField{
	namespace + "_gpu_graphics_activity_ratio":          dcgmGREngine,
	namespace + "_gpu_tensor_activity_ratio":            dcgmTensor,
	namespace + "_gpu_dram_bandwidth_utilization_ratio": dcgmDRAM,
}

// dcgmMIGSources are the native MIG families converted, by Desc.
var dcgmMIGSources = map[*prometheus.Desc]*dcgmField{}

func init() {
	for _, m := range gpmMetrics {
		if f := dcgmProfFields[descName(m.gpu)]; f != nil {
			dcgmGPUSources[m.gpu] = dcgmOne(f, dcgmIdentity)
			dcgmMIGSources[m.mig] = f
		}
	}
}

// descName is the fully-qualified name of a Desc of this package.
func descName(d *prometheus.Desc) string {
	s := d.String() // Desc{fqName: "name", help: ...}
	const prefix = `Desc{fqName: "`
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		rest := s[len(prefix):]
		for i := 0; i < len(rest); i++ {
			if rest[i] == '"' {
				return rest[:i]
			}
		}
	}
	return ""
}

// DCGMFields lists the fields of dcgm-exporter's default counter set the
// view serves, by name (docs and tests).
func DCGMFields() []string {
	seen := map[string]bool{}
	var out []string
	add := func(f *dcgmField) {
		if !seen[f.name] {
			seen[f.name] = true
			out = append(out, f.name)
		}
	}
	for _, f := range []*dcgmField{dcgmSMClock, dcgmMemClock, dcgmGPUTemp, dcgmPower, dcgmEnergy, dcgmPCIeReplay,
		dcgmGPUUtil, dcgmMemCopyUtil, dcgmEncUtil, dcgmDecUtil, dcgmXID, dcgmFBFree, dcgmFBUsed, dcgmFBReserved,
		dcgmUncorrRows, dcgmCorrRows, dcgmRemapFailure, dcgmGREngine, dcgmTensor, dcgmDRAM, dcgmPCIeTX, dcgmPCIeRX} {
		add(f)
	}
	return out
}

// DCGMOptions configures NewDCGMExposition.
type DCGMOptions struct {
	// Hostname is the Hostname label (dcgm-exporter: $NODE_NAME or the
	// host name); empty leaves it empty, which Prometheus drops.
	Hostname string
	// MaxRequestsInFlight limits concurrent scrapes (0: no limit).
	MaxRequestsInFlight int
	Exposition          ExpositionOptions
	// Counters, from a counters file, chooses the fields served; nil:
	// dcgm-exporter's default set.
	Counters *DCGMCounters
}

// NewDCGMExposition serves the DCGM-compatible view of the sampler's
// snapshot, rendered like the native view (once per new snapshot scraped,
// shared by concurrent scrapes) in the text and protobuf formats, as
// dcgm-exporter serves it: not in OpenMetrics, where DCGM's counters
// (without _total) would be typed unknown. It converts nothing until it is
// scraped.
func NewDCGMExposition(s *Sampler, opts DCGMOptions) *Exposition {
	v := &dcgmView{s: s, hostname: opts.Hostname}
	convert := v.convert
	if opts.Counters != nil {
		convert = opts.Counters.wrap(convert)
	}
	return newExposition(s, NewRegistry(), opts.Exposition, convert, expfmt.DefaultAcceptedFormats())
}

// dcgmView converts snapshots.
type dcgmView struct {
	s        *Sampler
	hostname string
}

// dcgmGPU is what the view knows of one GPU from the snapshot.
type dcgmGPU struct {
	uuid, pciBusID, model, driver string
	gpm, mig                      bool
}

// dcgmMIG is one MIG instance.
type dcgmMIG struct {
	profile, gi string
}

type dcgmPod struct{ namespace, pod, container string }

func (p dcgmPod) less(q dcgmPod) bool {
	if p.namespace != q.namespace {
		return p.namespace < q.namespace
	}
	if p.pod != q.pod {
		return p.pod < q.pod
	}
	return p.container < q.container
}

// dcgmValue is one converted value waiting for its GPU's identity.
type dcgmValue struct {
	f       *dcgmField
	gpu     string
	migUUID string // a MIG instance's series
	v       float64
	gpm, fb bool
}

// convert appends the DCGM series of a snapshot to out. It is called by
// the exposition under its render lock, and by live gathers.
func (v *dcgmView) convert(snap *Snapshot, out []prometheus.Metric) []prometheus.Metric {
	gpus := map[string]*dcgmGPU{}
	migs := map[string]dcgmMIG{}
	// The pod of each GPU or MIG instance: one, as dcgm-exporter maps a
	// device to a pod (without --kubernetes-virtual-gpus); of several pods
	// sharing a GPU, the first by namespace, pod and container.
	pods := map[[2]string]dcgmPod{} // by gpu, mig_uuid
	var values []dcgmValue
	var dm dto.Metric
	label := func(name string) string {
		for _, lp := range dm.GetLabel() {
			if lp.GetName() == name {
				return lp.GetValue()
			}
		}
		return ""
	}
	value := func() float64 {
		if c := dm.GetCounter(); c != nil {
			return c.GetValue()
		}
		return dm.GetGauge().GetValue()
	}
	gpu := func(index string) *dcgmGPU {
		g := gpus[index]
		if g == nil {
			g = &dcgmGPU{}
			gpus[index] = g
		}
		return g
	}
	for _, m := range snap.Metrics {
		d := m.Desc()
		src, isGPU := dcgmGPUSources[d]
		migField, isMIG := dcgmMIGSources[d]
		switch {
		case isGPU, isMIG, d == gpuInfoDesc, d == gpmSupportedDesc, d == migEnabledDesc, d == migInfoDesc,
			d == migMemUsedDesc, d == migMemTotalDesc, d == allocInfoDesc:
		default:
			continue
		}
		dm.Reset()
		if m.Write(&dm) != nil {
			continue
		}
		index := label("gpu")
		switch {
		case isGPU:
			f := src.to[label(src.label)]
			if src.label == "" {
				f = src.to[""]
			}
			if f != nil {
				values = append(values, dcgmValue{f: f, gpu: index, v: src.conv(value()), gpm: src.gpm, fb: src.fb})
			}
		case isMIG:
			values = append(values, dcgmValue{f: migField, gpu: index, migUUID: label("mig_uuid"), v: value()})
		case d == gpuInfoDesc:
			g := gpu(index)
			g.uuid, g.pciBusID, g.model, g.driver = label("uuid"), label("pci_bus_id"), label("name"), label("driver_version")
		case d == gpmSupportedDesc:
			gpu(index).gpm = value() == 1
		case d == migEnabledDesc:
			gpu(index).mig = value() == 1
		case d == migInfoDesc:
			migs[label("mig_uuid")] = dcgmMIG{profile: label("profile"), gi: label("gpu_instance_id")}
		case d == migMemUsedDesc:
			values = append(values, dcgmValue{f: dcgmFBUsed, gpu: index, migUUID: label("mig_uuid"), v: dcgmMiBOf(value())})
		case d == migMemTotalDesc:
			// FB_FREE of the instance: its total less its used, below.
			values = append(values, dcgmValue{f: nil, gpu: index, migUUID: label("mig_uuid"), v: value()})
		case d == allocInfoDesc:
			k := [2]string{index, label("mig_uuid")}
			p := dcgmPod{label("namespace"), label("pod"), label("container")}
			if cur, ok := pods[k]; !ok || p.less(cur) {
				pods[k] = p
			}
		}
	}
	// A MIG instance's free memory: its total less its used.
	used := map[string]float64{}
	for _, val := range values {
		if val.f == dcgmFBUsed && val.migUUID != "" {
			used[val.migUUID] = val.v
		}
	}
	if v.s.xid != nil {
		for index, g := range gpus {
			if g.uuid == "" {
				continue
			}
			code, _ := v.s.xid.lastXID(index) // 0: none since the exporter started
			values = append(values, dcgmValue{f: dcgmXID, gpu: index, v: float64(code)})
		}
	}
	for _, val := range values {
		g := gpus[val.gpu]
		if g == nil || g.uuid == "" || (val.gpm && !g.gpm) || (val.fb && g.mig) {
			continue
		}
		f, x := val.f, val.v
		var mig dcgmMIG
		if val.migUUID != "" {
			var ok bool
			if mig, ok = migs[val.migUUID]; !ok {
				continue
			}
			if f == nil {
				u, ok := used[val.migUUID]
				if !ok {
					continue
				}
				f, x = dcgmFBFree, dcgmMiBOf(x)-u
			}
		}
		labels := []string{val.gpu, g.uuid, g.pciBusID, "nvidia" + val.gpu, g.model, v.hostname, g.driver}
		migIdx := 0
		if val.migUUID != "" {
			labels = append(labels, mig.profile, mig.gi)
			migIdx = 1
		}
		owner, ok := pods[[2]string{val.gpu, val.migUUID}]
		if !ok {
			out = append(out, prometheus.MustNewConstMetric(f.descs[migIdx][0], f.typ, x, labels...))
			continue
		}
		labels = append(labels, owner.namespace, owner.pod, owner.container)
		out = append(out, prometheus.MustNewConstMetric(f.descs[migIdx][1], f.typ, x, labels...))
	}
	return out
}
