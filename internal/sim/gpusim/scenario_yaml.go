package gpusim

import (
	"go.yaml.in/yaml/v3"
)

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
