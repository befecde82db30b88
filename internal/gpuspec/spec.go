// Package gpuspec is a table of common datacenter GPUs, kept in code with the
// sources of every figure: memory size and bandwidth, host link, power,
// datasheet FP32 and tensor throughput, and what gpulens's probe
// (internal/gpuprobe) is expected to reach on a healthy card of that model.
//
// The datasheet figures answer "what was I sold?"; the expected probe figures
// answer "is this card delivering it?". They differ because the probe's
// kernels are simple and portable (a grid-stride copy, FP32 FMA chains and
// warp-level mma.sync), not tuned libraries: on Hopper and Blackwell the
// datasheet tensor peak needs wgmma/tcgen05, which mma.sync does not use.
// Where an expected figure was not measured on real hardware it is an
// estimate and says so (Spec.ProbeMeasured is empty).
package gpuspec

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Units for the table.
const (
	MiB   = 1 << 20
	GiB   = 1 << 30
	GBps  = 1e9  // bytes per second
	TBps  = 1e12 // bytes per second
	TFLOP = 1e12 // FLOP per second
)

// Spec is one GPU model.
type Spec struct {
	// Key is the short name --expect.gpu accepts ("h100-sxm"); lower case.
	Key string
	// Aliases are other keys accepted for the same model.
	Aliases []string
	// Model is the name used in messages ("H100 SXM").
	Model string
	// Match are case-insensitive regular expressions over the name NVML or
	// CUDA reports ("NVIDIA H100 80GB HBM3"), including NVIDIA vGPU profile
	// names of the model ("NVIDIA H100XM-20C") and MIG device names (the
	// parent's name plus " MIG 3g.40gb"). Exclude removes names that match
	// but are another model.
	Match   []string
	Exclude []string

	Architecture      string // "Hopper"
	ComputeCapability string // "9.0"
	SMs               int
	// L2CacheBytes is the L2 cache CUDA reports
	// (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE; the whitepapers' "MB" is MiB
	// there: 50 MiB on an H100): the probe's device-copy buffers must each
	// be several times larger, and its memory budget must allow them.
	L2CacheBytes uint64

	// MemoryBytes is the advertised memory size. NVIDIA's "GB" for GPU
	// memory is binary: an "80GB" H100 has 80 GiB of DRAM, of which NVML
	// reports about 99.5 % (79.6 GiB) and GDDR cards with ECC on about
	// 93.75 %.
	MemoryBytes uint64
	MemoryType  string
	// MemoryBandwidth is the datasheet peak, bytes/s (decimal: 3.35 TB/s).
	MemoryBandwidth float64
	// PCIeGen and PCIeWidth are the host link the card supports.
	PCIeGen, PCIeWidth int
	TDPWatts           float64
	// FP32FLOPS is the datasheet non-tensor FP32 peak (FMA = 2 FLOP).
	FP32FLOPS float64
	// FP16TensorFLOPS and BF16TensorFLOPS are the datasheet dense (no
	// sparsity) tensor peaks with FP32 accumulation, the mode the probe uses.
	FP16TensorFLOPS float64
	BF16TensorFLOPS float64

	// ProbeTensorShare is the share of the dense tensor peak the probe's
	// mma.sync kernel reaches on a healthy card (FP16 and BF16 alike).
	ProbeTensorShare float64
	// ProbeFP32Share is the share of FP32FLOPS the probe's FMA kernel
	// reaches on a healthy card.
	ProbeFP32Share float64
	// DeviceCopyShare is the share of MemoryBandwidth the probe's copy kernel
	// reaches (read + written bytes).
	DeviceCopyShare float64
	// ProbeMeasured says where the expected probe figures were measured
	// ("H200 SXM, driver 580, gpulens-verify 2026-…"); empty: they are
	// estimates from the architecture (see Notes and docs/verify.md).
	ProbeMeasured string

	// Sources are the datasheets and pages the figures come from.
	Sources []string
	// Notes explain anything surprising in the figures.
	Notes string

	match, exclude []*regexp.Regexp
}

// HostCopyShare is the share of the PCIe link's per-direction payload rate
// that pinned host↔device copies reach on a healthy host (estimate: about
// 25 GB/s of Gen4 x16's 31.5 GB/s, 50–55 GB/s of Gen5 x16's 63 GB/s).
const HostCopyShare = 0.75

// pcieLaneBytesPerSecond is the payload rate of one PCIe lane per direction
// after line coding (8b/10b to Gen2, 128b/130b from Gen3), by generation.
var pcieLaneBytesPerSecond = map[int]float64{
	1: 250e6,
	2: 500e6,
	3: 8e9 / 8 * 128 / 130,
	4: 16e9 / 8 * 128 / 130,
	5: 32e9 / 8 * 128 / 130,
	6: 64e9 / 8 * 242 / 256, // PAM4 with FLIT encoding
}

// PCIeBytesPerSecond is the per-direction payload rate of a PCIe link of
// that generation and width; 0 for an unknown generation.
func PCIeBytesPerSecond(gen, width int) float64 {
	return pcieLaneBytesPerSecond[gen] * float64(width)
}

// Expected are the figures the probe should reach on a healthy card, in the
// probe's units (bytes/s, FLOP/s).
type Expected struct {
	H2DBytesPerSecond        float64
	D2HBytesPerSecond        float64
	DeviceCopyBytesPerSecond float64
	FP32FLOPS                float64
	FP16TensorFLOPS          float64
	BF16TensorFLOPS          float64
}

// Expected returns the probe figures a healthy, whole, dedicated card of
// this model reaches.
func (s Spec) Expected() Expected {
	host := PCIeBytesPerSecond(s.PCIeGen, s.PCIeWidth) * HostCopyShare
	return Expected{
		H2DBytesPerSecond:        host,
		D2HBytesPerSecond:        host,
		DeviceCopyBytesPerSecond: s.MemoryBandwidth * s.DeviceCopyShare,
		FP32FLOPS:                s.FP32FLOPS * s.ProbeFP32Share,
		FP16TensorFLOPS:          s.FP16TensorFLOPS * s.ProbeTensorShare,
		BF16TensorFLOPS:          s.BF16TensorFLOPS * s.ProbeTensorShare,
	}
}

// Estimated reports whether the expected probe figures are estimates.
func (s Spec) Estimated() bool { return s.ProbeMeasured == "" }

// MemoryGiB is MemoryBytes in GiB.
func (s Spec) MemoryGiB() float64 { return float64(s.MemoryBytes) / GiB }

func (s Spec) matches(name string) bool {
	hit := false
	for _, re := range s.match {
		if re.MatchString(name) {
			hit = true
			break
		}
	}
	if !hit {
		return false
	}
	for _, re := range s.exclude {
		if re.MatchString(name) {
			return false
		}
	}
	return true
}

// compiled is the table with its patterns compiled, in match order.
var compiled = func() []Spec {
	out := make([]Spec, len(table))
	for i, s := range table {
		for _, p := range s.Match {
			s.match = append(s.match, regexp.MustCompile("(?i)"+p))
		}
		for _, p := range s.Exclude {
			s.exclude = append(s.exclude, regexp.MustCompile("(?i)"+p))
		}
		out[i] = s
	}
	return out
}()

// All returns every spec, in match order.
func All() []Spec { return append([]Spec(nil), compiled...) }

// Lookup finds the spec of a GPU by the name NVML or CUDA reports. The
// first entry whose patterns match wins; more specific entries come first.
func Lookup(name string) (Spec, bool) {
	name = strings.TrimSpace(name)
	if name == "" {
		return Spec{}, false
	}
	for _, s := range compiled {
		if s.matches(name) {
			return s, true
		}
	}
	return Spec{}, false
}

// Names lists the keys ByKey accepts (not the aliases), sorted.
func Names() []string {
	out := make([]string, 0, len(compiled))
	for _, s := range compiled {
		out = append(out, s.Key)
	}
	sort.Strings(out)
	return out
}

// NormalizeKey folds case, spaces and underscores: "H100_SXM" → "h100-sxm".
func NormalizeKey(key string) string {
	k := strings.ToLower(strings.TrimSpace(key))
	k = strings.NewReplacer("_", "-", " ", "-").Replace(k)
	return k
}

// ByKey finds a spec by its key or an alias, case-insensitively. An unknown
// key is an error listing the valid keys.
func ByKey(key string) (Spec, error) {
	k := NormalizeKey(key)
	for _, s := range compiled {
		if s.Key == k {
			return s, nil
		}
		for _, a := range s.Aliases {
			if a == k {
				return s, nil
			}
		}
	}
	return Spec{}, fmt.Errorf("unknown GPU model %q; valid keys: %s", key, strings.Join(Names(), ", "))
}
