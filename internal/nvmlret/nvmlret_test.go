package nvmlret

import (
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Without libnvidia-ml loaded go-nvml names every code it knows by its
// constant (and anything else "unknown return value: N"): the table must
// know the same codes by the same names, so a code a newer go-nvml adds
// fails here instead of becoming "code_N" on a label.
func TestTableMatchesGoNVML(t *testing.T) {
	known := 0
	for r := nvml.Return(-10); r < 1000; r++ {
		goName := r.Error() //nolint:forbidigo // the table checked against go-nvml's names
		if strings.HasPrefix(goName, "unknown return value") {
			if _, ok := Parse(Name(r)); ok {
				t.Errorf("%d: go-nvml does not know it, the table calls it %s", r, Name(r))
			}
			continue
		}
		known++
		if Name(r) != goName {
			t.Errorf("Name(%d) = %q, go-nvml says %q", r, Name(r), goName)
		}
		if back, ok := Parse(goName); !ok || back != r {
			t.Errorf("Parse(%q) = %d, %v", goName, back, ok)
		}
	}
	if known != len(codes) {
		t.Errorf("go-nvml knows %d codes, the table %d", known, len(codes))
	}
}

func TestSpellings(t *testing.T) {
	for _, tc := range []struct {
		r           nvml.Return
		name, label string
		outcome     Outcome
	}{
		{nvml.SUCCESS, "SUCCESS", "success", OK},
		{nvml.ERROR_NOT_SUPPORTED, "ERROR_NOT_SUPPORTED", "not_supported", Absent},
		{nvml.ERROR_FUNCTION_NOT_FOUND, "ERROR_FUNCTION_NOT_FOUND", "function_not_found", Absent},
		{nvml.ERROR_GPU_IS_LOST, "ERROR_GPU_IS_LOST", "gpu_is_lost", Lost},
		{nvml.ERROR_UNKNOWN, "ERROR_UNKNOWN", "unknown", Failed},
		{nvml.ERROR_DRIVER_NOT_LOADED, "ERROR_DRIVER_NOT_LOADED", "driver_not_loaded", Failed},
		{nvml.Return(4242), "RETURN_4242", "code_4242", Failed},
	} {
		if got := Name(tc.r); got != tc.name {
			t.Errorf("Name(%d) = %q, want %q", tc.r, got, tc.name)
		}
		if got := Label(tc.r); got != tc.label {
			t.Errorf("Label(%d) = %q, want %q", tc.r, got, tc.label)
		}
		if got := Classify(tc.r); got != tc.outcome {
			t.Errorf("Classify(%d) = %d, want %d", tc.r, got, tc.outcome)
		}
	}
	// Without the library go-nvml's text is the name: said once.
	if got := Describe(nvml.ERROR_UNKNOWN); got != "ERROR_UNKNOWN" {
		t.Errorf("Describe = %q", got)
	}
	if _, ok := Parse("ERROR_OOPS"); ok {
		t.Error("Parse accepted ERROR_OOPS")
	}
	names := Names()
	if len(names) != len(codes)-1 || names[0] != "ERROR_ALREADY_INITIALIZED" || names[len(names)-1] != "ERROR_VGPU_ECC_NOT_SUPPORTED" {
		t.Errorf("Names() = %v", names)
	}
}

// lists is a device's three process lists, each with its return code.
type lists struct {
	compute, mps, graphics []uint32
	rc, rm, rg             nvml.Return
}

func infos(pids []uint32) []nvml.ProcessInfo {
	var out []nvml.ProcessInfo
	for _, p := range pids {
		out = append(out, nvml.ProcessInfo{Pid: p})
	}
	return out
}

func (l lists) GetComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return infos(l.compute), l.rc
}
func (l lists) GetMPSComputeRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return infos(l.mps), l.rm
}
func (l lists) GetGraphicsRunningProcesses() ([]nvml.ProcessInfo, nvml.Return) {
	return infos(l.graphics), l.rg
}

// TestProcessPIDs: the union of the lists that answer, each PID once; no
// list answering is unknown, an empty answer is nobody.
func TestProcessPIDs(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    lists
		want []uint32
		ok   bool
	}{
		{"all three", lists{compute: []uint32{7, 9}, mps: []uint32{9, 11}, graphics: []uint32{3, 7}}, []uint32{7, 9, 11, 3}, true},
		{"MPS not supported", lists{compute: []uint32{7}, mps: []uint32{8}, rm: nvml.ERROR_NOT_SUPPORTED}, []uint32{7}, true},
		{"nobody", lists{}, nil, true},
		{"vGPU guest", lists{compute: []uint32{1}, rc: nvml.ERROR_NOT_FOUND, rm: nvml.ERROR_NOT_FOUND, rg: nvml.ERROR_NOT_FOUND}, nil, false},
	} {
		pids, ok := ProcessPIDs(tc.l)
		if ok != tc.ok || !slices.Equal(pids, tc.want) {
			t.Errorf("%s: %v, %v; want %v, %v", tc.name, pids, ok, tc.want, tc.ok)
		}
	}
}
