package collector

import (
	"regexp"
	"strconv"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Cost metrics: the price of each GPU and MIG instance, for the chargeback
// recording rules (alerts/gpulens-cost.rules.yml, docs/cost.md).
var (
	gpuPriceDesc = desc("gpu", "price_usd_per_hour",
		"Price of the GPU in USD per hour, from the exporter's --cost.* flags (or the simulated scenario's price_usd_per_hour): what the GPU costs whether busy or not.")
	migPriceDesc = desc("mig", "price_usd_per_hour",
		"Price of the MIG instance in USD per hour: the GPU's price times the instance's compute slices (from its profile, 3g.40gb: 3) over the GPU's (nvmlDeviceGetMaxMigDeviceCount: 7 on A100 and H100), or, where the profile does not tell, its memory over the GPU's.",
		"mig_uuid", "gpu_instance_id", "compute_instance_id")
)

// CostCollectorName is the collector's name in gpulens_scrape_collector_*.
const CostCollectorName = "cost"

// PriceSource prices a GPU in USD per hour; false: the GPU has no price and
// the cost collector serves nothing for it. It is called once per GPU, on
// that GPU's sampler goroutine, once its identity (Device.Name, UUID) is
// read.
type PriceSource interface {
	PriceOf(d Device) (usdPerHour float64, ok bool)
}

// PriceFunc adapts a function to PriceSource.
type PriceFunc func(d Device) (float64, bool)

// PriceOf implements PriceSource.
func (f PriceFunc) PriceOf(d Device) (float64, bool) { return f(d) }

// NewCostCollector returns the collector of gpulens_gpu_price_usd_per_hour
// and gpulens_mig_price_usd_per_hour, priced by src. It is not one of
// Factories: the exporter adds it when a price is configured.
func NewCostCollector(src PriceSource) Collector {
	return costCollector{describer: describer{gpuPriceDesc, migPriceDesc}, src: src}
}

type costCollector struct {
	describer
	src PriceSource
}

func (c costCollector) NewDevice(d Device) DeviceSampler {
	p, ok := c.src.PriceOf(d)
	return &costSampler{st: d.state, price: p, priced: ok}
}

type costSampler struct {
	st     *deviceState
	price  float64
	priced bool
	// The GPU's compute slices and memory, read once when first needed
	// (0: not read yet or unknown).
	slices, memTotal uint64
	slicesRead       bool
	memRead          bool
}

func (s *costSampler) Sample(r *Reader, e *Emitter, _ time.Time) {
	if !s.priced {
		return
	}
	e.Gauge(gpuPriceDesc, s.price)
	if s.st == nil {
		return
	}
	m := s.st.migInstances(r)
	if !m.enabled {
		return
	}
	for _, in := range m.instances {
		share, ok := s.migShare(r, in)
		if !ok {
			continue
		}
		e.Gauge(migPriceDesc, s.price*share, in.uuid, strconv.Itoa(in.gi), strconv.Itoa(in.ci))
	}
}

// migShare is the instance's share of the GPU: its compute slices over the
// GPU's, or else its memory over the GPU's.
func (s *costSampler) migShare(r *Reader, in *migInstance) (float64, bool) {
	if !s.slicesRead {
		if n, ok := Call(r, "GetMaxMigDeviceCount", r.Device.GetMaxMigDeviceCount); ok && n > 0 {
			s.slices = uint64(n)
		}
		s.slicesRead = !r.Lost()
	}
	if k, ok := profileSlices(in.profile); ok && s.slices > 0 && k <= s.slices {
		return float64(k) / float64(s.slices), true
	}
	if !in.memOK || in.memTotal == 0 {
		return 0, false
	}
	if !s.memRead {
		s.memTotal = gpuMemoryTotal(r)
		s.memRead = !r.Lost()
	}
	if s.memTotal == 0 {
		return 0, false
	}
	return min(1, float64(in.memTotal)/float64(s.memTotal)), true
}

// gpuMemoryTotal reads the GPU's memory size; 0 when unknown.
func gpuMemoryTotal(r *Reader) uint64 {
	m, ret := callRet(r, "GetMemoryInfo_v2", r.Device.GetMemoryInfo_v2)
	if ret == nvml.SUCCESS {
		return m.Total
	}
	if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND {
		if m, ok := Call(r, "GetMemoryInfo", r.Device.GetMemoryInfo); ok {
			return m.Total
		}
	}
	return 0
}

// profileRE reads a MIG profile's compute slices: "3g.40gb" (a GPU
// instance with one compute instance: its 3 slices), "1c.3g.40gb" (one
// compute slice of a 3-slice GPU instance), "1g.10gb+me" (1).
var profileRE = regexp.MustCompile(`^(?:(\d+)c\.)?(\d+)g\.`)

// profileSlices returns the compute slices of a MIG profile.
func profileSlices(profile string) (uint64, bool) {
	m := profileRE.FindStringSubmatch(profile)
	if m == nil {
		return 0, false
	}
	s := m[2]
	if m[1] != "" {
		s = m[1]
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == 0 {
		return 0, false
	}
	return n, true
}
