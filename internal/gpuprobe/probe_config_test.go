package gpuprobe_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gpulens/gpulens/internal/gpuprobe"
)

func TestConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name           string
		cfg            gpuprobe.Config
		budget, window time.Duration
		maxMemory      uint64
	}{
		{"default", gpuprobe.DefaultConfig(), 2 * time.Second, time.Second, 2 << 30},
		{"exporter", gpuprobe.ExporterConfig(), 250 * time.Millisecond, 100 * time.Millisecond, 2 << 30},
	} {
		if err := tc.cfg.Validate(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
		if tc.cfg.GPUTimeBudget != tc.budget || tc.cfg.StolenWindow != tc.window || tc.cfg.MaxMemoryBytes != tc.maxMemory {
			t.Errorf("%s: budget %s window %s memory %d, want %s %s %d", tc.name, tc.cfg.GPUTimeBudget, tc.cfg.StolenWindow, tc.cfg.MaxMemoryBytes, tc.budget, tc.window, tc.maxMemory)
		}
		if tc.cfg.ContextReserveBytes != 768<<20 {
			t.Errorf("%s: context reserve %d, want 768 MiB", tc.name, tc.cfg.ContextReserveBytes)
		}
		if tc.cfg.Fill || tc.cfg.FillStep != 1<<30 {
			t.Errorf("%s: fill %v step %d, want off with 1 GiB steps", tc.name, tc.cfg.Fill, tc.cfg.FillStep)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(*gpuprobe.Config)
		want   []string // "" : valid
	}{
		{"valid", func(*gpuprobe.Config) {}, nil},
		{"memory", func(c *gpuprobe.Config) { c.MaxMemoryBytes = 1 << 20 }, []string{"MaxMemoryBytes must be at least"}},
		{"budget zero", func(c *gpuprobe.Config) { c.GPUTimeBudget = 0 }, []string{"GPUTimeBudget must be positive"}},
		{"budget negative", func(c *gpuprobe.Config) { c.GPUTimeBudget = -time.Second }, []string{"GPUTimeBudget must be positive"}},
		{"window zero", func(c *gpuprobe.Config) { c.StolenWindow = 0 }, []string{"StolenWindow must be positive"}},
		{"window over budget", func(c *gpuprobe.Config) { c.StolenWindow = c.GPUTimeBudget }, []string{"StolenWindow (250ms) must be shorter than GPUTimeBudget (250ms)"}},
		{"window skipped", func(c *gpuprobe.Config) {
			c.StolenWindow, c.GapThreshold, c.MaxGaps, c.Skip = 0, 0, 0, []string{"stolen"}
		}, nil},
		{"threshold zero", func(c *gpuprobe.Config) { c.GapThreshold = 0 }, []string{"GapThreshold must be positive"}},
		{"threshold over window", func(c *gpuprobe.Config) { c.GapThreshold = c.StolenWindow }, []string{"GapThreshold (100ms) must be shorter than one stolen-time window, StolenWindow / StolenWindows (25ms)"}},
		{"threshold over the single window", func(c *gpuprobe.Config) { c.GapThreshold, c.StolenWindows = c.StolenWindow, 0 }, []string{"GapThreshold (100ms) must be shorter than StolenWindow (100ms)"}},
		{"windows out of range", func(c *gpuprobe.Config) { c.StolenWindows = 65 }, []string{"StolenWindows must be between 0 and 64, got 65"}},
		{"windows too short", func(c *gpuprobe.Config) { c.StolenWindows = 64; c.StolenWindow = 50 * time.Millisecond }, []string{"StolenWindow / StolenWindows (50ms / 64) must be at least 1ms"}},
		{"max gaps zero", func(c *gpuprobe.Config) { c.MaxGaps = 0 }, []string{"MaxGaps must be between 1 and 8192, got 0"}},
		{"max gaps huge", func(c *gpuprobe.Config) { c.MaxGaps = 1 << 20 }, []string{"MaxGaps must be between"}},
		{"fill step", func(c *gpuprobe.Config) { c.Fill, c.FillStep = true, 4096 }, []string{"FillStep must be at least"}},
		{"fill step unused", func(c *gpuprobe.Config) { c.FillStep = 0 }, nil},
		{"skip unknown", func(c *gpuprobe.Config) { c.Skip = []string{"fp64"} }, []string{`Skip: unknown measurement "fp64" (known: memory, h2d,`}},
		{"skip all", func(c *gpuprobe.Config) { c.Skip = gpuprobe.Measurements }, nil},
		{"several", func(c *gpuprobe.Config) { c.GPUTimeBudget, c.MaxGaps = 0, -1 }, []string{"GPUTimeBudget must be positive", "MaxGaps must be between"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := gpuprobe.ExporterConfig()
			tc.change(&cfg)
			err := cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted %+v", cfg)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}
