package gpusim

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// nvmlFree is gpuprobe.Options.FreeMemory over the fleet's NVML, as
// gpulens-verify wires it.
func nvmlFree(lib nvml.Interface) gpuprobe.FreeMemoryFunc {
	return func(d gpuprobe.DeviceInfo) (uint64, bool) {
		h, r := lib.DeviceGetHandleByUUID(d.UUID)
		if r != nvml.SUCCESS {
			return 0, false
		}
		m, r := h.GetMemoryInfo_v2()
		if r != nvml.SUCCESS {
			return 0, false
		}
		return m.Free, true
	}
}

// TestProbeComputeModeAndFreeMemory: the probe creates no context on a
// simulated GPU in EXCLUSIVE_PROCESS or PROHIBITED mode or whose memory is
// nearly full, and says why; on a DEFAULT GPU it measures its context's
// memory as the model's figure.
func TestProbeComputeModeAndFreeMemory(t *testing.T) {
	t.Parallel()
	sc := mustParse(t, `
devices:
  - {count: 1, model: h100-sxm5-80gb, memory_used: 10}
  - {count: 1, model: h100-sxm5-80gb, memory_used: 10, compute_mode: exclusive_process}
  - {count: 1, model: h100-sxm5-80gb, memory_used: 99.5}
  - {count: 1, model: h100-sxm5-80gb, compute_mode: prohibited}
`)
	f, lib, clk := newTestFleet(t, sc, 1)
	clk.Set(time.Minute)
	drv := f.ProbeDriver()
	p := gpuprobe.New(drv, gpuprobe.Options{FreeMemory: nvmlFree(lib)})
	for _, tc := range []struct {
		gpu    int
		reason string
	}{
		{0, ""},
		{1, gpuprobe.SkipComputeModeExclusiveProcess},
		{2, gpuprobe.SkipFreeMemoryLow},
		{3, gpuprobe.SkipComputeModeProhibited},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		res, err := p.Probe(ctx, tc.gpu, gpuprobe.ExporterConfig())
		cancel()
		if err != nil {
			t.Fatalf("GPU %d: %v", tc.gpu, err)
		}
		if tc.reason == "" {
			if res.Skipped != nil || len(res.Errors) > 0 {
				t.Errorf("GPU %d: skipped %+v errors %+v, want measured", tc.gpu, res.Skipped, res.Errors)
			}
			// The buffers get what an H100 needs: two of 4 × its 50 MiB L2.
			if res.ContextMemoryBytes != 520*mib || res.BufferBudgetBytes != 400*mib {
				t.Errorf("GPU %d: context %d bytes, buffer budget %d; want 520 MiB and 400 MiB", tc.gpu, res.ContextMemoryBytes, res.BufferBudgetBytes)
			}
			if res.DeviceCopyBytesPerSecond == 0 {
				t.Errorf("GPU %d: no device copy (the 50 MiB L2 needs 200 MiB buffers)", tc.gpu)
			}
			continue
		}
		if res.Skipped == nil || res.Skipped.Reason != tc.reason {
			t.Errorf("GPU %d: skipped %+v, want %s", tc.gpu, res.Skipped, tc.reason)
		}
	}
	// What the skip spares the tenant: the simulated driver refuses a
	// context on the EXCLUSIVE_PROCESS GPU while the tenant holds one.
	if _, err := drv.CtxCreate(1); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_DEVICE_UNAVAILABLE") {
		t.Errorf("cuCtxCreate on the exclusive-process GPU in use: %v, want CUDA_ERROR_DEVICE_UNAVAILABLE", err)
	}
	if _, err := drv.CtxCreate(3); err == nil || !strings.Contains(err.Error(), "CUDA_ERROR_DEVICE_UNAVAILABLE") {
		t.Errorf("cuCtxCreate on the prohibited GPU: %v", err)
	}
	// The attributes the probe reads.
	for _, c := range []struct {
		a    gpuprobe.Attribute
		want int
	}{{gpuprobe.AttrComputeMode, 3}, {gpuprobe.AttrL2CacheSize, 50 << 20}, {gpuprobe.AttrMaxThreadsPerMultiprocessor, 2048}} {
		if v, err := drv.DeviceAttribute(1, c.a); err != nil || v != c.want {
			t.Errorf("attribute %d = %d, %v; want %d", c.a, v, err, c.want)
		}
	}
}
