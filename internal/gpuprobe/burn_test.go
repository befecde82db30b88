package gpuprobe_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
	"github.com/gpulens/gpulens/internal/sim/simdriver"
)

// recorder wraps a Driver and counts what a burn acquires and releases; at
// every launch it reads the memory free to the context, and it cancels
// cancelAt launches in (0: never).
type recorder struct {
	gpuprobe.Driver
	mu                   sync.Mutex
	launches             int
	minFree              uint64
	allocs, frees        int
	ctxs, ctxsGone       int
	events, eventsGone   int
	modules, modulesGone int
	cancelAt             int
	cancel               context.CancelFunc
}

func newRecorder(d gpuprobe.Driver) *recorder { return &recorder{Driver: d, minFree: math.MaxUint64} }

func (r *recorder) LaunchKernel(f gpuprobe.Function, grid, block gpuprobe.Dim3, shared uint32, args ...uint64) error {
	free, _, err := r.Driver.MemGetInfo()
	r.mu.Lock()
	r.launches++
	if err == nil {
		r.minFree = min(r.minFree, free)
	}
	if r.cancelAt > 0 && r.launches == r.cancelAt {
		r.cancel()
	}
	r.mu.Unlock()
	return r.Driver.LaunchKernel(f, grid, block, shared, args...)
}

func (r *recorder) count(n *int, err error) error {
	if err == nil {
		r.mu.Lock()
		*n++
		r.mu.Unlock()
	}
	return err
}

func (r *recorder) MemAlloc(b uint64) (gpuprobe.DevicePtr, error) {
	p, err := r.Driver.MemAlloc(b)
	return p, r.count(&r.allocs, err)
}
func (r *recorder) MemFree(p gpuprobe.DevicePtr) error { return r.count(&r.frees, r.Driver.MemFree(p)) }
func (r *recorder) CtxCreate(o int) (gpuprobe.Context, error) {
	c, err := r.Driver.CtxCreate(o)
	return c, r.count(&r.ctxs, err)
}
func (r *recorder) CtxDestroy(c gpuprobe.Context) error {
	return r.count(&r.ctxsGone, r.Driver.CtxDestroy(c))
}
func (r *recorder) EventCreate(flags uint32) (gpuprobe.Event, error) {
	e, err := r.Driver.EventCreate(flags)
	return e, r.count(&r.events, err)
}
func (r *recorder) EventDestroy(e gpuprobe.Event) error {
	return r.count(&r.eventsGone, r.Driver.EventDestroy(e))
}
func (r *recorder) ModuleLoadData(ptx string) (gpuprobe.Module, error) {
	m, err := r.Driver.ModuleLoadData(ptx)
	return m, r.count(&r.modules, err)
}
func (r *recorder) ModuleUnload(m gpuprobe.Module) error {
	return r.count(&r.modulesGone, r.Driver.ModuleUnload(m))
}

// released fails the test unless everything acquired was released.
func (r *recorder) released(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.allocs != r.frees || r.ctxs != r.ctxsGone || r.events != r.eventsGone || r.modules != r.modulesGone {
		t.Errorf("released %d of %d allocations, %d of %d contexts, %d of %d events, %d of %d modules",
			r.frees, r.allocs, r.ctxsGone, r.ctxs, r.eventsGone, r.events, r.modulesGone, r.modules)
	}
}

func newBurnDriver(dev simdriver.Device) (*recorder, *simdriver.Driver) {
	drv := simdriver.New([]simdriver.Device{dev}, simdriver.Options{Now: func() time.Time { return base }, Seed: 7})
	return newRecorder(drv), drv
}

// TestBurnAlone: a 1 s burn holding 2 GiB runs ~10 ms launches back to back
// at the device's FP32 rate, holds the memory while it runs, ends within one
// launch of its duration and releases everything.
func TestBurnAlone(t *testing.T) {
	rec, _ := newBurnDriver(h100())
	res, err := gpuprobe.Burn(context.Background(), rec, 0, gpuprobe.BurnConfig{Duration: time.Second, MemoryBytes: 2 * gib})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Duration < time.Second || res.Duration > time.Second+12*time.Millisecond {
		t.Errorf("duration %v; want 1 s and at most one launch more", res.Duration)
	}
	if res.Launches < 95 || res.Launches > 110 {
		t.Errorf("%d launches; want ~100 of 10 ms", res.Launches)
	}
	if res.LaunchMedian < 9*time.Millisecond || res.LaunchMedian > 11*time.Millisecond {
		t.Errorf("median launch %v; want ~10 ms", res.LaunchMedian)
	}
	// 10 ms at 60e12 FLOP/s over the H100's 132 SMs * 4 blocks * 256
	// threads, 16 FLOP per iteration.
	if want := uint64(277432); res.ItersPerLaunch < want*9/10 || res.ItersPerLaunch > want*11/10 {
		t.Errorf("%d iterations per launch; want ~%d", res.ItersPerLaunch, want)
	}
	if math.Abs(res.FP32FLOPS/60e12-1) > 0.02 {
		t.Errorf("FP32 %.4g FLOP/s; want ~60e12", res.FP32FLOPS)
	}
	if k := res.KernelTime; k > res.Duration || k < res.Duration*99/100 {
		t.Errorf("kernel time %v of %v; want nearly all of it", k, res.Duration)
	}
	if res.MemoryBytes != 2*gib || res.Device.SMs != 132 || !res.Started.After(base) {
		t.Errorf("result %+v", res)
	}
	if free := rec.minFree; free > 78*gib {
		t.Errorf("free memory during the launches %d; want the 2 GiB held", free)
	}
	rec.released(t)
}

// TestBurnTimeSliced: beside a context taking half the GPU, a burn gets
// half the FLOP/s, its launches stay ~10 ms of wall time, and the kernel
// time still covers the whole burn.
func TestBurnTimeSliced(t *testing.T) {
	dev := h100()
	dev.Neighbour = func(time.Time) (float64, time.Duration) { return 0.5, 2 * time.Millisecond }
	rec, _ := newBurnDriver(dev)
	res, err := gpuprobe.Burn(context.Background(), rec, 0, gpuprobe.BurnConfig{Duration: 500 * time.Millisecond, Launch: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.FP32FLOPS/30e12-1) > 0.02 {
		t.Errorf("FP32 %.4g FLOP/s; want ~30e12 (half)", res.FP32FLOPS)
	}
	if res.LaunchMedian < 4500*time.Microsecond || res.LaunchMedian > 5500*time.Microsecond || res.Launches < 95 || res.Launches > 110 {
		t.Errorf("%d launches, median %v; want ~100 of 5 ms", res.Launches, res.LaunchMedian)
	}
	if res.MemoryBytes != 0 {
		t.Errorf("held %d bytes; want none", res.MemoryBytes)
	}
	rec.released(t)
}

// TestBurnCancelled: a context that ends mid-burn stops it after the launch
// in progress, with what it did and the context's error.
func TestBurnCancelled(t *testing.T) {
	rec, _ := newBurnDriver(h100())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec.cancelAt, rec.cancel = 20, cancel
	res, err := gpuprobe.Burn(ctx, rec, 0, gpuprobe.BurnConfig{Duration: time.Minute, MemoryBytes: gib})
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "gpuprobe: burn on device 0: stopped after ") {
		t.Fatalf("err = %v; want the cancellation", err)
	}
	if res.Launches != 20 || res.Duration <= 0 || res.Duration > time.Second || res.FP32FLOPS <= 0 {
		t.Errorf("result %+v; want the 20 launches done", res)
	}
	rec.released(t)

	// Already cancelled: nothing is done.
	rec2, _ := newBurnDriver(h100())
	if _, err := gpuprobe.Burn(ctx, rec2, 0, gpuprobe.BurnConfig{Duration: time.Second}); !errors.Is(err, context.Canceled) || rec2.ctxs != 0 {
		t.Errorf("cancelled before: err %v, %d contexts created", err, rec2.ctxs)
	}
}

// TestBurnErrors: CUDA failures and bad settings are errors that say why,
// and whatever was acquired is released.
func TestBurnErrors(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ordinal int
		cfg     gpuprobe.BurnConfig
		fail    string
		code    int
		want    string
	}{
		{"no duration", 0, gpuprobe.BurnConfig{}, "", 0, "gpuprobe: invalid burn config: Duration must be positive and at most 1h0m0s, got 0s"},
		{"too long", 0, gpuprobe.BurnConfig{Duration: 2 * time.Hour}, "", 0, "Duration must be positive and at most 1h0m0s, got 2h0m0s"},
		{"launch too short", 0, gpuprobe.BurnConfig{Duration: time.Second, Launch: 100 * time.Microsecond}, "", 0, "Launch must be between 1ms and 1s, got 100µs"},
		{"launch over duration", 0, gpuprobe.BurnConfig{Duration: 5 * time.Millisecond, Launch: 10 * time.Millisecond}, "", 0, "Launch (10ms) must not be longer than Duration (5ms)"},
		{"no such device", 2, gpuprobe.BurnConfig{Duration: time.Second}, "", 0, "gpuprobe: burn on device 2: no CUDA device 2 (1 visible)"},
		{"no driver", 0, gpuprobe.BurnConfig{Duration: time.Second}, simdriver.CallInit, 100, "CUDA_ERROR_NO_DEVICE"},
		{"too much memory", 0, gpuprobe.BurnConfig{Duration: time.Second, MemoryBytes: 100 * gib}, "", 0,
			"gpuprobe: burn on device 0: allocating 107374182400 bytes for the memory to hold: cuMemAlloc_v2: CUDA_ERROR_OUT_OF_MEMORY (2)"},
		{"module", 0, gpuprobe.BurnConfig{Duration: time.Second}, simdriver.CallModuleLoadData, 218, "loading the base module: cuModuleLoadDataEx: CUDA_ERROR_INVALID_PTX (218)"},
		{"kernel", 0, gpuprobe.BurnConfig{Duration: time.Second}, gpuprobe.KernelFMA, 700, "gpuprobe: burn on device 0: launch 1: cuLaunchKernel: CUDA_ERROR_ILLEGAL_ADDRESS (700)"},
		{"touch", 0, gpuprobe.BurnConfig{Duration: time.Second, MemoryBytes: gib}, simdriver.CallMemsetD8, 999, "touching the 1073741824 bytes held: cuMemsetD8_v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, drv := newBurnDriver(h100())
			if tc.fail != "" {
				drv.FailCall(tc.fail, tc.code)
			}
			_, err := gpuprobe.Burn(context.Background(), rec, tc.ordinal, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v; want it to contain %q", err, tc.want)
			}
			var ce *gpuprobe.CUDAError
			if tc.code != 0 && (!errors.As(err, &ce) || ce.Code != tc.code) {
				t.Errorf("err %v: want CUDA code %d", err, tc.code)
			}
			rec.released(t)
		})
	}
}

// TestBurnDeadline: a burn shorter than a launch ends after one.
func TestBurnDeadline(t *testing.T) {
	rec, _ := newBurnDriver(h100())
	res, err := gpuprobe.Burn(context.Background(), rec, 0, gpuprobe.BurnConfig{Duration: 2 * time.Millisecond, Launch: 2 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Duration < 2*time.Millisecond || res.Duration > 5*time.Millisecond || res.Launches == 0 {
		t.Errorf("result %+v; want it to end within a launch of 2 ms", res)
	}
}

// stalled is a Driver whose host thread stalls once, just before the
// launch numbered at: the host clock jumps past the driver's by stall, as
// when the OS deschedules the burn between recording the start event and
// launching (that launch's elapsed time then includes the stall, as on a
// real GPU whose stream sat idle).
type stalled struct {
	gpuprobe.Driver
	host         *atomic.Int64 // the host clock's offset from base
	at, launches int
	stall        time.Duration
}

func (s *stalled) LaunchKernel(f gpuprobe.Function, grid, block gpuprobe.Dim3, shared uint32, args ...uint64) error {
	if s.launches++; s.launches == s.at {
		s.host.Store(int64(s.Driver.Now().Sub(base) + s.stall))
	}
	return s.Driver.LaunchKernel(f, grid, block, shared, args...)
}

// TestBurnResizesAfterAHostStall: a stall of the host before the first
// launch makes it look 40 ms long, so the burn sizes its launches far too
// short; the median of the launches that follow corrects the size, and
// the burn still runs ~10 ms launches at the device's rate. Without the
// correction it ran thousands of launches of a few microseconds.
func TestBurnResizesAfterAHostStall(t *testing.T) {
	var host atomic.Int64
	drv := simdriver.New([]simdriver.Device{h100()}, simdriver.Options{Now: func() time.Time { return base.Add(time.Duration(host.Load())) }, Seed: 7})
	s := &stalled{Driver: drv, host: &host, at: 1, stall: 40 * time.Millisecond}
	res, err := gpuprobe.Burn(context.Background(), s, 0, gpuprobe.BurnConfig{Duration: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if res.Launches < 95 || res.Launches > 115 || res.LaunchMedian < 9*time.Millisecond || res.LaunchMedian > 11*time.Millisecond {
		t.Errorf("%d launches, median %v; want ~100 of 10 ms", res.Launches, res.LaunchMedian)
	}
	if want := uint64(277432); res.ItersPerLaunch < want*8/10 || res.ItersPerLaunch > want*12/10 {
		t.Errorf("%d iterations per launch; want ~%d", res.ItersPerLaunch, want)
	}
	// The stall is idle GPU time inside the burn: 40 ms of 1 s.
	if math.Abs(res.FP32FLOPS/(60e12*0.96)-1) > 0.02 {
		t.Errorf("FP32 %.4g FLOP/s; want ~%.4g", res.FP32FLOPS, 60e12*0.96)
	}
}
