package collector

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// TestGPMSampleLifecycle: two samples per GPU and per GPU instance,
// allocated once; freed when an instance disappears and when the GPU is
// lost.
func TestGPMSampleLifecycle(t *testing.T) {
	t.Parallel()
	s, reg, clock := newBenchFleet(t, 1, 7, true) // two cycles already run
	lib := s.lib.(*mock.Interface)
	gpu := s.workers[0].handle.(*benchGPU)
	for range 3 {
		cycleAll(s)
		clock.Advance(time.Second)
	}
	if n := len(lib.GpmSampleAllocCalls()); n != 16 {
		t.Errorf("%d samples allocated over 5 cycles, want 16 (2 for the GPU, 2 per instance)", n)
	}
	if n := len(lib.GpmSampleFreeCalls()); n != 0 {
		t.Errorf("%d samples freed while nothing changed", n)
	}
	if v := series(t, reg)["gpulens_mig_sm_activity_ratio{compute_instance_id=0,gpu=0,gpu_instance_id=7,mig_uuid=MIG-00000000-0006-0000-0000-000000000000,uuid=GPU-00000000-0000-0000-0000-000000000000}"]; v != 0.42 {
		t.Errorf("instance 7 SM activity %v, want 0.42", v)
	}

	gpu.mig = gpu.mig[:5] // two instances destroyed
	cycleAll(s)
	if n := len(lib.GpmSampleFreeCalls()); n != 4 {
		t.Errorf("%d samples freed after two instances went away, want 4", n)
	}
	if n := len(find(series(t, reg), "gpulens_mig_instance_info")); n != 5 {
		t.Errorf("%d MIG instances after two went away, want 5", n)
	}

	gpu.GetMigModeFunc = nil
	lost := &lostGPU{benchGPU: gpu}
	s.workers[0].handle = lost
	clock.Advance(time.Second)
	cycleAll(s)
	if n := len(lib.GpmSampleFreeCalls()); n != 16 {
		t.Errorf("%d samples freed after the GPU was lost, want all 16", n)
	}
}

// lostGPU answers GPM sample reads with ERROR_GPU_IS_LOST.
type lostGPU struct{ *benchGPU }

func (g *lostGPU) GpmSampleGet(nvml.GpmSample) nvml.Return         { return nvml.ERROR_GPU_IS_LOST }
func (g *lostGPU) GpmMigSampleGet(int, nvml.GpmSample) nvml.Return { return nvml.ERROR_GPU_IS_LOST }
