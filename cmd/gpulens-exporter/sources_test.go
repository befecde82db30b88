package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/gpuprobe"
)

// openSources under --sim.scenario returns the fleet's every source: its
// NVML (initialised), its tenants for procfs and the kubelet, its host,
// its prices (when the scenario has them) and its simulated CUDA driver.
func TestOpenSourcesSimulated(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		scenario string
		gpus     int
		priced   bool
	}{
		{"mixed-fleet", 7, true},
		{"noisy-neighbour", 2, false},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			o, err := parseFlags([]string{"--sim.scenario=" + tc.scenario}, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			src, err := openSources(context.Background(), o, logger)
			if err != nil {
				t.Fatal(err)
			}
			defer src.close()
			if n, ret := src.nvml.DeviceGetCount(); ret != 0 || n != tc.gpus {
				t.Errorf("NVML: %d GPUs (%v), want %d", n, ret, tc.gpus)
			}
			if !src.simulated {
				t.Error("not labelled simulated")
			}
			p := src.processes
			if p.ProcRoot != os.DevNull || p.MaxPerGPU != o.attribution.maxPerGPU || p.UsageInterval != o.interval {
				t.Errorf("process options %+v: want procfs off, max %d per GPU, usage every %s", p, o.attribution.maxPerGPU, o.interval)
			}
			if _, ok := p.Attributor.(simAttributor); !ok {
				t.Errorf("attributor %T, want the scenario's tenants", p.Attributor)
			}
			if _, ok := p.Allocations.(simAllocations); !ok {
				t.Errorf("allocations %T, want the scenario's tenants", p.Allocations)
			}
			if _, ok := p.Usage.(simUsage); !ok {
				t.Errorf("usage %T, want the scenario's tenants", p.Usage)
			}
			if _, ok := src.host.(simHost); !ok {
				t.Errorf("host %T, want the scenario's host", src.host)
			}
			if (src.prices != nil) != tc.priced {
				t.Errorf("prices %v, want priced %v", src.prices != nil, tc.priced)
			}
			if tc.priced {
				uuid := deviceUUID(t, src, 0)
				if usd, ok := src.prices.PriceOf(collector.Device{UUID: uuid}); !ok || usd != 3.5 {
					t.Errorf("GPU 0 price %v %v, want the scenario's 3.5", usd, ok)
				}
			}
			pr, closeFn, err := src.prober(gpuprobe.Options{}, false)()
			if err != nil || pr == nil || closeFn != nil {
				t.Errorf("probe opener: %v %v %v; want the simulated driver, nothing to unload", pr, closeFn != nil, err)
			}
		})
	}
}

func deviceUUID(t *testing.T, src *sources, i int) string {
	t.Helper()
	d, ret := src.nvml.DeviceGetHandleByIndex(i)
	if ret != 0 {
		t.Fatalf("GPU %d: %v", i, ret)
	}
	uuid, ret := d.GetUUID()
	if ret != 0 {
		t.Fatalf("GPU %d UUID: %v", i, ret)
	}
	return uuid
}
