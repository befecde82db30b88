package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpulens/gpulens/collector"
)

func TestCgroupAttributor(t *testing.T) {
	t.Parallel()
	id := strings.Repeat("3f", 32)
	other := strings.Repeat("a1", 32)
	root, logs := t.TempDir(), t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(root, "42", "cgroup"), "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-"+id+".scope\n")
	write(filepath.Join(root, "43", "cgroup"), "0::/system.slice/docker-"+other+".scope\n")
	write(filepath.Join(root, "44", "cgroup"), "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod11111111_2222_3333_4444_555555555555.slice/cri-containerd-"+other+".scope\n")
	for _, name := range []string{
		"vllm-llama-0_serving_vllm-" + id + ".log",
		"unrelated_kube-system_coredns-" + strings.Repeat("0", 64) + ".log",
	} {
		write(filepath.Join(logs, name), "")
	}
	a := &cgroupAttributor{procRoot: root, logs: logs, logger: slog.New(slog.DiscardHandler)}
	tests := []struct {
		pid  uint32
		want collector.Attribution
	}{
		{42, collector.Attribution{ContainerID: id, Runtime: "containerd", PodUID: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0",
			Namespace: "serving", Pod: "vllm-llama-0", Container: "vllm"}},
		{43, collector.Attribution{ContainerID: other, Runtime: "docker"}},
		{44, collector.Attribution{ContainerID: other, Runtime: "containerd", PodUID: "11111111-2222-3333-4444-555555555555"}}, // no log symlink
		{99, collector.Attribution{}}, // exited
	}
	for _, tc := range tests {
		if got := a.Attribute(tc.pid); got != tc.want {
			t.Errorf("pid %d: got %+v, want %+v", tc.pid, got, tc.want)
		}
	}
}

func TestAttributionFlagsValidate(t *testing.T) {
	t.Parallel()
	ok := attributionFlags{procfs: "/proc", maxPerGPU: 64, podResourcesWait: 1}
	tests := []struct {
		name   string
		change func(*attributionFlags)
		want   string
	}{
		{"valid", func(*attributionFlags) {}, ""},
		{"cap", func(f *attributionFlags) { f.maxPerGPU = 0 }, "--collector.process.max-per-gpu must be at least 1, got 0"},
		{"procfs", func(f *attributionFlags) { f.procfs = "" }, "--path.procfs must not be empty"},
		{"timeout", func(f *attributionFlags) { f.podResourcesWait = 0 }, "--kubernetes.pod-resources-timeout must be positive, got 0s"},
	}
	for _, tc := range tests {
		f := ok
		tc.change(&f)
		err := f.validate()
		if got := ""; err != nil {
			got = err.Error()
			if got != tc.want {
				t.Errorf("%s: error %q, want %q", tc.name, got, tc.want)
			}
		} else if tc.want != "" {
			t.Errorf("%s: no error, want %q", tc.name, tc.want)
		}
	}
}
