// Package verify is gpulens-verify's engine: it reads what NVML says of a
// host's GPUs, runs the probe (internal/gpuprobe) a few times on each CUDA
// device, judges every fact and figure against the GPU's spec
// (internal/gpuspec) and the buyer's expectations, and renders the verdicts
// as console text, JSON and a self-contained HTML page.
package verify

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// SchemaVersion is the version of the JSON report. It changes when a field
// changes meaning or is removed; added fields keep it.
const SchemaVersion = 1

// Status is a check's verdict.
type Status string

// Verdicts, from best to worst.
const (
	StatusPass Status = "pass"
	StatusWarn Status = "warn"
	StatusFail Status = "fail"
)

func (s Status) rank() int {
	switch s {
	case StatusFail:
		return 2
	case StatusWarn:
		return 1
	}
	return 0
}

// Worse returns the worse of two verdicts.
func Worse(a, b Status) Status {
	if b.rank() > a.rank() {
		return b
	}
	return a
}

// Check is one verdict with its reason in plain words.
//
// Reason is for people. What code needs (the answers, a tool reading the
// JSON) it reads from the fields after it, never from the reason's words.
type Check struct {
	ID     string `json:"id"`
	Title  string `json:"title"`
	Status Status `json:"status"`
	Reason string `json:"reason"`
	// NotMeasured: the data the check needs is missing (the check warns
	// and Reason says why). Omitted when the check was measured.
	NotMeasured bool `json:"not_measured,omitempty"`
	// Value is the measured quantity the check judged, in Unit (base
	// units: bytes, bytes/s, FLOP/s, seconds, ratios 0–1, watts, lanes).
	// Expected is what it was compared with and Share the ratio the
	// verdict was taken on: Value / Expected, or for a kernel figure that
	// share per unit of the GPU time the processes NVML shows busy left to
	// the probe (the reason says so). Each is omitted when the check has
	// none (no spec to compare with, a check of a state, not a quantity).
	Value    *float64 `json:"value,omitempty"`
	Unit     string   `json:"unit,omitempty"`
	Expected *float64 `json:"expected,omitempty"`
	Share    *float64 `json:"share,omitempty"`
}

// Units of Check.Value and Check.Expected.
const (
	UnitBytes          = "bytes"
	UnitBytesPerSecond = "bytes_per_second"
	UnitFLOPS          = "flop_per_second"
	UnitSeconds        = "seconds"
	UnitRatio          = "ratio"
	UnitWatts          = "watts"
	UnitLanes          = "lanes"
)

// Measured says whether the check had the data it needs.
func (c Check) Measured() bool { return !c.NotMeasured }

// measuring returns c carrying the value it judged.
func (c Check) measuring(value float64, unit string) Check {
	c.Value, c.Unit = &value, unit
	return c
}

// against returns c carrying what its value was compared with and the
// share its verdict was taken on.
func (c Check) against(expected, share float64) Check {
	c.Expected, c.Share = &expected, &share
	return c
}

// Answer is a buyer's question answered from the checks.
type Answer struct {
	ID       string `json:"id"`
	Question string `json:"question"`
	Status   Status `json:"status"`
	Answer   string `json:"answer"`
}

// Report is the whole acceptance report.
type Report struct {
	SchemaVersion int         `json:"schema_version"`
	Tool          string      `json:"tool"`
	Version       string      `json:"version,omitempty"`
	Started       time.Time   `json:"started"`
	Finished      time.Time   `json:"finished"`
	Simulated     *Simulation `json:"simulated,omitempty"`
	Settings      Settings    `json:"settings"`
	Host          Host        `json:"host"`
	// Checks and Answers about the host as a whole (driver, CUDA, device
	// count); each device has its own.
	Checks  []Check  `json:"checks"`
	Answers []Answer `json:"answers"`
	Devices []Device `json:"devices"`
	Summary Summary  `json:"summary"`
	// Notes are things the reader should know that are not checks (a
	// simulated run, a skipped option).
	Notes []string `json:"notes,omitempty"`
}

// Simulation names the simulated fleet a report was made on.
type Simulation struct {
	Scenario string `json:"scenario"`
	Seed     int64  `json:"seed"`
}

// Settings are the options the report was made with.
type Settings struct {
	Repeat   int           `json:"repeat"`
	Interval time.Duration `json:"interval_ns"`
	Probe    ProbeSettings `json:"probe"`
	Expect   Expect        `json:"expect"`
	Strict   bool          `json:"strict"`
	Devices  []int         `json:"devices,omitempty"`
}

// ProbeSettings is the probe's Config as reported.
type ProbeSettings struct {
	GPUTimeBudget  time.Duration `json:"gpu_time_budget_ns"`
	StolenWindow   time.Duration `json:"stolen_window_ns"`
	MaxMemoryBytes uint64        `json:"max_memory_bytes"`
	Fill           bool          `json:"fill"`
	FillLimitBytes uint64        `json:"fill_limit_bytes,omitempty"`
}

// ProbeSettingsOf reports a probe Config.
func ProbeSettingsOf(c gpuprobe.Config) ProbeSettings {
	return ProbeSettings{GPUTimeBudget: c.GPUTimeBudget, StolenWindow: c.StolenWindow, MaxMemoryBytes: c.MaxMemoryBytes,
		Fill: c.Fill, FillLimitBytes: c.FillLimitBytes}
}

// Expect are the buyer's expectations; zero values are "not set".
type Expect struct {
	GPU       string `json:"gpu,omitempty"` // a gpuspec key
	VRAMBytes uint64 `json:"vram_bytes,omitempty"`
	PCIeGen   int    `json:"pcie_gen,omitempty"`
	PCIeWidth int    `json:"pcie_width,omitempty"`
	Driver    string `json:"driver,omitempty"` // "550.54.15" or a prefix "550"
	CUDA      string `json:"cuda,omitempty"`   // "12.4"
	Devices   int    `json:"devices,omitempty"`
}

// Host is what the two sources said of the host.
type Host struct {
	// NVML is nil when NVML could not be used; NVMLError says why.
	NVML      *NVMLHost `json:"nvml,omitempty"`
	NVMLError string    `json:"nvml_error,omitempty"`
	// CUDADevices are the CUDA-visible devices; CUDAError says why there
	// are none when libcuda could not be used.
	CUDADevices []gpuprobe.DeviceInfo `json:"cuda_devices,omitempty"`
	CUDAError   string                `json:"cuda_error,omitempty"`
	// CUDADriverVersion is CUDA's encoding: 12040 for 12.4.
	CUDADriverVersion int `json:"cuda_driver_version,omitempty"`
}

// Device is one CUDA device (or, without CUDA, one NVML GPU) with
// everything measured and judged about it.
type Device struct {
	// Label is "CUDA 0" for CUDA ordinal 0, "NVML GPU 0" when CUDA could
	// not be used, "NVML GPU 4 MIG 1g.10gb (GPU instance 3)" for a MIG
	// instance probed by a child (ProbeChild).
	Label    string `json:"label"`
	Name     string `json:"name"`
	UUID     string `json:"uuid,omitempty"`
	PCIBusID string `json:"pci_bus_id,omitempty"`

	CUDA *gpuprobe.DeviceInfo `json:"cuda,omitempty"`
	// NVML is the matching NVML GPU (the parent GPU of a MIG device) and
	// MatchedBy how it was matched ("uuid", "mig_uuid", "pci_bus_id").
	NVML      *GPUFacts    `json:"nvml,omitempty"`
	MatchedBy string       `json:"matched_by,omitempty"`
	MIG       *MIGInstance `json:"mig,omitempty"`
	Spec      *SpecRef     `json:"spec,omitempty"`

	Runs    []ProbeRun `json:"runs,omitempty"`
	Figures Figures    `json:"figures"`
	Checks  []Check    `json:"checks"`
	Answers []Answer   `json:"answers"`
	Verdict Status     `json:"verdict"`
	// ProbeChild: a MIG instance this process's CUDA does not show,
	// probed by a child process of its own (mig.go); CUDA is then the
	// device as the child saw it.
	ProbeChild bool `json:"probe_child,omitempty"`
}

// SpecRef is the spec a device was judged against.
type SpecRef struct {
	Key   string `json:"key"`
	Model string `json:"model"`
	// From says how the spec was chosen: "name" (the device's name) or
	// "expect" (--expect.gpu).
	From string `json:"from"`
	// Estimated: the expected probe figures are estimates, not measured.
	Estimated bool `json:"estimated"`
}

// ProbeRun is one probe of one device.
type ProbeRun struct {
	Result *gpuprobe.Result `json:"result,omitempty"`
	Error  string           `json:"error,omitempty"`
	// Skipped: the probe left the device alone (a compute mode other than
	// DEFAULT, too little free memory) and measured nothing.
	Skipped *gpuprobe.Skip `json:"skipped,omitempty"`
	// VisibleSM is, per visible context NVML's samples show on the GPU (a
	// PID; "mps" for the MPS server's context and its clients; this
	// process left out), the most of the stolen-time windows it can have
	// taken (0-1, the windows' mean; gpuprobe.UnexplainedWindow.Visible);
	// nil where NVML cannot tell.
	VisibleSM map[string]float64 `json:"visible_sm,omitempty"`
	// UnexplainedStolenRatio is the least part of the stolen ratio the
	// visible processes can leave unexplained (Unexplained.Ratio, basis
	// visible_processes); nil when not known or NVML has no per-process
	// utilisation (the checks then judge the raw ratio).
	UnexplainedStolenRatio *float64 `json:"unexplained_stolen_ratio,omitempty"`
	// Unexplained is the whole estimate (gpuprobe.EstimateUnexplained):
	// basis, figure, upper bound, sample period, per-window figures, or
	// the reason it is not known; nil without a stolen-time result or
	// NVML.
	Unexplained *gpuprobe.Unexplained `json:"unexplained,omitempty"`
}

// Figures summarise the runs' measurements (nil: never measured).
type Figures struct {
	H2DBytesPerSecond        *Stat `json:"h2d_bytes_per_second,omitempty"`
	D2HBytesPerSecond        *Stat `json:"d2h_bytes_per_second,omitempty"`
	DeviceCopyBytesPerSecond *Stat `json:"device_copy_bytes_per_second,omitempty"`
	FP32FLOPS                *Stat `json:"fp32_flops,omitempty"`
	FP16TensorFLOPS          *Stat `json:"fp16_tensor_flops,omitempty"`
	BF16TensorFLOPS          *Stat `json:"bf16_tensor_flops,omitempty"`
	LaunchLatencySeconds     *Stat `json:"launch_latency_seconds,omitempty"`
	LaunchLatencyP99Seconds  *Stat `json:"launch_latency_p99_seconds,omitempty"`
	StolenRatio              *Stat `json:"stolen_ratio,omitempty"`
	StolenMaxRatio           *Stat `json:"stolen_max_ratio,omitempty"`
	// UnexplainedStolenRatio: the share of the window taken by contexts
	// NVML does not show (ProbeRun.UnexplainedStolenRatio).
	UnexplainedStolenRatio *Stat `json:"unexplained_stolen_ratio,omitempty"`
	StolenGapMedianSeconds *Stat `json:"stolen_gap_median_seconds,omitempty"`
	StolenGapP90Seconds    *Stat `json:"stolen_gap_p90_seconds,omitempty"`
	StolenGapMaxSeconds    *Stat `json:"stolen_gap_max_seconds,omitempty"`
	MemoryTotalBytes       *Stat `json:"memory_total_bytes,omitempty"`
	MemoryFreeBytes        *Stat `json:"memory_free_bytes,omitempty"`
	MemoryUsableBytes      *Stat `json:"memory_usable_bytes,omitempty"`
}

// Summary is the overall verdict.
type Summary struct {
	Verdict  Status `json:"verdict"`
	Pass     int    `json:"pass"`
	Warn     int    `json:"warn"`
	Fail     int    `json:"fail"`
	ExitCode int    `json:"exit_code"`
}

// Exit statuses of gpulens-verify.
const (
	ExitPass     = 0 // every check passed (or only warnings without --strict)
	ExitFail     = 1 // a check failed (or warned, with --strict)
	ExitBadInput = 2 // bad flags, or the report could not be written
)

// summarise counts the verdicts and sets the exit code.
func (r *Report) summarise() {
	s := Summary{Verdict: StatusPass}
	count := func(cs []Check) {
		for _, c := range cs {
			switch c.Status {
			case StatusPass:
				s.Pass++
			case StatusWarn:
				s.Warn++
			case StatusFail:
				s.Fail++
			}
			s.Verdict = Worse(s.Verdict, c.Status)
		}
	}
	count(r.Checks)
	for _, d := range r.Devices {
		count(d.Checks)
	}
	s.ExitCode = ExitPass
	if s.Fail > 0 || (r.Settings.Strict && s.Warn > 0) {
		s.ExitCode = ExitFail
	}
	r.Summary = s
}

// WriteJSON writes the report as indented JSON.
func WriteJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("encoding JSON report: %w", err)
	}
	return nil
}

// ReadJSON reads a report written by WriteJSON, refusing another schema
// version.
func ReadJSON(rd io.Reader) (*Report, error) {
	var r Report
	dec := json.NewDecoder(rd)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("decoding JSON report: %w", err)
	}
	if r.SchemaVersion != SchemaVersion {
		return nil, fmt.Errorf("JSON report has schema version %d, this gpulens-verify reads %d", r.SchemaVersion, SchemaVersion)
	}
	return &r, nil
}

// WriteFile writes a rendering of r to path atomically (a temporary file
// in the same folder, renamed).
func WriteFile(path string, r *Report, render func(io.Writer, *Report) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".gpulens-verify-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	if err := render(tmp, r); err != nil {
		tmp.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}
