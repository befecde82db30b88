package nvmlret

import (
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
