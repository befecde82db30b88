package gpuspec

import (
	"math"
	"strings"
	"testing"
)

func TestLookupByName(t *testing.T) {
	for _, tc := range []struct {
		name string
		key  string // "" : no match
	}{
		// Names as NVML reports them on real boards.
		{"NVIDIA H100 80GB HBM3", "h100-sxm"},
		{"NVIDIA H100 PCIe", "h100-pcie"},
		{"NVIDIA H100 NVL", "h100-nvl"},
		{"NVIDIA H200", "h200"},
		{"NVIDIA H200 NVL", "h200-nvl"},
		{"NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"},
		{"NVIDIA A100-SXM4-40GB", "a100-40gb-sxm"},
		{"NVIDIA A100 80GB PCIe", "a100-80gb-pcie"},
		{"NVIDIA A100-PCIE-40GB", "a100-40gb-pcie"},
		{"NVIDIA L4", "l4"},
		{"NVIDIA L40S", "l40s"},
		{"NVIDIA A10", "a10"},
		{"NVIDIA A30", "a30"},
		{"NVIDIA GeForce RTX 4090", "rtx-4090"},
		{"NVIDIA B200", "b200"},
		// Names of go-nvml's mock configurations, which the simulator uses.
		{"NVIDIA H200 141GB HBM3e", "h200"},
		{"NVIDIA B200 180GB HBM3e", "b200"},
		{"NVIDIA A100-PCIE-80GB", "a100-80gb-pcie"},
		{"NVIDIA A30-PCIE-24GB", "a30"},
		// Older drivers without the vendor prefix; any case.
		{"A100-SXM4-40GB", "a100-40gb-sxm"},
		{"nvidia h100 80gb hbm3", "h100-sxm"},
		// MIG devices carry their parent's name.
		{"NVIDIA H100 80GB HBM3 MIG 3g.40gb", "h100-sxm"},
		{"NVIDIA A100-SXM4-80GB MIG 1g.10gb", "a100-80gb-sxm"},
		// vGPU profiles.
		{"NVIDIA H100XM-20C", "h100-sxm"},
		{"GRID A100X-40C", "a100-40gb-sxm"},
		{"NVIDIA A100DX-80C", "a100-80gb-sxm"},
		{"NVIDIA H100L-94C", "h100-nvl"},
		{"NVIDIA L4-24Q", "l4"},
		// Near misses that are other products.
		{"NVIDIA A10G", ""},
		{"NVIDIA L40", ""},
		{"NVIDIA GeForce RTX 4090 D", ""},
		{"NVIDIA GH200 480GB", ""},
		{"Tesla V100-SXM2-16GB", ""},
		{"", ""},
	} {
		s, ok := Lookup(tc.name)
		if tc.key == "" {
			if ok {
				t.Errorf("Lookup(%q) = %s, want no match", tc.name, s.Key)
			}
			continue
		}
		if !ok || s.Key != tc.key {
			t.Errorf("Lookup(%q) = %q (ok %v), want %q", tc.name, s.Key, ok, tc.key)
		}
	}
}

func TestByKey(t *testing.T) {
	for _, tc := range []struct{ in, key string }{
		{"h100-sxm", "h100-sxm"},
		{"H100-SXM", "h100-sxm"},
		{"h100_sxm5", "h100-sxm"},
		{"h200", "h200"},
		{"H200-SXM", "h200"},
		{"a100-80gb-sxm", "a100-80gb-sxm"},
		{"A100-SXM4-80GB", "a100-80gb-sxm"},
		{"l4", "l4"},
		{" L40S ", "l40s"},
		{"4090", "rtx-4090"},
	} {
		s, err := ByKey(tc.in)
		if err != nil || s.Key != tc.key {
			t.Errorf("ByKey(%q) = %q, %v; want %q", tc.in, s.Key, err, tc.key)
		}
	}
	_, err := ByKey("h100")
	if err == nil {
		t.Fatal(`ByKey("h100") succeeded; the key is ambiguous (SXM, PCIe, NVL) and must be refused`)
	}
	for _, want := range []string{`"h100"`, "valid keys:", "h100-sxm", "h100-pcie", "h100-nvl", "h200", "l4", "rtx-4090"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestTableIsComplete(t *testing.T) {
	required := []string{"a100-40gb-sxm", "a100-80gb-sxm", "a100-40gb-pcie", "a100-80gb-pcie", "h100-pcie", "h100-sxm",
		"h100-nvl", "h200", "l4", "l40s", "a10", "rtx-4090", "b200", "a30"}
	names := Names()
	for _, k := range required {
		found := false
		for _, n := range names {
			found = found || n == k
		}
		if !found {
			t.Errorf("Names() lacks %s", k)
		}
	}
	keys := map[string]string{}
	for _, s := range All() {
		for _, k := range append([]string{s.Key}, s.Aliases...) {
			if k != NormalizeKey(k) {
				t.Errorf("%s: key or alias %q is not normalised", s.Key, k)
			}
			if other, dup := keys[k]; dup {
				t.Errorf("key %q names both %s and %s", k, other, s.Key)
			}
			keys[k] = s.Key
		}
		if s.Model == "" || len(s.Match) == 0 || len(s.Sources) == 0 {
			t.Errorf("%s: model, patterns and sources are required", s.Key)
		}
		for _, src := range s.Sources {
			if !strings.HasPrefix(src, "https://") {
				t.Errorf("%s: source %q is not a URL", s.Key, src)
			}
		}
		if s.MemoryBytes == 0 || s.MemoryBandwidth <= 0 || s.FP32FLOPS <= 0 || s.FP16TensorFLOPS <= 0 ||
			s.BF16TensorFLOPS <= 0 || s.TDPWatts <= 0 || s.SMs <= 0 || s.PCIeGen == 0 || s.PCIeWidth == 0 {
			t.Errorf("%s: a figure is missing: %+v", s.Key, s)
		}
		for name, share := range map[string]float64{"tensor": s.ProbeTensorShare, "fp32": s.ProbeFP32Share, "copy": s.DeviceCopyShare} {
			if share <= 0 || share > 1 {
				t.Errorf("%s: %s share %v outside (0,1]", s.Key, name, share)
			}
		}
		// Every model's own name must find it (its first pattern, made concrete).
		if got, ok := Lookup("NVIDIA " + s.Model); ok && got.Key != s.Key {
			t.Errorf("Lookup(NVIDIA %s) = %s, want %s", s.Model, got.Key, s.Key)
		}
	}
}

func TestExpected(t *testing.T) {
	s, err := ByKey("h100-sxm")
	if err != nil {
		t.Fatal(err)
	}
	e := s.Expected()
	// PCIe Gen5 x16: 16 lanes × 32 GT/s × 128/130 / 8 = 63.02 GB/s per direction.
	if got, want := PCIeBytesPerSecond(5, 16), 63.015e9; math.Abs(got-want) > 0.01e9 {
		t.Errorf("Gen5 x16 = %.4g B/s, want %.4g", got, want)
	}
	if got, want := PCIeBytesPerSecond(4, 16), 31.51e9; math.Abs(got-want) > 0.01e9 {
		t.Errorf("Gen4 x16 = %.4g B/s, want %.4g", got, want)
	}
	if PCIeBytesPerSecond(9, 16) != 0 {
		t.Error("unknown PCIe generation must give 0")
	}
	for name, c := range map[string]struct{ got, want float64 }{
		"h2d":         {e.H2DBytesPerSecond, 63.015e9 * HostCopyShare},
		"d2h":         {e.D2HBytesPerSecond, 63.015e9 * HostCopyShare},
		"device copy": {e.DeviceCopyBytesPerSecond, 3350e9 * shareCopy},
		"fp32":        {e.FP32FLOPS, 67e12 * shareFP32},
		"fp16":        {e.FP16TensorFLOPS, 989.4e12 * shareTensorHopper},
		"bf16":        {e.BF16TensorFLOPS, 989.4e12 * shareTensorHopper},
	} {
		if math.Abs(c.got-c.want)/c.want > 1e-3 {
			t.Errorf("%s: expected %.4g, want %.4g", name, c.got, c.want)
		}
	}
	if !s.Estimated() {
		t.Error("no figure of the table is measured yet; Estimated must be true")
	}
	if got := s.MemoryGiB(); got != 80 {
		t.Errorf("MemoryGiB = %v, want 80", got)
	}
}

// TestL2CacheSizes: every model has its L2 size (the probe sizes its
// device-copy buffers from it), at the whitepapers' figures.
func TestL2CacheSizes(t *testing.T) {
	want := map[string]uint64{"a100-80gb-sxm": 40, "a30": 24, "a10": 6, "l4": 48, "l40s": 96, "rtx-4090": 72, "h100-sxm": 50, "h200": 50, "b200": 126}
	for _, s := range All() {
		if s.L2CacheBytes == 0 || s.L2CacheBytes >= s.MemoryBytes/64 {
			t.Errorf("%s: L2CacheBytes %d, want a size well below the memory (%d)", s.Key, s.L2CacheBytes, s.MemoryBytes)
		}
		if w, ok := want[s.Key]; ok && s.L2CacheBytes != w*MiB {
			t.Errorf("%s: L2CacheBytes %d, want %d MiB", s.Key, s.L2CacheBytes, w)
		}
	}
}
