package collector

import (
	"math"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// The DCGM-compatible view: the metrics of dcgm-exporter's default counter
// set (etc/default-counters.csv of NVIDIA/dcgm-exporter) with its names,
// types, units and labels, converted from the sampler's snapshot when a
// scrape of the view finds a new snapshot. Nothing of DCGM is used: every
// value is one the native view serves (NVML and GPM), rescaled. A field
// gpulens does not read (memory temperature, NVLink bandwidth, vGPU
// licence) is absent, not faked (docs/dcgm-migration.md lists them).
//
// The view has dcgm-exporter's series set per GPU kind (its default
// `--devices f`, "flex"): a GPU not split into MIG instances is one entity;
// a GPU in MIG mode with GPU instances is one entity per GPU instance and
// none for the GPU, as dcgm-exporter then watches only the instances. Each
// field's scope (dcgmScope) says what it gives per entity.
//
// The files: this one is the table of fields (dcgmFieldTable, by DCGM
// field name) and the view's options; dcgm_convert.go turns a snapshot
// into series; dcgm_xid.go is the XID message table.

// dcgmScope is what a field gives per entity.
type dcgmScope int

const (
	// dcgmDevice: a whole-GPU reading (power, clocks, XID, ...). On a GPU
	// in MIG mode it is repeated, with the GPU's value, once per GPU
	// instance, as DCGM answers a GPU field asked of a GPU instance.
	dcgmDevice dcgmScope = iota
	// dcgmInstance: the GPU's value outside MIG, each GPU instance's own
	// value on a GPU in MIG mode (framebuffer, PROF activity), never the
	// whole GPU's there.
	dcgmInstance
	// dcgmWholeGPU: only on GPUs not split into MIG instances: NVML's
	// utilisation rates are not supported in MIG mode, and DCGM answers
	// N/A for a GPU instance's utilisation and PCIe bytes (NVIDIA/DCGM#88:
	// PCIe traffic has no meaning per instance), so dcgm-exporter serves
	// none for a GPU in MIG mode.
	dcgmWholeGPU
)

// dcgmField is one DCGM field of the view.
type dcgmField struct {
	name, help string
	typ        prometheus.ValueType
	scope      dcgmScope
	// extra are labels every series of the field has after the pod's
	// (err_code, err_msg of DCGM_FI_DEV_XID_ERRORS).
	extra []string
	// descs by [MIG instance labels][pod labels][gpulens_source label].
	descs [2][2][2]*prometheus.Desc
}

// The labels of every DCGM series, as dcgm-exporter writes them (its
// rendermetrics template): the GPU's identity, the host, the driver.
// Hostname is the spelling of every dcgm-exporter release to 4.5.3-4.8.2
// (its main branch renamed it hostname in May 2026, NVIDIA/dcgm-exporter#655).
var (
	dcgmBaseLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
	dcgmMIGLabels  = []string{"GPU_I_PROFILE", "GPU_I_ID"}
	dcgmPodLabels  = []string{"namespace", "pod", "container"}
	// dcgmSourceLabel marks a value that is not DCGM's measurement but
	// gpulens's stand-in from NVML (--compat.dcgm.prof-fallback).
	dcgmSourceLabel = "gpulens_source"
)

func newDCGMField(name string, typ prometheus.ValueType, scope dcgmScope, help string, extra ...string) *dcgmField {
	f := &dcgmField{name: name, help: help, typ: typ, scope: scope, extra: extra}
	for mig := range 2 {
		for pod := range 2 {
			for src := range 2 {
				labels := append([]string(nil), dcgmBaseLabels...)
				if mig == 1 {
					labels = append(labels, dcgmMIGLabels...)
				}
				if pod == 1 {
					labels = append(labels, dcgmPodLabels...)
				}
				labels = append(labels, extra...)
				if src == 1 {
					labels = append(labels, dcgmSourceLabel)
				}
				f.descs[mig][pod][src] = prometheus.NewDesc(name, help, labels, nil)
			}
		}
	}
	return f
}

// The fields, with dcgm-exporter's help texts (default-counters.csv), in
// its order.
var (
	dcgmSMClock      = newDCGMField("DCGM_FI_DEV_SM_CLOCK", prometheus.GaugeValue, dcgmDevice, "SM clock frequency (in MHz).")
	dcgmMemClock     = newDCGMField("DCGM_FI_DEV_MEM_CLOCK", prometheus.GaugeValue, dcgmDevice, "Memory clock frequency (in MHz).")
	dcgmGPUTemp      = newDCGMField("DCGM_FI_DEV_GPU_TEMP", prometheus.GaugeValue, dcgmDevice, "GPU temperature (in C).")
	dcgmPower        = newDCGMField("DCGM_FI_DEV_POWER_USAGE", prometheus.GaugeValue, dcgmDevice, "Power draw (in W).")
	dcgmEnergy       = newDCGMField("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", prometheus.CounterValue, dcgmDevice, "Total energy consumption since boot (in mJ).")
	dcgmPCIeReplay   = newDCGMField("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", prometheus.CounterValue, dcgmDevice, "Total number of PCIe retries.")
	dcgmGPUUtil      = newDCGMField("DCGM_FI_DEV_GPU_UTIL", prometheus.GaugeValue, dcgmWholeGPU, "GPU utilization (in %).")
	dcgmMemCopyUtil  = newDCGMField("DCGM_FI_DEV_MEM_COPY_UTIL", prometheus.GaugeValue, dcgmWholeGPU, "Memory utilization (in %).")
	dcgmEncUtil      = newDCGMField("DCGM_FI_DEV_ENC_UTIL", prometheus.GaugeValue, dcgmWholeGPU, "Encoder utilization (in %).")
	dcgmDecUtil      = newDCGMField("DCGM_FI_DEV_DEC_UTIL", prometheus.GaugeValue, dcgmWholeGPU, "Decoder utilization (in %).")
	dcgmXID          = newDCGMField("DCGM_FI_DEV_XID_ERRORS", prometheus.GaugeValue, dcgmDevice, "Value of the last XID error encountered.", "err_code", "err_msg")
	dcgmFBFree       = newDCGMField("DCGM_FI_DEV_FB_FREE", prometheus.GaugeValue, dcgmInstance, "Framebuffer memory free (in MiB).")
	dcgmFBUsed       = newDCGMField("DCGM_FI_DEV_FB_USED", prometheus.GaugeValue, dcgmInstance, "Framebuffer memory used (in MiB).")
	dcgmFBReserved   = newDCGMField("DCGM_FI_DEV_FB_RESERVED", prometheus.GaugeValue, dcgmInstance, "Framebuffer memory reserved (in MiB).")
	dcgmUncorrRows   = newDCGMField("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, dcgmDevice, "Number of remapped rows for uncorrectable errors")
	dcgmCorrRows     = newDCGMField("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, dcgmDevice, "Number of remapped rows for correctable errors")
	dcgmRemapFailure = newDCGMField("DCGM_FI_DEV_ROW_REMAP_FAILURE", prometheus.GaugeValue, dcgmDevice, "Whether remapping of rows has failed")
	dcgmGREngine     = newDCGMField("DCGM_FI_PROF_GR_ENGINE_ACTIVE", prometheus.GaugeValue, dcgmInstance, "Ratio of time the graphics engine is active.")
	dcgmTensor       = newDCGMField("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", prometheus.GaugeValue, dcgmInstance, "Ratio of cycles the tensor (HMMA) pipe is active.")
	dcgmDRAM         = newDCGMField("DCGM_FI_PROF_DRAM_ACTIVE", prometheus.GaugeValue, dcgmInstance, "Ratio of cycles the device memory interface is active sending or receiving data.")
	dcgmPCIeTX       = newDCGMField("DCGM_FI_PROF_PCIE_TX_BYTES", prometheus.GaugeValue, dcgmWholeGPU, "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.")
	dcgmPCIeRX       = newDCGMField("DCGM_FI_PROF_PCIE_RX_BYTES", prometheus.GaugeValue, dcgmWholeGPU, "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.")
)

// dcgmFieldTable is every field the view can serve, by DCGM field name (a
// filter by field name, such as a counters file, looks fields up here).
var dcgmFieldTable = map[string]*dcgmField{}

// dcgmFieldOrder is the table in default-counters.csv's order.
var dcgmFieldOrder = []*dcgmField{dcgmSMClock, dcgmMemClock, dcgmGPUTemp, dcgmPower, dcgmEnergy, dcgmPCIeReplay,
	dcgmGPUUtil, dcgmMemCopyUtil, dcgmEncUtil, dcgmDecUtil, dcgmXID, dcgmFBFree, dcgmFBUsed, dcgmFBReserved,
	dcgmUncorrRows, dcgmCorrRows, dcgmRemapFailure, dcgmGREngine, dcgmTensor, dcgmDRAM, dcgmPCIeTX, dcgmPCIeRX}

var (
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
}

func dcgmOne(f *dcgmField, conv func(float64) float64) dcgmSource {
	return dcgmSource{to: map[string]*dcgmField{"": f}, conv: conv}
}

// dcgmGPUSources are the native GPU families converted, by Desc. PCIe
// throughput is GPM's mean over the sampler interval on Hopper and newer,
// NVML's 20 ms window elsewhere (nvmlDeviceGetPcieThroughput, Maxwell and
// newer): either is served.
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
	memFreeDesc:        dcgmOne(dcgmFBFree, dcgmMiBOf),
	memUsedDesc:        dcgmOne(dcgmFBUsed, dcgmMiBOf),
	memReservedDesc:    dcgmOne(dcgmFBReserved, dcgmMiBOf),
	remappedDesc:       {label: "type", to: map[string]*dcgmField{"correctable": dcgmCorrRows, "uncorrectable": dcgmUncorrRows}, conv: dcgmIdentity},
	remapFailedDesc:    dcgmOne(dcgmRemapFailure, dcgmIdentity),
	pcieThroughputDesc: {label: "direction", to: map[string]*dcgmField{"tx": dcgmPCIeTX, "rx": dcgmPCIeRX}, conv: dcgmIdentity},
}

// dcgmProfFields maps the GPM families (GPU and MIG) to PROF fields.
var dcgmProfFields = map[string]*dcgmField{
	namespace + "_gpu_graphics_activity_ratio":          dcgmGREngine,
	namespace + "_gpu_tensor_activity_ratio":            dcgmTensor,
	namespace + "_gpu_dram_bandwidth_utilization_ratio": dcgmDRAM,
}

// dcgmFallback is a PROF field's stand-in from NVML on a GPU without GPM
// (--compat.dcgm.prof-fallback): the native ratio it is read from and the
// gpulens_source label that marks it.
type dcgmFallback struct {
	native *prometheus.Desc
	source string
}

// dcgmFallbacks: the graphics engine's active time from NVML's GPU
// utilisation (the fraction of the sample period a kernel ran), the DRAM
// interface's from NVML's memory utilisation (the fraction it was read or
// written). No tensor field: NVML has nothing that counts tensor work.
var dcgmFallbacks = map[*dcgmField]dcgmFallback{
	dcgmGREngine: {utilGPUDesc, "nvml_utilization"},
	dcgmDRAM:     {utilMemDesc, "nvml_memory_utilization"},
}

// dcgmMIGSources are the native MIG families converted, by Desc.
var dcgmMIGSources = map[*prometheus.Desc]*dcgmField{}

func init() {
	for _, f := range dcgmFieldOrder {
		dcgmFieldTable[f.name] = f
	}
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
// view serves, by name, in default-counters.csv's order (docs and tests).
func DCGMFields() []string {
	out := make([]string, 0, len(dcgmFieldOrder))
	for _, f := range dcgmFieldOrder {
		out = append(out, f.name)
	}
	return out
}

// DCGMFallbackFields lists the PROF fields --compat.dcgm.prof-fallback
// serves from NVML on GPUs without GPM, with their gpulens_source value.
func DCGMFallbackFields() map[string]string {
	out := map[string]string{}
	for f, fb := range dcgmFallbacks {
		out[f.name] = fb.source
	}
	return out
}

// DCGMOptions configures NewDCGMExposition.
type DCGMOptions struct {
	// Hostname is the Hostname label (dcgm-exporter: $NODE_NAME or the
	// host name); empty leaves it empty, which Prometheus drops.
	Hostname string
	// ProfFallback serves DCGM_FI_PROF_GR_ENGINE_ACTIVE and
	// DCGM_FI_PROF_DRAM_ACTIVE on GPUs without a GPM value from NVML's
	// utilisation rates, labelled gpulens_source (dcgmFallbacks).
	ProfFallback bool
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
	v := newDCGMView(s, opts)
	convert := v.convert
	if opts.Counters != nil {
		convert = opts.Counters.wrap(convert)
	}
	return newExposition(s, NewRegistry(), opts.Exposition, convert, expfmt.DefaultAcceptedFormats())
}
